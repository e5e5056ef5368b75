"""Two import packages, one way: the run library (recipes_lib) and the workbench beside it
(recipes_workbench). The workbench may import only the run library's public API, PUBLIC_API in
recipes_lib/__init__.py; setup.cfg's import-linter contract forbids every other module (`make lint`
checks the imports, this file that the contract and the list agree), and the run library stays the
smaller part."""

from __future__ import annotations

import configparser

import recipes_lib
from tests.helpers.repo import REPO_ROOT

SRC = REPO_ROOT / "src"
# Issue 56 asks for the run library at most 12,000 lines and all of src not above the 22,910 it had
# before; the move alone gave 11,685 and 22,910. Issues 54, 55 and 58, merged with it, added ~1,450
# (12,699 and 24,360). Session 60 cut and moved them back to 12,176 and 23,682, still above the issue's
# figures (said open in its note). Session 61 met them: 11,668 and 22,635 (padding-free batches moved
# beside their benchmark, rarely used capabilities into modules of their own, docstrings that docs/ says
# cut). The bounds hold today's figures, so that nothing grows unseen.
RUN_LIBRARY_MAX_LINES = 11_668
SRC_MAX_LINES = 22_635


def run_library_modules() -> set[str]:
    """Every module of recipes_lib that import-linter sees (the metric modules, loaded by path, are not)."""
    found = set()
    for path in (SRC / "recipes_lib").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        packaged = all((SRC.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts)))
        if parts[-1] != "__init__" and packaged:
            found.add(".".join(parts))
    return found


def lines_of(package: str) -> int:
    return sum(len(path.read_text().splitlines()) for path in (SRC / package).rglob("*.py"))


def test_the_contract_forbids_the_workbench_every_module_outside_the_public_api():
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    contract = config["importlinter:contract:public-api"]
    assert contract["source_modules"].split() == ["recipes_workbench"]
    forbidden = set(contract["forbidden_modules"].split())
    modules = run_library_modules()
    assert set(recipes_lib.PUBLIC_API) <= modules, set(recipes_lib.PUBLIC_API) - modules
    assert forbidden == modules - set(recipes_lib.PUBLIC_API), (
        "setup.cfg's public-api contract must forbid exactly the modules outside recipes_lib.PUBLIC_API: "
        f"missing {sorted(modules - set(recipes_lib.PUBLIC_API) - forbidden)}, "
        f"extra {sorted(forbidden - (modules - set(recipes_lib.PUBLIC_API)))}"
    )
    one_way = config["importlinter:contract:one-way"]
    assert (one_way["source_modules"], one_way["forbidden_modules"]) == ("recipes_lib", "recipes_workbench")


def test_the_run_library_is_the_smaller_part_and_src_did_not_grow():
    run_library, workbench = lines_of("recipes_lib"), lines_of("recipes_workbench")
    assert run_library <= RUN_LIBRARY_MAX_LINES, run_library
    assert run_library + workbench <= SRC_MAX_LINES, run_library + workbench
