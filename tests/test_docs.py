"""The docs agree with the code and with each other: the lists docs/development.md keeps (the
`recipes-lib` commands, also listed in the docstring of recipes_lib/cli/main.py, and the library's
packages), docs/families.md's table, every relative link and its anchor, and the README's length.
Offline, no model, no run."""

from __future__ import annotations

import re

import pytest

import recipes_lib.cli.main as cli_main
from recipes_lib.modeling.families import describe_families
from recipes_lib.units import format_table
from tests.helpers.repo import REPO_ROOT

DEVELOPMENT_MD = REPO_ROOT / "docs" / "development.md"
FAMILIES_MD = REPO_ROOT / "docs" / "families.md"
FAMILIES_START, FAMILIES_END = (
    "<!-- recipes-lib families --markdown: start -->",
    "<!-- recipes-lib families: end -->",
)
# The README is the newcomer's first page (issue #29): details go to docs/, the README links to them.
README_MOST_CHARACTERS = 10_000
# Every Markdown page a reader follows links through.
PAGES = sorted(
    [REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md"), *(REPO_ROOT / "recipes").glob("*.md"),
     *(REPO_ROOT / "benchmarks").glob("*.md")]
)  # fmt: skip
# [text](target) and ![alt](target); a target with a scheme (https:, mailto:) is not checked.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
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


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped but - and _,
    spaces to -, a repeated heading numbered -1, -2, ..."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", FENCE.sub("", markdown), re.MULTILINE):
        anchor = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        numbered, count = anchor, 0
        while numbered in anchors:
            count += 1
            numbered = f"{anchor}-{count}"
        anchors.add(numbered)
    return anchors


def broken_links(page) -> list[str]:
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked.read_text()):
            broken.append(f"{target} (no heading with that anchor in {linked.name})")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_every_relative_link_reaches_its_file_and_heading(page):
    broken = broken_links(page)
    assert not broken, f"{page.relative_to(REPO_ROOT)}: broken links: {broken}"


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## What a run: `measures`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#what-a-run-measures) [ok](#top) [web](https://example.com/x.md)\n"
        "[gone](missing.md) [moved](other.md#no-such-heading)\n```\n[in code](ignored.md)\n```\n# Top\n"
    )
    assert broken_links(page) == [
        "missing.md (no such file)",
        "other.md#no-such-heading (no heading with that anchor in other.md)",
    ]


def test_docs_families_table_is_what_recipes_lib_families_prints():
    text = FAMILIES_MD.read_text()
    assert FAMILIES_START in text and FAMILIES_END in text, "docs/families.md lost its table markers"
    shown = text.split(FAMILIES_START, 1)[1].split(FAMILIES_END, 1)[0].strip()
    assert shown == format_table(*describe_families(), markdown=True).strip(), (
        "docs/families.md is stale: paste `recipes-lib families --markdown` between its markers"
    )


def test_the_readme_stays_short():
    length = len((REPO_ROOT / "README.md").read_text().encode())
    assert length <= README_MOST_CHARACTERS, (
        f"README.md is {length:,} bytes, over {README_MOST_CHARACTERS:,}: move the detail to docs/ and link it"
    )
