"""QLoRA: LoRA on a frozen base whose linear layers are stored in 4-bit NF4 (bitsandbytes).

    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/qlora.py
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/qlora.py --config recipes/configs/qlora.yaml

Everything as in lora.py (same options, learning rate and saved adapter), but the encoder's linear
weights are NF4 with double quantization (4.13 bits per weight) and their matmuls run in the run's
precision (bf16 on GPUs that have it natively, fp16 on older ones, fp32 on CPUs).
bert-base: its 85.5M linear weights take 326 MiB in fp32 and 42 MiB in NF4; embeddings, biases,
LayerNorm and the head stay fp32. Add --activation_checkpointing to also trade compute for
activation memory, as the QLoRA paper does. Runs on CPU too (bitsandbytes 0.50), slowly.
"""

from recipes_lib.adapters import (
    LORA_LEARNING_RATE,
    LoraArguments,
    add_lora,
    check_4bit_support,
    load_4bit_model,
    save_adapter_extras,
)
from recipes_lib.runner import Recipe, run_recipe


def build_model(arguments, model_config):
    lora = arguments.extra["LoraArguments"]
    training = arguments.training
    model = load_4bit_model(arguments.model, model_config, lora, training.device, training.precision)
    return add_lora(model, lora)


RECIPE = Recipe(
    name="qlora",
    argument_classes=(LoraArguments,),
    training_defaults={"learning_rate": LORA_LEARNING_RATE},
    build_model=build_model,
    save_extras=save_adapter_extras,
    preflight=check_4bit_support,  # bitsandbytes 4-bit works on this device, checked before anything loads
)

if __name__ == "__main__":
    run_recipe(RECIPE)
