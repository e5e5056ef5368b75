"""LoRA: the encoder is frozen; low-rank adapters on the attention projections and the head train.

    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/lora.py
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/lora.py --config recipes/configs/lora.yaml

Same defaults as full_ft.py except the learning rate, 1e-3 instead of 2e-5. r=8, alpha=16,
dropout 0.1 on `query` and `value`; `--lora_target_modules all-linear` adapts every linear layer.
bert-base: 296,450 trainable parameters (0.27%), so gradients and AdamW state (4 + 8 B each) are
3.4 MiB; the frozen weights still take 4 B per parameter: 109.5M x 4 B = 418 MiB.

output_dir holds the adapter (adapter_model.safetensors, with the head) and the tokenizer;
`--merge_adapter` also writes a plain model to output_dir/merged.
"""

from recipes_lib.adapters import LORA_LEARNING_RATE, LoraArguments, add_lora, save_adapter_extras
from recipes_lib.modeling import load_model
from recipes_lib.runner import Recipe, run_recipe


def build_model(arguments, model_config):
    return add_lora(load_model(arguments.model, model_config), arguments.extra["LoraArguments"])


RECIPE = Recipe(
    name="lora",
    argument_classes=(LoraArguments,),
    training_defaults={"learning_rate": LORA_LEARNING_RATE},  # 1e-3, see adapters.py for why
    build_model=build_model,
    save_extras=save_adapter_extras,
)

if __name__ == "__main__":
    run_recipe(RECIPE)
