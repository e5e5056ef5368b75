"""constraints.txt holds every package `make install` brings at a version the suite passed on.

A new release of any dependency, direct or transitive, used to reach a fresh clone's `make test` the
day it appeared (kernels 0.19.1 added a warning line that two tests counted). `make install` now
installs with `-c constraints.txt`; `make test-latest` rewrites it from an environment where the
suite passed on the newest releases (tools/constraints.py).
"""

from __future__ import annotations

import configparser
import re

from tests.helpers.repo import REPO_ROOT, load_tool

constraints_tool = load_tool("constraints")


def pinned() -> dict[str, str]:
    lines = (REPO_ROOT / "constraints.txt").read_text().splitlines()
    return dict(line.split("==", 1) for line in lines if line and not line.startswith("#"))


def required_names() -> set[str]:
    """The names setup.cfg asks `make install` for: install_requires and the dev extra."""
    config = configparser.ConfigParser()
    config.read_string((REPO_ROOT / "setup.cfg").read_text())
    text = config["options"]["install_requires"] + "\n" + config["options.extras_require"]["dev"]
    names = set()
    for line in text.splitlines():
        line = line.split("#", 1)[0].split(";", 1)[0].strip()
        if line:
            name = re.match(r"[A-Za-z0-9._-]+", line)[0]
            names.add(re.sub(r"[-_.]+", "-", name).lower())
    return names


def test_every_package_make_install_asks_for_is_held_except_torch():
    held = pinned()
    missing = sorted(required_names() - set(held) - {"torch"})
    assert not missing, f"not in constraints.txt (run make test-latest, or add them): {missing}"
    assert "torch" not in held  # the Makefile installs the CPU build; GPU users get theirs


def test_the_transitive_package_that_broke_a_fresh_clone_is_held_too():
    assert "kernels" in pinned()  # transformers' dependency, not ours: only a full freeze holds it


def test_the_makefile_installs_with_the_constraints():
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert re.search(r"pip install --quiet -c \$\(CONSTRAINTS\) -e \"\.\[dev\]\"", makefile)
    assert "CONSTRAINTS ?= constraints.txt" in makefile


def test_make_test_latest_tries_what_make_install_installs_so_its_rewrite_keeps_every_pin():
    # It once installed the test extra alone: its rewritten file dropped ruff's and import-linter's pins.
    recipe = (REPO_ROOT / "Makefile").read_text().split("\ntest-latest:", 1)[1].split("\n\n", 1)[0]
    assert '-e ".[dev]"' in recipe
    assert "ruff check" in recipe and "lint-imports" in recipe


def test_a_freeze_becomes_sorted_pins_without_torch_its_cuda_builds_pip_or_this_project():
    freeze = [
        "Torch==2.13.0+cpu",
        "nvidia-cublas-cu12==12.8.4.1",
        "triton==3.5.0",
        "pip==26.0",
        "-e git+https://example.invalid/recipes@abc#egg=recipes_lib",
        "recipes_lib==0.1.0",
        "Kernels==0.19.1",
        "huggingface_hub==2.4.0",
        "",
    ]
    assert constraints_tool.constraints(freeze) == ["huggingface-hub==2.4.0", "kernels==0.19.1"]
