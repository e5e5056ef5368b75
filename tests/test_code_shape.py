"""The library's shape, checked: short functions, and nothing that needs the checkout to be there.

The recipes and tools must work from a non-editable install (`pip install .`), where the package
lives in site-packages with no `recipes/` folder beside it: no module may climb out of the package
through `__file__`.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.helpers.repo import REPO_ROOT

SRC = REPO_ROOT / "src"
LIBRARY = SRC / "recipes_lib"
LONGEST_FUNCTION = 80
# Both packages: the run library and the workbench.
MODULES = sorted([*LIBRARY.rglob("*.py"), *(SRC / "recipes_workbench").rglob("*.py")])


def functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(SRC)))
def test_no_function_is_longer_than_80_lines(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in functions(tree)
        if node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION
    ]
    assert not long, f"{path.relative_to(REPO_ROOT)}: split into named steps: {', '.join(long)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(SRC)))
def test_no_module_reads_the_checkout_through_its_own_path(path):
    # `Path(__file__).parent / "metric_modules"` (package data) is fine; `parents[2]` reaches the checkout.
    text = path.read_text()
    assert not re.search(r"__file__\)?(\.resolve\(\))?\.parents\[\d\]", text), path
    assert "parent.parent.parent" not in text, path


def test_the_function_length_check_finds_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(LONGEST_FUNCTION + 1))
    (node,) = functions(ast.parse(f"def long():\n{body}\n"))
    assert node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION


RUN_MODULE = LIBRARY / "run" / "recipe_run.py"
# issue 48: the arguments as parsed, the recipe, the resume checkpoint, the W&B run, the memory phases,
# and (issue 49) the output directory's lock, held until the run ends; what the run decides comes back
# from run/preparation.py's `prepare` as a frozen value.
MOST_RUN_ATTRIBUTES = 6


def assigned_attributes(tree: ast.AST, owner: str) -> set[str]:
    """The X of every `owner.X = ...`, `owner.X: T = ...` and `owner.X += ...` (a subscript's base too)."""
    names = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) else ():
            while isinstance(target, ast.Subscript):
                target = target.value
            for part in target.elts if isinstance(target, ast.Tuple) else [target]:
                if (
                    isinstance(part, ast.Attribute)
                    and isinstance(part.value, ast.Name)
                    and part.value.id == owner
                ):
                    names.add(part.attr)
    return names


def test_a_recipe_run_holds_at_most_six_attributes():
    (run_class,) = [
        node for node in ast.parse(RUN_MODULE.read_text()).body if getattr(node, "name", "") == "RecipeRun"
    ]
    attributes = assigned_attributes(run_class, "self")
    assert len(attributes) <= MOST_RUN_ATTRIBUTES, sorted(attributes)
    assert "setattr(" not in RUN_MODULE.read_text() and "cached_property" not in RUN_MODULE.read_text()


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(SRC)))
def test_no_library_module_assigns_to_the_run(path):
    if path == RUN_MODULE:
        return
    assert not assigned_attributes(ast.parse(path.read_text()), "run") - {"bar"}, (
        path
    )  # sweep's own `run.bar`


def test_the_attribute_count_finds_every_form_of_assignment():
    code = "self.a = 1\nself.b: int = 2\nself.c += 3\nself.d['k'] = 4\nself.e, x = 5, 6\nrun.f = 7\n"
    assert assigned_attributes(ast.parse(code), "self") == {"a", "b", "c", "d", "e"}


def test_what_prepare_returns_is_frozen_and_the_run_holds_none_of_it():
    import dataclasses

    from recipes_lib.run.preparation import Prepared

    assert Prepared.__dataclass_params__.frozen
    assigned = assigned_attributes(ast.parse(RUN_MODULE.read_text()), "self")
    # `run.arguments` are the parsed arguments; `prepared.arguments` what runs.
    assert not assigned & {field.name for field in dataclasses.fields(Prepared)} - {"arguments"}, assigned


ARGUMENTS_MODULE = LIBRARY / "config" / "arguments.py"
LONGEST_ARGUMENTS_CLASS = 170  # issue 48: defaults, help and checks on its own values; nothing else


def test_the_training_arguments_class_holds_defaults_help_and_checks_only():
    tree = ast.parse(ARGUMENTS_MODULE.read_text())
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    training = classes["RecipeTrainingArguments"]
    assert training.end_lineno - training.lineno + 1 <= LONGEST_ARGUMENTS_CLASS
    for node in classes.values():  # no field exists only under an `if` in a class body
        assert not [part for part in node.body if isinstance(part, ast.If)], node.name
    # The recipes' own training options are fields only (their checks run in RecipeTrainingArguments).
    assert not [part for part in classes["RecipeTrainingOptions"].body if isinstance(part, ast.FunctionDef)]
    text = ARGUMENTS_MODULE.read_text()
    # No probing of the machine or the launcher: config/precision.py decides, in run/preparation.py.
    for probe in ("import torch", "os.environ", "cuda", "mps", "detect_capability", "choose_precision"):
        assert probe not in text, probe


def test_precision_is_decided_in_one_place_and_nothing_threads_it_back():
    callers = {
        path.relative_to(SRC).as_posix()
        for path in MODULES
        if re.search(r"(?<!def )\bdecide_precision\(", path.read_text())
    }
    # The run's decision, and the sweep's preflight predicting the same decision for a trial.
    assert callers == {"recipes_lib/run/preparation.py", "recipes_workbench/sweep/check_recipes.py"}, callers
    for path in MODULES:
        text = path.read_text()
        assert "ContextVar" not in text, path
        assert not re.search(r"replace\(\s*self\.arguments", text), path
