"""Predict reads its input as the run read its files (issue #55): a sentence-pair run trained on header-less,
tab-separated `.txt` files as published (a BOM, CRLF line ends) with --column_names predicts the same files
with no reading option, and gives the run's own eval_predictions.jsonl; each option can still be given.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from recipes_workbench.cli.main import main as cli_main
from tests.helpers.data import COLOURS, NOISE
from tests.helpers.runs import QUICK, run_args, run_in_process

TOLERANCE = 1e-5
NAMES = "quality,id1,id2,sentence1,sentence2"


def published_rows(count: int, seed: int) -> list[list[str]]:
    """MRPC's layout: quality, two ids, two sentences; 1 when both sentences name a colour of one kind."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        first, second = rng.choice(sorted(COLOURS)), rng.choice(sorted(COLOURS))
        texts = [" ".join([*rng.sample(NOISE, rng.randint(1, 6)), colour]) for colour in (first, second)]
        rows.append([str(int(COLOURS[first] == COLOURS[second])), str(100 + index), str(200 + index), *texts])
    return rows


def write_txt(path: Path, rows: list[list[str]], header: str | None = None) -> Path:
    """Tab-separated with a UTF-8 BOM and CRLF line ends, as the published pair sets are."""
    lines = ([header.replace(",", "\t")] if header else []) + ["\t".join(row) for row in rows]
    path.write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    return path


@pytest.fixture(scope="module")
def published(lively_bert, tmp_path_factory) -> tuple[Path, dict[str, Path], list[list[str]]]:
    directory = tmp_path_factory.mktemp("published")
    validation_rows = published_rows(12, 2)
    data = {
        "train": write_txt(directory / "train.txt", published_rows(24, 1)),
        "validation": write_txt(directory / "test.txt", validation_rows),
    }
    output_dir = directory / "run"
    extra = ("--column_names", NAMES, "--text_column_names", "sentence1,sentence2", "--label_column_name")
    run_in_process("full_ft", run_args(lively_bert, data, output_dir, *extra, "quality", **QUICK))
    return output_dir, data, validation_rows


def eval_rows(output_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (output_dir / "eval_predictions.jsonl").read_text().splitlines()]


def predicted(capsys, *args: str) -> list[dict]:
    assert cli_main(["predict", *args]) == 0, capsys.readouterr().err
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def assert_same(actual: list[dict], expected: list[dict]) -> None:
    assert [row["prediction"] for row in actual] == [row["prediction"] for row in expected]
    for got, want in zip(actual, expected, strict=True):
        assert got["probabilities"] == pytest.approx(want["probabilities"], abs=TOLERANCE)


def test_a_header_less_file_is_read_as_training_read_it(published, capsys):
    output_dir, data, _ = published
    rows = predicted(capsys, str(output_dir), "--input", str(data["validation"]))
    assert_same(rows, eval_rows(output_dir))
    assert [row["id"] for row in rows] == list(range(12))  # every line a row: none taken for a header


def test_a_file_headed_by_the_runs_column_names_is_read_with_that_header(published, tmp_path, capsys):
    output_dir, _, validation_rows = published
    headed = write_txt(tmp_path / "headed.txt", validation_rows, header=NAMES)
    assert_same(predicted(capsys, str(output_dir), "--input", str(headed)), eval_rows(output_dir))


def test_each_reading_option_can_still_be_given(published, tmp_path, capsys):
    output_dir, _, validation_rows = published
    # Another layout: semicolons, the sentences first, under other names.
    lines = [";".join([row[3], row[4], row[0]]) for row in validation_rows]
    other = tmp_path / "other.csv"
    other.write_text("\n".join(lines) + "\n")
    rows = predicted(
        capsys, str(output_dir), "--input", str(other), "--delimiter", "semicolon",
        "--column_names", "a,b,gold", "--text_column_names", "a,b",
    )  # fmt: skip
    assert_same(rows, eval_rows(output_dir))
