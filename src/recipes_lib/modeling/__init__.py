"""Models: the per-family profiles, loading, LoRA/QLoRA adapters, optimizers."""
