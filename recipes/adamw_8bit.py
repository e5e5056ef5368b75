"""Full fine-tuning with bitsandbytes' 8-bit AdamW: every weight trains, the optimizer state shrinks 4x.

    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/adamw_8bit.py
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/adamw_8bit.py --config recipes/configs/adamw_8bit.yaml

Same defaults as full_ft.py. AdamW's moments are stored block-wise in uint8: 2 x 1 B + 2 x 4 B of
absmax per 256 elements = 2.03 B per parameter instead of 8 B, for tensors of 4,096 elements or
more. nn.Embedding weights keep 32-bit state by default (bitsandbytes' advice). The lines marked
NEW are what this recipe changes in full_ft.py.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.recipe_spec import RecipeSpec, TrainingShape
from recipes_lib.modeling.optimizers import Adam8bitArguments, create_adamw_8bit  # NEW
from recipes_lib.run import RecipeRun, run_main

SPEC = RecipeSpec(
    name="adamw_8bit",
    options=Adam8bitArguments,  # NEW
    shape=lambda options: TrainingShape(
        optimizer_bits=8, embedding_optimizer_bits=options.embedding_optimizer_bits
    ),
)


def main(argv=None):
    # Arguments: model, data and training options; the --config YAML first, the command line wins
    args = parse_arguments(SPEC, argv)
    options = args.options(Adam8bitArguments)  # NEW
    with RecipeRun(args, SPEC) as run:
        # Data: load, map labels to ids, tokenize (checks on config.json and columns come first)
        run.load_data()
        # Model: the pretrained encoder with a new classification head
        model = run.load_model()
        optimizer = create_adamw_8bit(  # NEW: bitsandbytes AdamW8bit, the Trainer's parameter groups
            model, args.training, options.embedding_optimizer_bits, paged=options.paged_optimizer
        )
        # Trainer: what trains, the optimizer (--optim unless one is handed over), the run's callbacks
        run.trainer(model, optimizer)
        # Train
        run.train()
        # Save: the model and the tokenizer in output_dir
        run.save()
        # Evaluate: the task's metrics (accuracy, macro-F1, ...) on validation; results.json on leaving the block
        run.evaluate()
    return run.results


if __name__ == "__main__":
    run_main(main)
