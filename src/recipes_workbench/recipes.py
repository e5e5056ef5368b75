"""The workbench's list of recipes, as data: each script's `RecipeSpec` as the script declares it
(name, summary, options, defaults), with the `TrainingShape` the planner, `recipes-lib plan` and the
sweep's memory check read. The recipes never import it; tests/test_registry.py checks that every entry
equals its script's SPEC, and it works from a non-editable install (it reads no script).

    python -m recipes_workbench.recipes     prints the names, in order (the Makefile's list)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from recipes_lib.config.adamw_8bit_options import Adam8bitArguments
from recipes_lib.config.distill_options import DistillArguments
from recipes_lib.config.recipe_options import LoraArguments, QloraArguments
from recipes_lib.config.recipe_spec import RecipeSpec, TrainingShape


@dataclass(frozen=True)
class RegisteredRecipe(RecipeSpec):
    """A script's spec and what it trains, for the planner: (its parsed options, or None) -> TrainingShape."""

    shape: Callable[[Any], TrainingShape] = lambda options: TrainingShape()  # every weight trains

    def default_options(self):
        """The recipe's own options at its defaults (the script's, over the dataclass's), or None."""
        if self.options is None:
            return None
        names = {f.name for f in dataclasses.fields(self.options)}
        return self.options(**{k: v for k, v in self.training_defaults.items() if k in names})

    def default_shape(self) -> TrainingShape:
        """The shape with the recipe's default options (what `recipes-lib plan --recipe NAME` plans)."""
        return self.shape(self.default_options())


# The LoRA recipes' defaults, as recipes/lora.py and recipes/qlora.py declare them.
_ADAPTER_DEFAULTS = dict(
    learning_rate=1e-3, length_grouping="stock", lora_r=8, lora_alpha=16, lora_dropout=0.1
)

# Full fine-tuning first: the others are compared with it.
RECIPES: dict[str, RegisteredRecipe] = {
    spec.name: spec
    for spec in (
        RegisteredRecipe(
            "full_ft", "every weight trains, torch AdamW", training_defaults={"learning_rate": 2e-5}
        ),
        RegisteredRecipe(
            name="adamw_8bit",
            summary="every weight trains, bitsandbytes 8-bit AdamW",
            options=Adam8bitArguments,
            training_defaults={"learning_rate": 2e-5, "embedding_optimizer_bits": 32},
            shape=lambda options: TrainingShape(
                optimizer_bits=8,
                embedding_optimizer_bits=options.embedding_optimizer_bits,
                paged_optimizer=options.paged_optimizer,
            ),
        ),
        RegisteredRecipe(
            name="lora",
            summary="frozen encoder; LoRA adapters and the head train",
            options=LoraArguments,
            training_defaults=_ADAPTER_DEFAULTS,
            shape=lambda lora: TrainingShape(adapters=lora.shape()),
        ),
        RegisteredRecipe(
            name="qlora",
            summary="LoRA on a 4-bit NF4 base (--base_bits 8: an 8-bit LLM.int8 base)",
            options=QloraArguments,
            training_defaults={**_ADAPTER_DEFAULTS, "base_bits": 4},
            shape=lambda qlora: TrainingShape(
                adapters=qlora.shape(), quantized_base=True, base_bits=qlora.base_bits
            ),
        ),
        RegisteredRecipe(
            name="distill",
            summary="a student trains in full on a teacher run's logits (and the gold labels)",
            options=DistillArguments,
            training_defaults={"learning_rate": 2e-5, "distill_temperature": 2.0, "distill_alpha": 0.5},
        ),
    )
}


def recipe_summary(name: str | None) -> str | None:
    """A recipe's summary for its model card (None for a name the list lacks)."""
    spec = RECIPES.get(name or "")
    return spec.summary or None if spec is not None else None


if __name__ == "__main__":
    print(" ".join(RECIPES))
