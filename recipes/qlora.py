"""QLoRA: LoRA on a frozen base whose linear layers are stored in 4-bit NF4 (bitsandbytes).

    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/qlora.py
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/qlora.py --config recipes/configs/qlora.yaml

Everything as in lora.py (same options, learning rate and saved adapter), but the encoder's linear
weights are NF4 with double quantization (4.13 bits per weight), their matmuls in the run's precision
(bf16 on GPUs that have it natively, fp16 on older ones, fp32 on CPUs). NEW marks what QLoRA changes.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.recipe_spec import RecipeSpec, TrainingShape
from recipes_lib.modeling.adapters import (  # NEW
    LORA_LEARNING_RATE,
    LoraArguments,
    add_lora,
    check_4bit_support,
    nf4_quantization_config,
    prepare_4bit_model,
    save_adapter_extras,
)
from recipes_lib.run import RecipeRun, run_main

SPEC = RecipeSpec(
    name="qlora",
    options=LoraArguments,  # NEW: the same options as lora.py
    training_defaults={"learning_rate": LORA_LEARNING_RATE},  # NEW: 1e-3 (adapters.py says why)
    shape=lambda lora: TrainingShape(adapters=lora.shape(), quantized_base=True),  # NEW: for the planner
)


def main(argv=None):
    # Arguments: model, data and training options; the --config YAML first, the command line wins
    args = parse_arguments(SPEC, argv)
    lora = args.options(LoraArguments)  # NEW
    check_4bit_support(args.training.device)  # NEW: 4-bit runs on this device, before anything loads
    with RecipeRun(args, SPEC) as run:
        # Data: load, map labels to ids, tokenize (checks on config.json and columns come first)
        run.load_data()
        # Model: the pretrained encoder with a new classification head
        quantization = nf4_quantization_config(
            run.model_config, run.precision
        )  # NEW: NF4, the run's precision
        model = run.load_model(quantization_config=quantization)  # NEW
        model = add_lora(prepare_4bit_model(model), lora)  # NEW: frozen 4-bit base; adapters and head train
        # Trainer: what trains, the optimizer (--optim unless one is handed over), the run's callbacks
        run.trainer(model)
        # Train
        run.train()
        # Save: the model and the tokenizer in output_dir
        run.save()
        if run.is_main_process:  # NEW: config.json (label names) and the 4-bit settings; the merged model
            save_adapter_extras(args, run.model_config, run.tokenizer, lora, quantization)
        # Evaluate: the task's metrics (accuracy, macro-F1, ...) on validation; results.json on leaving the block
        run.evaluate()
    return run.results


if __name__ == "__main__":
    run_main(main)
