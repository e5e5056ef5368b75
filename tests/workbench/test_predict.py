"""`recipes-lib predict`: every kind of run output predicts, on the validation file, what the run evaluated.

Each run is the recipe's own main() in this process (tests/helpers/runs.py, `run_in_process`), two optimizer steps on a
tiny BERT whose classifier and encoder weights are drawn larger than BERT's initialisation: its
probabilities then differ from row to row by around 1e-2, far above the 1e-5 tolerance, so rows in
another order, or a model that is not the evaluated one, cannot pass.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers.data import learnable_rows, write_csv
from tests.helpers.runs import QUICK, run_args, run_in_process

TOLERANCE = 1e-5
MERGED = "merged"


@pytest.fixture(scope="module")
def predict_data(learnable_data, tmp_path_factory) -> dict[str, Path]:
    """The learnable training data; a validation file of 16 rows, all of which the run evaluates."""
    directory = tmp_path_factory.mktemp("predict-data")
    return {
        "train": learnable_data["train"],
        "validation": write_csv(directory / "dev.csv", learnable_rows(16, 3)),
    }


def _run(recipe: str, model: Path, data: dict[str, Path], output_dir: Path, *extra: str) -> Path:
    run_in_process(recipe, run_args(model, data, output_dir, *extra, **QUICK))
    return output_dir


@pytest.fixture(scope="module")
def full_ft_run(lively_bert, predict_data, tmp_path_factory) -> Path:
    # Text column named, so results.json's config carries it (the LoRA runs find theirs themselves).
    output_dir = tmp_path_factory.mktemp("full_ft")
    return _run("full_ft", lively_bert, predict_data, output_dir, "--text_column_names", "text")


@pytest.fixture(scope="module")
def lora_run(lively_bert, predict_data, tmp_path_factory) -> Path:
    output_dir = tmp_path_factory.mktemp("lora")
    return _run("lora", lively_bert, predict_data, output_dir, "--merge_adapter", "true")


@pytest.fixture(scope="module")
def qlora_run(lively_bert, predict_data, tmp_path_factory) -> tuple[Path, list[str]]:
    import logging

    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("recipes_lib.modeling.adapters")
    logger.addHandler(handler)
    try:
        output_dir = _run(
            "qlora", lively_bert, predict_data, tmp_path_factory.mktemp("qlora"), "--merge_adapter", "true"
        )
    finally:
        logger.removeHandler(handler)
    return output_dir, records


def eval_rows(output_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (output_dir / "eval_predictions.jsonl").read_text().splitlines()]


def assert_same_rows(actual: list[dict], expected: list[dict], tolerance: float = TOLERANCE) -> None:
    assert len(actual) == len(expected)
    assert [row["prediction"] for row in actual] == [row["prediction"] for row in expected]
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        assert got["probabilities"].keys() == want["probabilities"].keys(), index
        for name, probability in want["probabilities"].items():
            assert got["probabilities"][name] == pytest.approx(probability, abs=tolerance), (index, name)


def _predict(run_dir, input_file, **options):
    from recipes_workbench.tools.predict import predict

    return predict(run_dir, input_file, progress=False, **options)


# --- every kind of output predicts what its run evaluated -----------------------------------------


@pytest.mark.parametrize(
    ("run_fixture", "subdir"),
    [("full_ft_run", ""), ("lora_run", ""), ("lora_run", MERGED), ("qlora_run", "")],
    ids=["full_ft", "lora-adapter", "lora-merged", "qlora"],
)
def test_predict_on_the_validation_file_gives_the_runs_own_eval_predictions(
    run_fixture, subdir, predict_data, request
):
    run = request.getfixturevalue(run_fixture)
    output_dir = run[0] if isinstance(run, tuple) else run
    expected = eval_rows(output_dir)
    cool = [row["probabilities"]["cool"] for row in expected]
    assert len(expected) == 16 and max(cool) - min(cool) > 100 * TOLERANCE  # rows tell apart
    # A batch size that is not the evaluation's 8: padding differs, predictions must not.
    rows = _predict(output_dir / subdir, predict_data["validation"], batch_size=5)
    assert_same_rows(rows, expected)


def test_a_binary_run_is_predicted_at_the_decision_threshold_saved_with_it(
    full_ft_run, predict_data, tmp_path
):
    """decision_threshold.json beside the model decides the positive class (label id 1), not the argmax."""
    run = shutil.copytree(full_ft_run, tmp_path / "run")
    positive = json.loads((run / "config.json").read_text())["id2label"]["1"]
    assert any(row["prediction"] != positive for row in eval_rows(full_ft_run))  # the argmax's other rows
    (run / "decision_threshold.json").write_text(json.dumps({"threshold": 0.001}))
    rows = _predict(run, predict_data["validation"])
    assert len(rows) == 16 and all(row["prediction"] == positive for row in rows)


def test_qlora_output_rebuilds_its_4bit_base_and_the_log_says_what_the_merged_model_is(
    qlora_run, predict_data
):
    from recipes_lib.modeling.adapters import BASE_QUANTIZATION_FILE, load_trained_model

    output_dir, log = qlora_run
    saved = json.loads((output_dir / BASE_QUANTIZATION_FILE).read_text())
    assert saved["bnb_4bit_quant_type"] == "nf4" and saved["bnb_4bit_use_double_quant"] is True
    assert saved["bnb_4bit_compute_dtype"] == "float32"  # the run's precision: fp32 on CPU
    assert saved["llm_int8_skip_modules"] == ["bert.pooler.dense", "classifier"]
    model = load_trained_model(output_dir)
    query = model.base_model.model.bert.encoder.layer[0].attention.self.query.base_layer
    assert type(query).__name__ == "Linear4bit" and query.compute_dtype == torch.float32
    assert query.weight.quant_state.quant_type == "nf4" and query.weight.quant_state.nested

    merged_note = next(message for message in log if "Merged model saved" in message)
    assert "dequantized to fp32" in merged_note and "not the evaluated model" in merged_note
    # Folded into the NF4 weights it trained on, dequantized: in fp32 it predicts what was evaluated.
    merged_rows = _predict(output_dir / MERGED, predict_data["validation"])
    assert_same_rows(merged_rows, eval_rows(output_dir), tolerance=1e-4)
    # results.json says what the merged model is and scores it on its own: its accuracy from its own rows.
    results = json.loads((output_dir / "results.json").read_text())
    assert "dequantized to fp32" in results["merged_model"]
    labels = [line.rsplit(",", 1)[1] for line in predict_data["validation"].read_text().splitlines()[1:]]
    correct = sum(row["prediction"] == label for row, label in zip(merged_rows, labels, strict=True))
    assert results["merged_eval_accuracy"] == pytest.approx(correct / len(labels))


def test_a_lora_run_saves_no_quantization_file(lora_run):
    from recipes_lib.modeling.adapters import BASE_QUANTIZATION_FILE

    assert (lora_run / "adapter_config.json").is_file() and not (lora_run / BASE_QUANTIZATION_FILE).exists()


def test_a_full_model_output_loads_in_a_transformers_pipeline_with_its_label_names(full_ft_run):
    from transformers import pipeline

    classify = pipeline("text-classification", model=str(full_ft_run), device="cpu")
    answers = classify(["the red cat sat", "a blue dog ran"])
    assert {answer["label"] for answer in answers} <= {"cool", "warm"}
    assert all(0 < answer["score"] <= 1 for answer in answers)


# --- input formats and the command line ------------------------------------------------------------


def _rows_of(csv_path: Path) -> list[dict]:
    import csv

    with open(csv_path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("extension", [".jsonl", ".json", ".parquet", ".tsv"])
def test_every_input_format_gives_the_same_predictions_as_the_csv(
    extension, full_ft_run, predict_data, tmp_path
):
    import datasets

    records = [{"id": f"r{i}", **row} for i, row in enumerate(_rows_of(predict_data["validation"]))]
    path = tmp_path / f"input{extension}"
    if extension == ".tsv":
        write_csv(path, [(r["id"], r["text"], r["label"]) for r in records], ("id", "text", "label"), "\t")
    elif extension == ".json":
        path.write_text(json.dumps(records))
    else:
        table = datasets.Dataset.from_list(records)
        table.to_parquet(path) if extension == ".parquet" else table.to_json(path, lines=True)
    assert_same_rows(_predict(full_ft_run, path), eval_rows(full_ft_run))


def test_the_command_writes_json_lines_to_output_or_stdout(full_ft_run, predict_data, tmp_path, capsys):
    from recipes_workbench.cli.main import main

    output = tmp_path / "predictions.jsonl"
    assert (
        main(
            ["predict", str(full_ft_run), "--input", str(predict_data["validation"]), "--output", str(output)]
        )
        == 0
    )
    written = [json.loads(line) for line in output.read_text().splitlines()]
    assert_same_rows(written, eval_rows(full_ft_run))
    assert [row["id"] for row in written] == list(range(len(written)))  # the input's row numbers
    capsys.readouterr()
    assert (
        main(["predict", str(full_ft_run), "--input", str(predict_data["validation"]), "--batch_size", "3"])
        == 0
    )
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert_same_rows(printed, written)


# --- errors: one paragraph naming the value and the fix ---------------------------------------------


def _copy_run(run_dir: Path, destination: Path, **results_changes) -> Path:
    shutil.copytree(run_dir, destination)
    results = json.loads((destination / "results.json").read_text())
    for key, value in results_changes.items():
        if key == "text_column_names":
            results["config"][key] = value
        elif value is None:
            results.pop(key, None)
        else:
            results[key] = value
    (destination / "results.json").write_text(json.dumps(results))
    return destination


def test_a_missing_run_dir_or_results_json_says_what_to_pass(full_ft_run, predict_data, tmp_path):
    from recipes_lib.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"'.*nowhere' does not exist\. Pass the output_dir of a finished run"
    ):
        _predict(tmp_path / "nowhere", predict_data["validation"])
    unfinished = tmp_path / "unfinished"
    shutil.copytree(full_ft_run, unfinished)
    (unfinished / "results.json").unlink()
    with pytest.raises(
        ConfigError, match=r"holds no results\.json, so it is not the output_dir of a finished run"
    ):
        _predict(unfinished, predict_data["validation"])


def test_a_missing_text_column_names_the_column_the_file_has_and_the_fix(full_ft_run, tmp_path):
    from recipes_lib.errors import DataError

    path = write_csv(tmp_path / "renamed.csv", [("a red cat", "warm")], ("sentence", "label"))
    with pytest.raises(DataError) as error:
        _predict(full_ft_run, path)
    message = str(error.value)
    assert "Text column 'text' is not in" in message and "its columns are: sentence, label" in message
    assert "name the input's column with --text_column_names" in message


# A runaway field (a wrong delimiter or quoting) would cost ~80 bytes a character to tokenize: refused first.
def test_an_input_text_over_the_runs_max_text_chars_is_refused_and_the_bound_can_be_raised(
    full_ft_run, tmp_path, capsys
):
    from recipes_workbench.cli.main import main

    huge = write_csv(tmp_path / "huge.csv", [("a red cat", "warm"), ("x" * 1_000_001, "cool")])
    assert main(["predict", str(full_ft_run), "--input", str(huge)]) == 2  # the run's bound, 1,000,000
    assert "Row 2 of huge.csv has a 'text' of 1,000,001 characters, over the bound of 1,000,000" in (
        capsys.readouterr().err
    )
    long = write_csv(tmp_path / "long.csv", [("a red cat", "warm"), ("red " * 30, "cool")])  # 120 characters
    assert main(["predict", str(full_ft_run), "--input", str(long), "--max_text_chars", "100"]) == 2
    assert "over the bound of 100 (--max_text_chars)" in capsys.readouterr().err
    assert main(["predict", str(full_ft_run), "--input", str(long), "--max_text_chars", "120"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_the_text_column_and_an_id_column_are_named_on_the_command_line(
    full_ft_run, predict_data, tmp_path, capsys
):
    """A file whose text column is not called 'text', tab-separated though named .csv: the same predictions
    as the validation file, each row with its id (the named column's value, or the row's number)."""
    from recipes_workbench.cli.main import main

    renamed = tmp_path / "questions.csv"
    rows = learnable_rows(16, 3)  # the validation file's rows (predict_data)
    renamed.write_text("qid\tquestion\n" + "".join(f"q{i}\t{text}\n" for i, (text, _) in enumerate(rows)))
    assert main(["predict", str(full_ft_run), "--input", str(renamed), "--text_column_names", "question",
                 "--id_column", "qid"]) == 0  # fmt: skip
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["id"] for row in printed] == [f"q{i}" for i in range(len(rows))]
    assert_same_rows(printed, eval_rows(full_ft_run))
    assert (
        main(["predict", str(full_ft_run), "--input", str(renamed), "--text_column_names", "question"]) == 0
    )
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == list(range(len(rows)))
    assert main(["predict", str(full_ft_run), "--input", str(renamed), "--text_column_names", "text"]) == 2
    error = capsys.readouterr().err
    assert (
        "--text_column_names names 'text', which is not in" in error
        and "its columns are: qid, question" in error
    )
    assert "questions.csv was read as tab-separated (from its content" in error


def test_a_run_that_did_not_record_its_text_columns_takes_the_inputs_string_columns(full_ft_run, tmp_path):
    from recipes_lib.errors import DataError

    unrecorded = _copy_run(full_ft_run, tmp_path / "unrecorded", text_column_names=None, text_columns=None)
    one_text = write_csv(tmp_path / "one.csv", [("the red cat", "warm")], ("sentence", "label"))
    assert len(_predict(unrecorded, one_text)) == 1
    three = write_csv(
        tmp_path / "three.csv", [("x1", "the red cat", "note", "warm")], ("id", "text", "note", "label")
    )
    with pytest.raises(
        DataError, match=r"Cannot tell which columns .* are id, text, note .*Name the text column with --text"
    ):
        _predict(unrecorded, three)


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("absent.csv", None, r"'.*absent\.csv' does not exist\. Pass --input a \.csv, \.tsv"),
        ("texts.xlsx", "the red cat\n", r"extension '\.xlsx', which predict cannot read\. Save it as one of"),
        ("empty.csv", "text,label\n", r"holds no rows below the header"),
        (
            "broken.jsonl",
            '{"text": "the red cat"}\n{"text": \n',
            r"Could not read .*broken\.jsonl.* as jsonl",
        ),
        ("binary.csv", b"\xff\xfe\x00text\x00\xff,\x80\x81\n\x00\x9f,\x80\n", r"binary\.csv"),
        (
            "ragged.csv",
            'text,label\n"the red cat",warm,extra\n',
            r"ragged\.csv has rows whose field count differs",
        ),
    ],
    ids=["missing", "unsupported-extension", "empty", "bad-jsonl", "not-utf8", "ragged-csv"],
)
def test_an_unreadable_input_file_is_one_error_naming_the_file_and_the_fix(
    name, content, expected, full_ft_run, tmp_path
):
    from recipes_lib.errors import DataError

    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(DataError, match=expected):
        _predict(full_ft_run, path)


def test_the_command_prints_one_error_paragraph_and_exits_2(tmp_path, capsys):
    from recipes_workbench.cli.main import main

    assert main(["predict", str(tmp_path / "nowhere"), "--input", str(tmp_path / "x.csv")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: The run directory") and captured.err.count("\n") == 1
    assert "Traceback" not in captured.err
