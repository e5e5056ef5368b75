"""The options of the recipes that have their own, parsed like the shared arguments. They live here so
that the workbench's list of recipes and the parser can name them without loading models or peft."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from recipes_lib.config.recipe_spec import LoraShape, option
from recipes_lib.errors import ConfigError

MERGED_SUBDIR = "merged"


@dataclass
class LoraArguments:
    lora_r: int = option(8, "Rank r of the LoRA update B A (r x d_in and d_out x r).")
    lora_alpha: float = option(
        16, "LoRA scaling numerator: the update is multiplied by alpha / r (16/8 = 2)."
    )
    lora_dropout: float = option(0.1, "Dropout on the LoRA branch's input.")
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["auto"],
        metadata={
            "help": "Names of the linear layers that get adapters (BERT: query key value dense), "
            "'all-linear' for every linear layer except the classification head, or 'auto': the family's "
            "attention query and value projections (`recipes-lib families` lists each family's)."
        },
    )
    lora_train_pooler: bool = option(
        False, "Also train the pooler (the dense layer before the head) in full and save it with the adapter."
    )
    merge_adapter: bool = option(
        False,
        f"Also save a plain model with the adapter merged into the weights, in output_dir/{MERGED_SUBDIR}.",
    )

    def __post_init__(self):  # checked before any data or weights are loaded
        if self.lora_r <= 0:
            raise ConfigError(
                f"lora_r is {self.lora_r}; the rank must be a positive integer (8 and 16 are usual)."
            )
        if self.lora_alpha <= 0:
            raise ConfigError(f"lora_alpha is {self.lora_alpha}; it must be positive (usually 2 x lora_r).")
        if not 0 <= self.lora_dropout < 1:
            raise ConfigError(f"lora_dropout is {self.lora_dropout}; it must be in [0, 1).")
        if not target_modules(self):
            raise ConfigError("lora_target_modules is empty; name at least one layer, e.g. query value.")

    def shape(self) -> LoraShape:
        return LoraShape(
            r=self.lora_r,
            alpha=self.lora_alpha,
            target_modules=target_modules(self),
            dropout=self.lora_dropout,
            train_pooler=self.lora_train_pooler,
        )


def target_modules(lora: LoraArguments) -> tuple[str, ...] | str:
    """Layer names, or one of the strings 'all-linear' and 'auto'."""
    names = [name.strip() for item in lora.lora_target_modules for name in item.split(",") if name.strip()]
    lowered = [name.lower() for name in names]
    return lowered[0] if lowered in (["all-linear"], ["auto"]) else tuple(names)


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


@dataclass
class QloraArguments(LoraArguments):
    """The options of recipes/qlora.py: LoRA's, and the bits of the quantized base."""

    base_bits: int = option(
        4,
        "Bits of the frozen base's linear weights: 4 (NF4 with double quantization, QLoRA) or 8 "
        "(bitsandbytes' LLM.int8: int8 weights and an fp32 scale per output row, 1 B per weight "
        "instead of 0.52 B; closer to the full-precision base).",
        choices=[4, 8],
    )

    def __post_init__(self):
        super().__post_init__()
        if self.base_bits not in (4, 8):
            raise ConfigError(
                f"base_bits is {self.base_bits}; the qlora recipe loads its base in 4-bit NF4 (--base_bits 4, "
                "the default) or in 8-bit LLM.int8 (--base_bits 8)."
            )


# Hinton et al. (2015) soften both distributions with T = 2 to 4 on classification; 2 keeps most of
# the teacher's ranking of the wrong classes without flattening a confident teacher to noise.
DEFAULT_DISTILL_TEMPERATURE = 2.0


# Rows per batch of the teacher's pass (inference only, before the student loads): distillation
# runs it, and `recipes-lib plan --recipe distill` plans it at this batch.
TEACHER_BATCH_SIZE = 64


@dataclass
class DistillArguments:
    """The options of recipes/distill.py: the teacher, how much the student follows it, unlabelled rows."""

    teacher: str | None = option(
        None,
        "The teacher: the output_dir of a finished run of any recipe (a full model, a LoRA or QLoRA "
        "adapter, run on its base as it was evaluated). Its logits on every training row are computed once, "
        "before the student loads, and cached in output_dir/teacher_logits/.",
    )
    distill_temperature: float = option(
        DEFAULT_DISTILL_TEMPERATURE,
        "Temperature T of the teacher term: the student's and the teacher's logits are divided by T "
        "before the softmax (sigmoid for multi-label), and the term is multiplied by T^2 so its gradients keep "
        "their size. Regression ignores it (mean squared error to the teacher's output).",
    )
    distill_alpha: float = option(
        0.5,
        "Weight of the teacher term on a row with a gold label: loss = alpha x teacher term + "
        "(1 - alpha) x the task's loss on the gold label. A row without a gold label (an empty label cell, "
        "or a --transfer_file row) learns from the teacher alone, at weight 1. 1.0: the teacher only.",
    )
    transfer_file: str | None = option(
        None,
        "Unlabelled training rows (same format and text columns as --train_file; a label column, if "
        "any, is not read): the teacher labels them, and the student trains on them beside --train_file.",
    )

    def __post_init__(self):
        if not self.distill_temperature > 0:
            raise ConfigError(
                f"distill_temperature is {self.distill_temperature}; it must be positive (1 leaves the "
                f"logits as they are; {DEFAULT_DISTILL_TEMPERATURE} is the default)."
            )
        if not 0 <= self.distill_alpha <= 1:
            raise ConfigError(
                f"distill_alpha is {self.distill_alpha}; it is the teacher term's weight, in [0, 1] "
                "(0.5: half teacher, half gold label)."
            )


# Every recipe's own options, for the hint on a key another recipe takes (parsing.py). QloraArguments
# extends LoraArguments, so LoraArguments alone names the LoRA keys.
RECIPE_OPTION_CLASSES = (Adam8bitArguments, LoraArguments, QloraArguments, DistillArguments)
