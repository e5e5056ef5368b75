"""Full fine-tuning with bitsandbytes' 8-bit AdamW: every weight trains, the optimizer state shrinks 4x.

    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/adamw_8bit.py
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/adamw_8bit.py --config recipes/configs/adamw_8bit.yaml

Same defaults as full_ft.py. AdamW's two moments are stored block-wise quantized in uint8
(2 x 1 B + 2 x 4 B of absmax per 256 elements = 2.03 B per parameter instead of 8 B), for every tensor
of at least 4,096 elements; biases and LayerNorm keep fp32 state. Memory per parameter:
4 B weights + 4 B gradients + ~2 B state = ~10 B instead of 16 B.

Embeddings: bitsandbytes advises 32-bit state for nn.Embedding weights (rare tokens get rare,
spiky gradients that 8-bit moments track badly), so that is the default: `embedding_optimizer_bits: 32`
keeps them at 8 B per parameter (bert-base: 23.8M of its 109M parameters, 30,522 x 768 words +
512 x 768 positions). `--embedding_optimizer_bits 8` quantizes them too: (8 - 2.03) B x 23.8M = 136 MiB less.
"""

from dataclasses import dataclass, field

from recipes_lib.optimizers import create_adamw_8bit
from recipes_lib.runner import Recipe, run_recipe


@dataclass
class Adam8bitArguments:
    embedding_optimizer_bits: int = field(
        default=32,
        metadata={
            "help": "Bits of AdamW state for nn.Embedding weights: 32 (bitsandbytes' advice) or 8.",
            "choices": [8, 32],
        },
    )
    paged_optimizer: bool = field(
        default=False,
        metadata={"help": "PagedAdamW8bit: state pages out to CPU memory when the GPU runs short."},
    )


def create_optimizer(model, arguments):
    options = arguments.extra["Adam8bitArguments"]
    return create_adamw_8bit(
        model, arguments.training, options.embedding_optimizer_bits, paged=options.paged_optimizer
    )


RECIPE = Recipe(name="adamw_8bit", argument_classes=(Adam8bitArguments,), create_optimizer=create_optimizer)

if __name__ == "__main__":
    run_recipe(RECIPE)
