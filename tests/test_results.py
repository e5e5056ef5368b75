"""results.json is one typed record, RunResults (results.py): built once, by finish_run, where a key two
parts give is refused; read back by read_results alone; read by fields, so a key the record does not have
fails here, not in a user's run."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import jinja2
import pytest

from recipes_lib.results import RESULT_KEYS, RESULTS_FILE, RunResults
from tests.helpers.repo import REPO_ROOT
from tests.helpers.runs import QUICK, run_args, run_in_process

LIBRARY = REPO_ROOT / "src" / "recipes_lib"
READ_BY = [*sorted(LIBRARY.rglob("*.py")), REPO_ROOT / "benchmarks" / "publish.py"]
# The model card's template reads the record as `results` (build_card passes it under that name).
CARD_TEMPLATE = LIBRARY / "tracking" / "templates" / "model_card.md"
RECORD_MODULE = LIBRARY / "results.py"
# What the record offers besides its fields.
METHODS = {name for name in vars(RunResults) if not name.startswith("_") and name not in RESULT_KEYS}
# The calls whose value is a RunResults.
MAKERS = {"read_results", "RunResults", "RunResults.from_dict", "finish_run"}


def _holder(node: ast.expr) -> str | None:
    """The name a record is read from: `run` in run.x, and in group[0].x (a list of them)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def record_names(function: ast.FunctionDef) -> set[str]:
    """The names that hold a RunResults (or lists of them) in a function: parameters annotated with it, the
    variables such lists are looped into, and variables assigned from a call that returns one."""
    names = set()
    arguments = function.args.posonlyargs + function.args.args + function.args.kwonlyargs
    for argument in arguments:
        annotation = argument.annotation
        if annotation is not None and "RunResults" in ast.unparse(annotation):
            names.add(argument.arg)
    for node in ast.walk(function):
        made = isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        if made and ast.unparse(node.value.func) in MAKERS:
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        looped = isinstance(node, ast.comprehension | ast.For) and isinstance(node.iter, ast.Name)
        if looped and node.iter.id in names and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def record_reads(path: Path) -> tuple[list[str], Counter]:
    """(the reads of a RunResults in `path` that the record does not answer, the fields read)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    problems, fields = [], Counter()
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        names = record_names(function)
        for node in ast.walk(function):
            where = f"{path.relative_to(REPO_ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and _holder(node.value) in names:
                if node.attr not in RESULT_KEYS and node.attr not in METHODS and node.attr != "append":
                    problems.append(f"{where}: {ast.unparse(node)} is no field of RunResults")
                fields[node.attr] += 1
            if isinstance(node, ast.Subscript) and _holder(node.value) in names and _is_text(node.slice):
                problems.append(f"{where}: {ast.unparse(node)} reads the record by key; read its field")
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr == "get" and _holder(node.func.value) in names:
                problems.append(f"{where}: {ast.unparse(node)} reads the record by key; read its field")
            if node.func.attr == "value" and _holder(node.func.value) in names and node.args:
                if _is_text(node.args[0]) and node.args[0].value not in RESULT_KEYS:
                    problems.append(f"{where}: {ast.unparse(node)} asks for a key the record does not have")
                fields[ast.unparse(node.args[0])] += 1
    return problems, fields


def template_reads(path: Path) -> tuple[list[str], Counter]:
    """(the template's reads of `results` that the record does not answer, the fields read), from Jinja's own
    parse of it: Jinja renders a misspelt field as nothing, so only this check sees one."""
    problems, fields = [], Counter()
    where = path.relative_to(REPO_ROOT)
    tree = jinja2.Environment().parse(path.read_text())
    for node in tree.find_all((jinja2.nodes.Getattr, jinja2.nodes.Getitem)):
        if not (isinstance(node.node, jinja2.nodes.Name) and node.node.name == "results"):
            continue
        if isinstance(node, jinja2.nodes.Getitem):
            problems.append(f"{where}: results[...] reads the record by key; read its field")
        elif node.attr not in RESULT_KEYS and node.attr not in METHODS:
            problems.append(f"{where}: results.{node.attr} is no field of RunResults")
        else:
            fields[node.attr] += 1
    return problems, fields


def test_every_field_a_module_reads_of_the_record_is_one_it_has():
    """Mutations tried: model_card's `results.positive_label` renamed `results.positive_labels`, and
    compare's `group[0].recipe` written `group[0]["recipe"]`, the card template's `results.precision` written
    `results.precisions`: each fails here."""
    problems, fields = template_reads(CARD_TEMPLATE)
    for path in READ_BY:
        found, read = record_reads(path)
        problems += found
        fields += read
    assert not problems, "\n".join(problems)
    # Not vacuous: the card, compare, predict, the W&B summary, ... read most of the record this way.
    assert len(fields) >= 50, sorted(fields)


def test_results_json_is_read_by_read_results_alone():
    """No module opens results.json itself: reading it is results.read_results (one reader, one error).
    Mutation tried: predict reading its run's file with json.loads again fails here."""
    readers = []
    for path in READ_BY:
        if path == RECORD_MODULE:
            continue
        tree = ast.parse(path.read_text())
        # The names this module gives results.py's RESULTS_FILE (crossval has a RESULTS_FILE of its own).
        file_names = {"results_path", "results_file"} | {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "recipes_lib.results"
            for alias in node.names
            if alias.name == "RESULTS_FILE"
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = ast.unparse(node.func)
            opens = (
                called.endswith(("read_text", "read_bytes", "json.load", "json.loads")) or called == "open"
            )
            named = {part.id for part in ast.walk(node) if isinstance(part, ast.Name)} & file_names
            if opens and (named or "results.json" in ast.unparse(node)):
                readers.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not readers, "\n".join(readers)


def test_no_field_is_declared_twice():
    """A second annotation of a name in a dataclass body replaces the first without a word."""
    tree = ast.parse(RECORD_MODULE.read_text())
    (record,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "RunResults"]
    declared = Counter(node.target.id for node in record.body if isinstance(node, ast.AnnAssign))
    assert [name for name, count in declared.items() if count > 1] == []
    assert tuple(declared) == RESULT_KEYS


def test_a_key_two_parts_of_the_record_give_stops_the_run(tiny_bert, learnable_data, tmp_path, monkeypatch):
    """finish_run builds the record from parts (the task's, the evaluation's, memory, the optimizer's state,
    ...): a key given by two of them is refused, not overwritten. Mutation tried: merging the parts into
    one dict before RunResults (as the record was built before) passes the collision and fails this test."""
    from recipes_lib.modeling import optimizers
    from recipes_lib.run import record

    measured = optimizers.optimizer_state_summary

    def also_counting_parameters(optimizer, model):
        return {**measured(optimizer, model), "params_total": 1}

    monkeypatch.setattr(record, "optimizer_state_summary", also_counting_parameters)
    with pytest.raises(TypeError, match="multiple values for keyword argument 'params_total'"):
        run_in_process("full_ft", run_args(tiny_bert, learnable_data, tmp_path / "run", **QUICK))
    assert not (tmp_path / "run" / RESULTS_FILE).exists()


def test_an_older_file_reads_with_its_missing_keys_null_and_its_dropped_ones_left_out():
    older = {"recipe": "lora", "eval_accuracy": 0.9, "test_runtime": 1.5}
    record = RunResults.from_dict(older)
    assert record.recipe == "lora" and record.eval_accuracy == 0.9 and record.eval_loss is None
    assert list(record.to_dict()) == list(RESULT_KEYS) and "test_runtime" not in record.to_dict()
    with pytest.raises(KeyError, match="no key 'eval_acuracy'"):
        record.value("eval_acuracy")


def test_every_field_is_documented():
    """docs/results-format.md names every key (a new field is one line there too)."""
    text = (REPO_ROOT / "docs" / "results-format.md").read_text()
    assert [key for key in RESULT_KEYS if f"`{key}`" not in text] == []


def test_a_results_json_that_is_not_a_record_is_refused_in_one_paragraph_naming_it(tmp_path):
    from recipes_lib.errors import ConfigError
    from recipes_lib.results import read_results
    from recipes_lib.whole_files import DamagedFileError

    path = tmp_path / RESULTS_FILE
    path.write_text('{"recipe": "lora", ')  # cut short by hand: a run writes it whole or not at all
    with pytest.raises(DamagedFileError, match=f"{path} .*ends too early.* run the recipe again"):
        read_results(tmp_path)
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="holds a list, not a run's record"):
        read_results(path)
