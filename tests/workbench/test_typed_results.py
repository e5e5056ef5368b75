"""results.json is read typed (issue 54): a value of another type than its field's is a damaged file, said in
one paragraph naming the file and the key, by read_results and so by every command that reads a run
(show, compare, predict, push). Every field x values of every JSON kind; the accepted ones are what an
independent table, by the field's annotation, says a run writes."""

from __future__ import annotations

import json
import typing

import pytest

from recipes_lib.results import RESULT_KEYS, RESULTS_FILE, RunResults, read_results
from recipes_lib.whole_files import DamagedFileError
from recipes_workbench.cli.main import main as cli

# One value of each JSON kind (and of each nested kind a field holds).
CANDIDATES = {
    "str": "text", "int": 7, "float": 0.25, "bool": True, "list of str": ["a"], "list of int": [1],
    "list of dict": [{"k": 1}], "dict of float": {"k": 0.5}, "dict of str": {"k": "v"},
    "dict of dict": {"k": {"x": 1}}, "dict of null": {"k": None}, "dict of list": {"k": [1]},
}  # fmt: skip
# Which candidates fit each annotation (written out by hand, not derived from the reader under test).
ACCEPTED = {
    "str | None": {"str"},
    "int | None": {"int"},
    "float | None": {"int", "float"},
    "bool | None": {"bool"},
    "list[str] | None": {"list of str"},
    "list[str] | str | None": {"list of str", "str"},
    "list[dict[str, typing.Any]] | None": {"list of dict"},
    "dict[str, float] | None": {"dict of float", "dict of null"},  # NaN is written as null
    "dict[str, int] | None": set(),
    "dict[str, str | None] | None": {"dict of str", "dict of null"},
    "dict[str, float | None] | None": {"dict of float", "dict of null"},
    "dict[str, typing.Any] | None": {
        "dict of float",
        "dict of str",
        "dict of dict",
        "dict of null",
        "dict of list",
    },
    "dict[str, dict[str, typing.Any]] | None": {"dict of dict"},
}
HINTS = {name: str(hint) for name, hint in typing.get_type_hints(RunResults).items()}
CASES = [(key, kind) for key in RESULT_KEYS for kind in CANDIDATES]


def test_every_field_s_annotation_is_in_the_table():
    assert {HINTS[key] for key in RESULT_KEYS} <= set(ACCEPTED)


@pytest.mark.parametrize("key, kind", CASES, ids=[f"{key}-{kind}" for key, kind in CASES])
def test_a_value_of_the_wrong_type_is_a_damaged_file_naming_the_key(tmp_path, key, kind):
    path = tmp_path / RESULTS_FILE
    path.write_text(json.dumps({key: CANDIDATES[kind]}))
    if kind in ACCEPTED[HINTS[key]]:
        assert read_results(tmp_path).value(key) == CANDIDATES[kind]
    else:
        with pytest.raises(
            DamagedFileError, match=rf"{path} .*damaged: its key '{key}' holds .*run the recipe again"
        ):
            read_results(tmp_path)
        with pytest.raises(TypeError, match=f"'{key}'"):
            RunResults.from_dict({key: CANDIDATES[kind]})


@pytest.fixture(scope="module")
def finished_run(tiny_bert, learnable_data, tmp_path_factory):
    from tests.helpers.runs import QUICK, run_args, run_in_process

    output_dir = tmp_path_factory.mktemp("typed-run")
    run_in_process("full_ft", run_args(tiny_bert, learnable_data, output_dir, **QUICK))
    return output_dir


def _wrong_value(key: str):
    return next(CANDIDATES[kind] for kind in CANDIDATES if kind not in ACCEPTED[HINTS[key]])


@pytest.mark.parametrize("command", ["show", "compare", "predict", "push"])
def test_every_command_that_reads_a_run_says_a_wrong_type_in_one_paragraph(
    finished_run, tmp_path, capsys, monkeypatch, command
):
    import shutil

    from recipes_workbench.tools import push

    monkeypatch.setattr(push, "hub_problem", lambda token: None)  # past the Hub's checks, to the record
    texts = tmp_path / "texts.csv"
    texts.write_text("text\nwarm day\n")
    run = shutil.copytree(finished_run, tmp_path / "run")
    record = json.loads((run / RESULTS_FILE).read_text())
    argv = {
        "show": ["show", str(run)],
        "compare": ["compare", str(run), str(finished_run), "--chart", str(tmp_path / "chart.png")],
        "predict": ["predict", str(run), "--input", str(texts)],
        "push": ["push", str(run), "--repo_id", "user/run"],
    }[command]
    for key in RESULT_KEYS:
        (run / RESULTS_FILE).write_text(json.dumps({**record, key: _wrong_value(key)}))
        assert cli(argv) == 2, key
        err = capsys.readouterr().err
        assert err.count("error: ") == 1 and f"its key '{key}'" in err and "Traceback" not in err, err


@pytest.mark.parametrize("key", ["text_columns", "problem_type", "config", "label_thresholds"])
def test_an_export_s_run_settings_of_the_wrong_type_are_a_damaged_file(tmp_path, key):
    from recipes_workbench.export.bundle import FP32_MODEL, SETTINGS_FILE, find_export

    (tmp_path / FP32_MODEL).write_bytes(b"onnx")
    (tmp_path / SETTINGS_FILE).write_text(json.dumps({"run": {key: 7}}))
    with pytest.raises(
        DamagedFileError, match=rf"{SETTINGS_FILE} holds no whole \"run\" settings .*its key '{key}'"
    ):
        find_export(tmp_path)
