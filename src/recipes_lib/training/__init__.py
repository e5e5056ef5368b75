"""Training: the Trainer subclass, its callbacks, checkpoints, --auto_batch_size, safeguards."""
