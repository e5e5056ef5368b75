"""The repository: its root, the registered recipes, and a recipe script imported from its file."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from recipes_workbench.recipes import RECIPES as REGISTERED_RECIPES

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPES_DIR = REPO_ROOT / "recipes"
ACCELERATE_CONFIGS = REPO_ROOT / "accelerate_configs"
# Every recipe, from the registry the CLI and the Makefile read (recipes_workbench/recipes.py).
RECIPES = tuple(REGISTERED_RECIPES)


def recipe_script(name: str) -> Path:
    return RECIPES_DIR / f"{name}.py"


def load_recipe(name: str) -> ModuleType:
    """recipes/<name>.py imported from its file (its `__main__` block does not run): `SPEC`, `main(argv)`."""
    spec = importlib.util.spec_from_file_location(f"_recipe_{name}", recipe_script(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py imported from its file, with benchmarks/ on sys.path for its own imports."""
    import sys

    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(
        f"benchmark_{name}", REPO_ROOT / "benchmarks" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def load_tool(name: str) -> ModuleType:
    """tools/<name>.py imported from its file (its `__main__` block does not run)."""
    spec = importlib.util.spec_from_file_location(f"tool_{name}", REPO_ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
