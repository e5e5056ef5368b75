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

LIBRARY = REPO_ROOT / "src" / "recipes_lib"
LONGEST_FUNCTION = 80
MODULES = sorted(LIBRARY.rglob("*.py"))


def functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(LIBRARY)))
def test_no_function_is_longer_than_80_lines(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in functions(tree)
        if node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION
    ]
    assert not long, f"{path.relative_to(REPO_ROOT)}: split into named steps: {', '.join(long)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(LIBRARY)))
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
MOST_RUN_ATTRIBUTES = 10  # issue 38: what a run is, not a blackboard of what it passes around


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


def test_a_recipe_run_holds_at_most_ten_attributes():
    (run_class,) = [
        node for node in ast.parse(RUN_MODULE.read_text()).body if getattr(node, "name", "") == "RecipeRun"
    ]
    attributes = assigned_attributes(run_class, "self")
    assert len(attributes) <= MOST_RUN_ATTRIBUTES, sorted(attributes)
    assert "setattr(" not in RUN_MODULE.read_text() and "cached_property" not in RUN_MODULE.read_text()


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(LIBRARY)))
def test_no_library_module_assigns_to_the_run(path):
    if path == RUN_MODULE:
        return
    assert not assigned_attributes(ast.parse(path.read_text()), "run") - {"bar"}, (
        path
    )  # sweep's own `run.bar`


def test_the_attribute_count_finds_every_form_of_assignment():
    code = "self.a = 1\nself.b: int = 2\nself.c += 3\nself.d['k'] = 4\nself.e, x = 5, 6\nrun.f = 7\n"
    assert assigned_attributes(ast.parse(code), "self") == {"a", "b", "c", "d", "e"}
