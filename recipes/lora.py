"""LoRA: the encoder is frozen; low-rank adapters on the attention projections and the head train.

    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/lora.py
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/lora.py --config recipes/configs/lora.yaml

Same defaults as full_ft.py except the learning rate, 1e-3 instead of 2e-5. r=8, alpha=16,
dropout 0.1 on `query` and `value`; `--lora_target_modules all-linear` adapts every linear layer.
output_dir holds the adapter with the head; `--merge_adapter` also writes a plain model to
output_dir/merged. The lines marked NEW are what LoRA changes in full_ft.py.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.recipe_spec import RecipeSpec, TrainingShape
from recipes_lib.modeling.adapters import (  # NEW
    LORA_LEARNING_RATE,
    LoraArguments,
    add_lora,
    save_adapter_extras,
)
from recipes_lib.run import RecipeRun, run_main

SPEC = RecipeSpec(
    name="lora",
    options=LoraArguments,  # NEW: lora_r, lora_alpha, lora_target_modules, ...
    training_defaults={"learning_rate": LORA_LEARNING_RATE},  # NEW: 1e-3 (adapters.py says why)
    shape=lambda lora: TrainingShape(adapters=lora.shape()),  # NEW: what trains, for the planner
)


def main(argv=None):
    # Arguments: model, data and training options; the --config YAML first, the command line wins
    args = parse_arguments(SPEC, argv)
    lora = args.options(LoraArguments)  # NEW
    with RecipeRun(args, SPEC) as run:
        # Data: load, map labels to ids, tokenize (checks on config.json and columns come first)
        run.load_data()
        # Model: the pretrained encoder with a new classification head
        model = run.load_model()
        model = add_lora(model, lora)  # NEW: freeze it; adapters and the head train
        # Trainer: what trains, the optimizer (--optim unless one is handed over), the run's callbacks
        run.trainer(model)
        # Train
        run.train()
        # Save: the model and the tokenizer in output_dir
        run.save()
        if run.is_main_process:  # NEW: config.json (label names) beside the adapter; the merged model
            save_adapter_extras(args, run.model_config, run.tokenizer, lora)
        # Evaluate: the task's metrics (accuracy, macro-F1, ...) on validation; results.json on leaving the block
        run.evaluate()
    return run.results


if __name__ == "__main__":
    run_main(main)
