"""Label issues that respect classes (issue #42): a class the held-out model never predicts is reported, its
rows are not flagged on that model's word, and --drop_label_issues will not remove most of a class unasked."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

from recipes_workbench.cli.main import main as cli_main
from recipes_workbench.crossval.oof import OOF_FILE, RESULTS_FILE
from tests.helpers.data import write_jsonl

LEARNT = ["billing", "shipping", "returns"]
CLASSES = [*LEARNT, "warranty"]


def write_crossval(directory, records, oof, label_column: str, task: str) -> None:
    """What a 3-fold `recipes-lib crossval` leaves in `directory`: the training rows, the held-out
    predictions and the results naming them (what label-issues reads)."""
    directory.mkdir(parents=True, exist_ok=True)
    train = write_jsonl(directory / "train.jsonl", records)
    write_jsonl(directory / OOF_FILE, oof)
    (directory / RESULTS_FILE).write_text(json.dumps({
        "train_file": str(train), "data_arguments": {"train_file": str(train), "label_column_name": label_column},
        "task": task, "classes": CLASSES, "folds": 3, "text_columns": ["text"],
    }))  # fmt: skip


def probabilities_for(favoured: str, confidence: float) -> dict[str, float]:
    rest = (1 - confidence) / (len(CLASSES) - 1)
    return {name: confidence if name == favoured else rest for name in CLASSES}


def crossval_dir(
    directory: Path, warranty_found: int = 0, rows: int = 180, warranty: int = 12, flips: int = 15
):
    """A finished cross-validation by hand: `rows` rows of three classes the model learnt, `flips` of them
    given another of those (the planted label errors), and `warranty` correctly labelled rows of a class
    the model predicts only `warranty_found` times (each other warranty row it calls 'returns').
    Returns (the flipped rows, the warranty rows)."""
    rng = random.Random(0)
    flipped = set(rng.sample(range(rows), flips))
    records, oof = [], []
    for row in range(rows + warranty):
        if row < rows:
            true = LEARNT[row % 3]
            given = rng.choice([c for c in LEARNT if c != true]) if row in flipped else true
            favoured = true
        else:
            true = given = "warranty"
            favoured = "warranty" if row - rows < warranty_found else "returns"
        probabilities = probabilities_for(favoured, rng.uniform(0.7, 0.95))
        records.append({"text": f"ticket {row}", "label": given})
        oof.append({"row": row, "fold": row % 3, "label": given, "prediction": favoured,
                    "probabilities": probabilities})  # fmt: skip
    write_crossval(directory, records, oof, "label", "single_label_classification")
    return flipped, set(range(rows, rows + warranty))


def issues(directory: Path) -> set[int]:
    with open(directory / "label_issues.csv", newline="") as handle:
        return {int(row["row"]) for row in csv.DictReader(handle)}


@pytest.mark.parametrize("task", ["single_label", "multi_label"])
def test_a_class_the_model_never_predicts_is_reported_and_its_rows_are_not_flagged(task, tmp_path, capsys):
    pytest.importorskip("cleanlab")
    make_dir = crossval_dir if task == "single_label" else multi_label_crossval_dir
    flipped, warranty = make_dir(tmp_path / "cv")
    assert cli_main(["label-issues", str(tmp_path / "cv"), "--drop_label_issues"]) == 0
    found = issues(tmp_path / "cv")
    assert not found & warranty
    assert len(found & flipped) / len(found) >= 0.9 and len(found & flipped) / len(flipped) >= 0.75
    summary = json.loads((tmp_path / "cv" / "label_issues.json").read_text())
    (entry,) = summary["neglected_classes"]
    assert (entry["name"], entry["support"], entry["recall"], entry["predicted"]) == ("warranty", 12, 0.0, 0)
    assert entry["flagged"] > 6 and summary["withheld"] == entry["flagged"]  # cleanlab doubted them: withheld
    if task == "single_label":
        assert summary["model_learnt"] is True  # the overall check alone passes this model
    out = capsys.readouterr().out
    (caution,) = [line for line in out.splitlines() if "never predicts" in line]
    assert (
        "'warranty' (12 rows, recall 0.00, predicted for 0 rows)" in caution and "--class_weights" in caution
    )
    cleaned = [
        json.loads(line) for line in (tmp_path / "cv" / "train_cleaned.jsonl").read_text().splitlines()
    ]
    given = [[record["label"]] if task == "single_label" else record["labels"] for record in cleaned]
    assert sum("warranty" in labels for labels in given) == 12


def test_dropping_most_of_a_class_needs_its_own_flag(tmp_path, capsys):
    pytest.importorskip("cleanlab")
    # The model finds 3 of 12 warranty rows (recall 0.25: it learnt the class a little) and doubts the rest.
    _, warranty = crossval_dir(tmp_path / "cv", warranty_found=3)
    assert cli_main(["label-issues", str(tmp_path / "cv"), "--drop_label_issues"]) != 0
    found = issues(tmp_path / "cv")
    assert len(found & warranty) > 6  # flagged (the class is not neglected), but not dropped unasked
    error = capsys.readouterr().err
    assert "would remove most of 'warranty'" in error and "--drop_most_of_a_class" in error
    assert not (tmp_path / "cv" / "train_cleaned.jsonl").exists()
    assert (
        cli_main(["label-issues", str(tmp_path / "cv"), "--drop_label_issues", "--drop_most_of_a_class"]) == 0
    )
    cleaned = [
        json.loads(line) for line in (tmp_path / "cv" / "train_cleaned.jsonl").read_text().splitlines()
    ]
    assert sum(record["label"] == "warranty" for record in cleaned) == 12 - len(found & warranty)


def multi_label_crossval_dir(directory: Path, rows: int = 180, warranty: int = 12, flips: int = 15):
    """The multi-label case by hand: `rows` rows given one or two of three classes the model learnt,
    `flips` of them with one given class swapped for another (the planted errors), and `warranty` rows
    given 'warranty' (half of them with a learnt class too), a class the model never predicts.
    Returns (the flipped rows, the warranty rows)."""
    rng = random.Random(1)
    flipped = set(rng.sample(range(rows), flips))
    records, oof = [], []
    for row in range(rows + warranty):
        if row < rows:
            true = sorted(rng.sample(LEARNT, rng.choice([1, 2])))
            given = list(true)
            if row in flipped:  # one true class swapped for one the row does not have
                given[rng.randrange(len(given))] = rng.choice([c for c in LEARNT if c not in true])
                given = sorted(given)
        else:
            true = given = ["warranty"] + ([LEARNT[row % 3]] if row % 2 else [])
        predicted = [c for c in true if c != "warranty"]  # warranty: never predicted
        probabilities = {
            name: rng.uniform(0.8, 0.97) if name in predicted else rng.uniform(0.01, 0.1) for name in CLASSES
        }
        records.append({"text": f"ticket {row}", "labels": given})
        oof.append({"row": row, "fold": row % 3, "label": given, "prediction": predicted,
                    "probabilities": probabilities})  # fmt: skip
    write_crossval(directory, records, oof, "labels", "multi_label_classification")
    return flipped, set(range(rows, rows + warranty))
