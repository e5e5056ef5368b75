"""Run a recipe inside the test process: the recipe script's own `main()`.

Faster than `accelerate launch` (no new interpreter, no second import of torch), so the memory
tests can afford a run per recipe and model. It is the same code the launched script runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import RECIPES, load_recipe


def available_recipes() -> list[str]:
    """Every recipe: all of them run on CPU (bitsandbytes 0.50 has CPU 8-bit and 4-bit kernels)."""
    return list(RECIPES)


def run_in_process(recipe_name: str, args: list[str]) -> dict[str, Any]:
    """The recipe script's own main(args): results.json's contents."""
    return load_recipe(recipe_name).main(args)


def quick_args(model: Path | str, data: dict[str, Path], output_dir: Path, *extra: str) -> list[str]:
    """A short run: two optimizer steps of 8 examples, a small evaluation, nothing saved but the model."""
    return [
        "--model_name_or_path", str(model),
        "--train_file", str(data["train"]),
        "--validation_file", str(data["validation"]),
        "--output_dir", str(output_dir),
        "--overwrite_output_dir", "true",
        "--max_seq_length", "32",
        "--per_device_train_batch_size", "8",
        "--max_steps", "2",
        "--max_eval_samples", "16",
        "--eval_strategy", "no",
        "--save_strategy", "no",
        "--report_to", "none",
        "--disable_tqdm", "true",
        *extra,
    ]  # fmt: skip
