"""The docs agree with the code and with each other: the lists docs/development.md keeps (the
`recipes-lib` commands, also listed in the docstring of recipes_workbench/cli/main.py, and the library's
packages), docs/families.md's table, every relative link and its anchor, the README's length, and
every command shown (options, targets, files; `accelerate launch` with -q). Offline, no model; two
launches: the README's command with a bad input, with a token and without (about 9 s each on 2 cores)."""

from __future__ import annotations

import itertools
import re
import shlex

import pytest

import recipes_workbench.cli.main as cli_main
from recipes_workbench.cli.main import describe_families
from recipes_workbench.shared import format_table
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
PACKAGES = (REPO_ROOT / "src" / "recipes_lib", REPO_ROOT / "src" / "recipes_workbench")
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
    packages = {
        f"{path.name}/" for root in PACKAGES for path in root.iterdir() if (path / "__init__.py").is_file()
    }
    modules = {path.name for root in PACKAGES for path in root.glob("*.py") if path.name != "__init__.py"}
    assert packages, PACKAGES
    assert packages | modules == named, (
        f"src/recipes_lib/ and src/recipes_workbench/ hold {sorted(packages | modules)}; "
        f"docs/development.md's table names {sorted(named)}"
    )


def test_every_test_module_the_package_table_names_exists():
    named = {name for row in package_table_rows() for name in re.findall(r"`(test_\w+\.py)`", row)}
    assert named
    tests = REPO_ROOT / "tests"
    missing = sorted(
        name for name in named if not ((tests / name).is_file() or (tests / "workbench" / name).is_file())
    )
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


# --- the commands the docs show, as written ------------------------------------------------------------

# Markdown pages: their code blocks and inline code. The recipes' docstrings and the configs' header
# comments: their lines that start with a command.
COMMAND_FILES = sorted(
    [*(REPO_ROOT / "recipes").glob("*.py"), *(REPO_ROOT / "recipes").glob("*/*.yaml"),
     *(REPO_ROOT / "accelerate_configs").glob("*.yaml")]
)  # fmt: skip
COMMAND_START = re.compile(r"^(\$ )?(make |recipes-lib |accelerate launch |python3? recipes/)")
FENCE_BODY = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
# A path into the repository's own folders (placeholders such as <recipe>, {recipe}, $recipe are skipped).
REPO_PATH = re.compile(
    r"^(accelerate_configs|recipes|data|benchmarks|tools)/[\w./-]+\.(ya?ml|py|csv|tsv|jsonl?|sh)$"
)
MAKE_TARGET = re.compile(r"^([a-z][\w-]*):", re.MULTILINE)


# A table benchmarks/publish.py generates from a record, with the command that record ran, as it ran
# (publish.py's check keeps it equal to the record): a record, not a command to copy.
RECORD_BLOCK = re.compile(r"<!-- record [\w-]+ \S+: start -->.*?<!-- record: end -->", re.DOTALL)


def command_lines(path) -> list[str]:
    """Every command line a reader may copy from `path`, continuation lines joined."""
    text = RECORD_BLOCK.sub("", path.read_text())
    if path.suffix == ".md":
        snippets = [*FENCE_BODY.findall(text), *INLINE_CODE.findall(FENCE.sub("", text))]
    else:
        snippets = [text]
    lines = []
    for snippet in snippets:
        for line in snippet.replace("\\\n", " ").splitlines():
            line = line.strip().lstrip("#").strip()
            if COMMAND_START.match(line):
                lines.append(line.removeprefix("$ "))
    return lines


class CommandChecker:
    """What a command line names that does not exist: an option its parser lacks, a make target, a file."""

    def __init__(self):
        from accelerate.commands.launch import launch_command_parser

        from recipes_lib.config.parsing import recipe_parser
        from recipes_workbench.recipes import RECIPES

        def options(parser) -> set[str]:
            return {option for action in parser._actions for option in action.option_strings}

        subparsers = next(a for a in cli_main.build_parser()._actions if a.choices and "plan" in a.choices)
        self.tool_options = {name: options(parser) for name, parser in subparsers.choices.items()}
        # --config and a bare --debug are read before the recipe's parser sees the rest.
        self.recipe_options = {name: options(recipe_parser(spec)) | {"--config", "--debug"}
                               for name, spec in RECIPES.items()}  # fmt: skip
        self.launch_options = options(launch_command_parser())
        self.make_targets = set(MAKE_TARGET.findall((REPO_ROOT / "Makefile").read_text()))

    def problems(self, line: str) -> list[str]:
        found = []
        for part in re.split(r"&&|\|\||;|\|", line):
            try:
                tokens = shlex.split(part, comments=True)
            except ValueError:  # an unclosed quote in prose: not a command
                continue
            tokens = tokens[1:] if tokens[:1] == ["do"] else tokens
            found += [f"{token}: no such file" for token in tokens
                      if REPO_PATH.match(token) and not (REPO_ROOT / token).exists()]  # fmt: skip
            found += self._make(tokens) + self._tool(tokens) + self._recipe(tokens)
        return found

    def _make(self, tokens: list[str]) -> list[str]:
        if tokens[:1] != ["make"]:
            return []
        targets = itertools.takewhile(lambda token: re.fullmatch(r"[a-z][\w-]*|\w+=\S*", token), tokens[1:])
        return [f"make {target}: no such target" for target in targets
                if "=" not in target and target not in self.make_targets]  # fmt: skip

    def _tool(self, tokens: list[str]) -> list[str]:
        if "recipes-lib" not in tokens[:1] or len(tokens) < 2:
            return []
        command, rest = tokens[1], tokens[2:]
        if command not in self.tool_options:
            return [f"recipes-lib {command}: no such command"]
        known = self.tool_options[command]
        if command == "crossval":  # the options it does not know go to the recipe it names
            if not rest or rest[0] not in self.recipe_options:
                return []  # a placeholder (RECIPE)
            known = known | self.recipe_options[rest[0]]
        return [
            f"recipes-lib {command} {option}: no such option"
            for option in _options(rest)
            if option not in known
        ]

    def _recipe(self, tokens: list[str]) -> list[str]:
        scripts = [i for i, token in enumerate(tokens) if re.fullmatch(r"recipes/\w+\.py", token)]
        if not scripts or tokens[0] not in ("accelerate", "python", "python3"):
            return []
        at = scripts[0]
        name = tokens[at].removeprefix("recipes/").removesuffix(".py")
        found = [f"{name}.py {option}: no such option" for option in _options(tokens[at + 1 :])
                 if option not in self.recipe_options.get(name, set())]  # fmt: skip
        if tokens[:2] == ["accelerate", "launch"]:
            found += [f"accelerate launch {option}: no such option" for option in _options(tokens[2:at])
                      if option not in self.launch_options]  # fmt: skip
            if not {"-q", "--quiet"} & set(tokens[2:at]):  # test_the_readme_launch_... shows why
                found.append(f"accelerate launch without -q: {name}.py's error paragraph twice, a traceback")
        return found


