"""The options of the LoRA recipes (lora, qlora), which the run reads (run/preparation.py, run/record.py):
here, so that the workbench and the parser name them without loading peft."""

from __future__ import annotations

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
