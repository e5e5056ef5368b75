"""The options of recipes/adamw_8bit.py, parsed like the shared arguments; loaded by that recipe (and the
workbench's list of recipes), not by every run."""

from __future__ import annotations

import os
from dataclasses import dataclass

from recipes_lib.config.recipe_spec import option
from recipes_lib.errors import ConfigError


@dataclass
class Adam8bitArguments:
    """The options of recipes/adamw_8bit.py."""

    embedding_optimizer_bits: int = option(
        32, "Bits of AdamW state for nn.Embedding weights: 32 (bitsandbytes' advice) or 8.", choices=[8, 32]
    )
    paged_optimizer: bool = option(
        False, "PagedAdamW8bit: state pages out to CPU memory when the GPU runs short."
    )

    def __post_init__(self):
        # Under DeepSpeed ZeRO-Offload (deepspeed_zero2_offload.yaml) accelerate replaces a recipe's own
        # optimizer with DeepSpeed's CPU Adam, so the 8-bit (and paged) state would never exist: the run
        # would not be 8-bit AdamW. Refused as the options are parsed, before anything loads.
        launched = os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
        offload = os.environ.get("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "none").lower()
        if launched and offload not in ("", "none"):
            raise ConfigError(
                f"adamw_8bit was launched with DeepSpeed's optimizer offload (offload_optimizer_device: {offload}). "
                "There accelerate replaces the recipe's 8-bit AdamW with DeepSpeed's CPU Adam (32-bit state), so "
                "the run would not be what the recipe says. Run recipes/full_ft.py with "
                "accelerate_configs/deepspeed_zero2_offload.yaml (AdamW's state is on the CPU either way), or "
                "adamw_8bit with single_gpu.yaml (add --paged_optimizer true to let its state page out to CPU memory)."
            )
