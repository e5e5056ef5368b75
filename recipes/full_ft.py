"""Full fine-tuning: every weight of the encoder and the new classification head trains with AdamW.

    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/full_ft.py
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/full_ft.py --config recipes/configs/full_ft.yaml

With no arguments: bert-base-uncased on GLUE SST-2, batch 32, lr 2e-5, 3 epochs (`--help` lists
every option). Memory per parameter: 4 B weights + 4 B gradients + 8 B AdamW state = 16 B.
The other recipes are this script plus the lines marked NEW.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_lib.run import RecipeRun, run_main

SPEC = RecipeSpec(name="full_ft")


def main(argv=None):
    # Arguments: model, data and training options; the --config YAML first, the command line wins
    args = parse_arguments(SPEC, argv)
    with RecipeRun(args, SPEC) as run:
        # Data: load, map labels to ids, tokenize (checks on config.json and columns come first)
        run.load_data()
        # Model: the pretrained encoder with a new classification head
        model = run.load_model()
        # Trainer: what trains, the optimizer (--optim unless one is handed over), the run's callbacks
        run.trainer(model)
        # Train
        run.train()
        # Save: the model and the tokenizer in output_dir
        run.save()
        # Evaluate: the task's metrics (accuracy, macro-F1, ...) on validation; results.json on leaving the block
        run.evaluate()
    return run.results


if __name__ == "__main__":
    run_main(main)