def _options(tokens: list[str]) -> list[str]:
    return [token.split("=", 1)[0] for token in tokens if re.match(r"--[a-z]", token)]


@pytest.fixture(scope="module")
def command_checker() -> CommandChecker:
    return CommandChecker()


@pytest.mark.parametrize("path", [*PAGES, *COMMAND_FILES], ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_every_command_shown_names_options_targets_and_files_that_exist(path, command_checker):
    problems = {line: found for line in command_lines(path) if (found := command_checker.problems(line))}
    assert not problems, f"{path.relative_to(REPO_ROOT)}: commands that would fail as written: {problems}"


def test_the_command_check_finds_a_stale_option_a_missing_target_and_a_missing_file(
    tmp_path, command_checker
):
    page = tmp_path / "page.md"
    page.write_text(
        "Run `make demo` or `make dmeo`, then `recipes-lib plan --model bert-base-uncased --bugdet 16`:\n"
        "```bash\n"
        "accelerate launch --config_file accelerate_configs/single_gpu.yaml --num_procs 2 recipes/lora.py \\\n"
        "    --config recipes/configs/nope.yaml --lora_rank 8   # the recipe's options\n"
        "recipes-lib crossval full_ft --folds 5 --learning_rate 1e-4 --lora_r 8\n"
        "```\n"
    )
    problems = [problem for line in command_lines(page) for problem in command_checker.problems(line)]
    assert sorted(problems) == sorted([
        "make dmeo: no such target",
        "recipes-lib plan --bugdet: no such option",
        "recipes/configs/nope.yaml: no such file",
        "lora.py --lora_rank: no such option",
        "accelerate launch --num_procs: no such option",
        "accelerate launch without -q: lora.py's error paragraph twice, a traceback",
        "recipes-lib crossval --lora_r: no such option",
    ])  # fmt: skip


# What accelerate 1.16's launcher adds to a failed run without -q: the run's stderr again inside a
# RuntimeError, its own traceback, and a CalledProcessError quoting the whole command line.
LAUNCHER_NOISE = ("Traceback", "CalledProcessError", "RuntimeError", "returned non-zero exit status")


SECRET = "hf_plantedInTheReadmeLaunch00000000000006"


@pytest.mark.parametrize(
    ("given", "paragraph"),
    [
        (["--hub-token", SECRET, "--num_train_epochs", "abc"], "error: --hub-token is a secret"),
        # The bad value alone reaches the recipe's argument parsing, where the token above stops earlier.
        (["--num_train_epochs", "abc"], "invalid finite number value: 'abc'"),
    ],
)
def test_the_readme_launch_command_with_a_bad_input_prints_one_paragraph_and_no_secret(given, paragraph):
    """The README's first launch command, as written, given a bad value (with a token, and without): the
    recipe's one paragraph, once, nothing of the launcher's, and not the token (which accelerate without
    -q prints in its CalledProcessError's command line)."""
    import subprocess
    import sys

    readme_launches = [line for line in command_lines(REPO_ROOT / "README.md")
                       if line.startswith("accelerate launch") and "recipes/full_ft.py" in line]  # fmt: skip
    tokens = shlex.split(readme_launches[0])
    command = [sys.executable, "-m", "accelerate.commands.launch", *tokens[2:], *given]
    launched = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    printed = launched.stdout + launched.stderr
    assert launched.returncode == 1, printed
    assert printed.count(paragraph) == 1 and printed.count("error:") == 1, printed
    assert SECRET not in printed and not [noise for noise in LAUNCHER_NOISE if noise in printed], printed
