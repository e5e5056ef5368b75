"""The lists docs/development.md keeps agree with the code: the `recipes-lib` commands (also listed in
the docstring of recipes_lib/cli/main.py) and the library's packages. Offline, no model, no run."""

from __future__ import annotations

import re

import pytest

import recipes_lib.cli.main as cli_main
from tests.helpers.repo import REPO_ROOT

DEVELOPMENT_MD = REPO_ROOT / "docs" / "development.md"
LIBRARY = REPO_ROOT / "src" / "recipes_lib"
# `- `recipes-lib plan`: ...`, one line a command, in docs/development.md
DOCS_COMMAND = re.compile(r"^- `recipes-lib ([a-z][a-z-]*)`", re.MULTILINE)
# `recipes-lib plan --model ...` at the start of a line of the docstring
DOCSTRING_COMMAND = re.compile(r"^recipes-lib ([a-z][a-z-]*)\b", re.MULTILINE)


def parser_commands(capsys) -> set[str]:
    """The subcommands of the parser `main()` builds, read from its own --help."""
    with pytest.raises(SystemExit) as exit_info:
        cli_main.main(["--help"])
    assert exit_info.value.code == 0
    usage = capsys.readouterr().out
    choices = re.search(r"\{([a-z,-]+)\}", usage)
    assert choices, usage
    return set(choices.group(1).split(","))


def package_table_rows() -> list[str]:
    """The rows of the package table in the Layout section of docs/development.md."""
    layout = DEVELOPMENT_MD.read_text().split("## Layout", 1)[1]
    rows = [line for line in layout.splitlines() if line.startswith("| `")]
    assert rows, "no package table (rows starting with '| `') under '## Layout' in docs/development.md"
    return rows


def test_the_docs_and_the_docstring_list_exactly_the_commands_of_the_parser(capsys):
    commands = parser_commands(capsys)
    assert {"plan", "compare", "show"} <= commands, commands
    documented = DOCS_COMMAND.findall(DEVELOPMENT_MD.read_text())
    assert len(documented) == len(set(documented)), (
        f"a command listed twice in docs/development.md: {documented}"
    )
    assert set(documented) == commands, "docs/development.md lists other commands than recipes-lib has"
    in_docstring = DOCSTRING_COMMAND.findall(cli_main.__doc__)
    assert len(in_docstring) == len(set(in_docstring)), in_docstring
    assert set(in_docstring) == commands, "the docstring of cli/main.py lists other commands than its parser"


def test_every_library_package_and_module_is_in_the_package_table():
    rows = package_table_rows()
    named = {name for row in rows for name in re.findall(r"`(\w+/|\w+\.py)`", row.split("|")[1])}
    packages = {f"{path.name}/" for path in LIBRARY.iterdir() if (path / "__init__.py").is_file()}
    modules = {path.name for path in LIBRARY.glob("*.py") if path.name != "__init__.py"}
    assert packages, LIBRARY
    assert packages | modules == named, (
        f"src/recipes_lib/ holds {sorted(packages | modules)}; docs/development.md's table names {sorted(named)}"
    )


def test_every_test_module_the_package_table_names_exists():
    named = {name for row in package_table_rows() for name in re.findall(r"`(test_\w+\.py)`", row)}
    assert named
    missing = sorted(name for name in named if not (REPO_ROOT / "tests" / name).is_file())
    assert not missing, f"docs/development.md names test modules that do not exist: {missing}"
