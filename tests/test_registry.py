"""The project's layout: the workbench's list of recipes equals what each script declares (and is read
without the scripts, as from a non-editable install), the scripts stay short, and the
tests share code only through tests/helpers/ (no test module imports another, or conftest.py)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_workbench.recipes import RECIPES
from tests.helpers.repo import RECIPES_DIR, REPO_ROOT, load_recipe, recipe_script

TESTS_DIR = REPO_ROOT / "tests"
# A recipe is a short script a reader takes in at once: the library holds everything else.
MAX_RECIPE_LINES = 80


def recipe_scripts() -> list[Path]:
    return sorted(RECIPES_DIR.glob("*.py"))


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_registered_recipe_has_a_script_whose_spec_is_its_registry_entry(name):
    assert recipe_script(name).is_file(), f"{name} is in the registry but recipes/{name}.py does not exist"
    declared = load_recipe(name).SPEC
    assert type(declared) is RecipeSpec  # the script declares itself; it does not read the registry
    entry = RECIPES[name]
    assert declared == RecipeSpec(
        **{f.name: getattr(entry, f.name) for f in dataclasses.fields(RecipeSpec)}
    ), f"recipes/{name}.py's SPEC differs from its registry entry"


def test_the_registry_works_without_the_scripts(tmp_path):
    """As from a non-editable install: the packages copied alone, run from a directory without recipes/."""
    import shutil
    import subprocess
    import sys

    for package in ("recipes_lib", "recipes_workbench"):
        shutil.copytree(REPO_ROOT / "src" / package, tmp_path / "site" / package)
    names = subprocess.run(
        [sys.executable, "-m", "recipes_workbench.recipes"],
        cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "site"), "PATH": ""},
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert names == list(RECIPES)


def test_every_recipe_script_is_registered():
    assert recipe_scripts(), RECIPES_DIR
    unregistered = [path.name for path in recipe_scripts() if path.stem not in RECIPES]
    assert not unregistered, f"in recipes/ but not in recipes_workbench/recipes.py: {unregistered}"


@pytest.mark.parametrize("path", recipe_scripts(), ids=lambda path: path.name)
def test_every_recipe_script_is_at_most_80_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_RECIPE_LINES, f"recipes/{path.name} has {lines} lines (at most {MAX_RECIPE_LINES})"


def imported_modules(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in the file (`source`, else its text), those inside
    functions included. `from tests import x` counts as `tests.x`; a relative import counts from the
    file's package.
    """
    package = path.relative_to(REPO_ROOT).with_suffix("").parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            anchor = package[: len(package) - node.level + 1] if node.level else ()
            base = ".".join([*anchor, *([node.module] if node.module else [])])
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def shared_only_through_helpers(module: str) -> bool:
    """False for an import of a test module, conftest.py or any tests.* module outside tests.helpers."""
    parts = module.split(".")
    if parts[0] == "tests":
        return len(parts) == 1 or parts[1] == "helpers"
    return not (parts[0] == "conftest" or parts[0].startswith("test_"))


def python_files_of_the_tests() -> list[Path]:
    return sorted(
        [
            *TESTS_DIR.glob("*.py"),
            *(TESTS_DIR / "workbench").glob("*.py"),
            *(TESTS_DIR / "helpers").rglob("*.py"),
        ]
    )


def test_no_test_module_imports_another_or_conftest():
    sources = python_files_of_the_tests()
    assert TESTS_DIR / "conftest.py" in sources and TESTS_DIR / "helpers" / "runs.py" in sources, sources
    offending = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {module}"
        for path in sources
        for line, module in imported_modules(path)
        if not shared_only_through_helpers(module)
    ]
    assert not offending, "import shared test code from tests.helpers instead:\n" + "\n".join(offending)


@pytest.mark.parametrize(
    "statement, allowed",
    [
        ("from tests.conftest import REPO_ROOT", False),
        ("from tests import conftest", False),
        ("import tests.test_tasks", False),
        ("from tests.test_tasks import read_jsonl", False),
        ("from tests.inprocess import run_in_process", False),
        ("from conftest import REPO_ROOT", False),
        ("from .test_tracking import read_run", False),
        ("from . import conftest", False),
        ("from tests.helpers.runs import run_args", True),
        ("from tests.helpers import runs", True),
        ("from .helpers.data import write_csv", True),
        ("from recipes_workbench.recipes import RECIPES", True),
    ],
)
def test_the_import_check_sees_every_way_of_importing_a_test_module(statement, allowed):
    # As if written inside a function of a test module in tests/.
    imports = imported_modules(TESTS_DIR / "test_example.py", f"def f():\n    {statement}\n")
    assert len(imports) == 1, imports
    assert shared_only_through_helpers(imports[0][1]) == allowed, imports
