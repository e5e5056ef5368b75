"""The recipes: every script in `recipes/` that declares a `SPEC`, found by reading the folder.

The folder is the one list of recipes: the command-line tools, the tests and the Makefile all
read it, so a new script there is a new recipe everywhere.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

from recipes_lib.errors import ConfigError
from recipes_lib.recipe_spec import RecipeSpec

# src/recipes_lib/catalog.py -> the checkout's recipes/ (the package is installed with pip install -e).
RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"


def load_recipe_module(path: str | os.PathLike) -> ModuleType:
    """A recipe script imported from its file (its `if __name__ == "__main__"` block does not run)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"_recipe_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recipe_scripts(folder: str | os.PathLike = RECIPES_DIR) -> list[Path]:
    """The scripts of `folder` that declare a SPEC, by name (a cheap text check; nothing is imported)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(path for path in folder.glob("*.py") if "SPEC = RecipeSpec(" in path.read_text())


def recipe_specs(folder: str | os.PathLike = RECIPES_DIR) -> dict[str, RecipeSpec]:
    """{name: spec} of every recipe script in `folder`."""
    specs = {}
    for path in recipe_scripts(folder):
        spec = load_recipe_module(path).SPEC
        specs[spec.name] = spec
    if not specs:
        raise ConfigError(
            f"No recipe scripts were found in {folder}. The recipe tools read the recipes/ folder of a "
            "checkout of this repository: install it with `pip install -e .` from that checkout."
        )
    return specs


def recipes_accepting(key: str, folder: str | os.PathLike = RECIPES_DIR) -> list[str]:
    """The recipe scripts whose own options include `key` (an error hint: lora_r given to full_ft)."""
    import dataclasses

    accepting = []
    for path in recipe_scripts(folder):
        try:
            options = load_recipe_module(path).SPEC.options
        except Exception:  # a hint is not worth a second error
            continue
        if options is not None and any(key == item.name for item in dataclasses.fields(options)):
            accepting.append(path.name)
    return accepting
