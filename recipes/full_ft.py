"""Full fine-tuning: every weight of the encoder and the new classification head trains with AdamW.

    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/full_ft.py
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/full_ft.py --config recipes/configs/full_ft.yaml

With no arguments: bert-base-uncased on GLUE SST-2, batch 32, lr 2e-5, 3 epochs (`--help` lists
every option). Memory per parameter: 4 B weights + 4 B gradients + 8 B AdamW states = 16 B, so
bert-base (110M parameters) needs about 1.6 GiB before activations.
"""

from recipes_lib.runner import Recipe, run_recipe

RECIPE = Recipe(name="full_ft")

if __name__ == "__main__":
    run_recipe(RECIPE)
