"""`recipes-lib label-issues`: the training rows most likely mislabelled, by cleanlab, from the out-of-fold
probabilities of `recipes-lib crossval` (the 'data-quality' extra).

Single-label: cleanlab.filter.find_label_issues flags the rows (confident learning: a row whose given
class the held-out model finds less likely than that class's typical confidence, and another more
likely), cleanlab.rank.get_label_quality_scores scores every row (self-confidence: the probability of
the given class). Multi-label: the same two through cleanlab's multi-label variant (find_label_issues
with multi_label=True, cleanlab.multilabel_classification.get_label_quality_scores). Regression has no
class probabilities to judge: not supported.

The probabilities must be out-of-fold (each row scored by a model that never trained on it); a model's
scores of its own training rows are confident about whatever it memorised, wrong labels included.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION
from recipes_lib.crossval.folds import read_training_rows, write_rows
from recipes_lib.crossval.oof import OOF_FILE, RESULTS_FILE
from recipes_lib.data.files import DELIMITED
from recipes_lib.errors import ConfigError
from recipes_lib.units import format_table

ISSUES_FILE = "label_issues.csv"
CLEANED_STEM = "train_cleaned"


def read_crossval(directory: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    results_path, oof_path = directory / RESULTS_FILE, directory / OOF_FILE
    if not results_path.is_file() or not oof_path.is_file():
        raise ConfigError(
            f"{directory} holds no finished cross-validation ({RESULTS_FILE} and {OOF_FILE}): label issues need "
            "every training row's out-of-fold probabilities. Run `recipes-lib crossval RECIPE --output_dir "
            f"{directory} ...` first (a single run's own predictions are not out-of-fold for its training rows)."
        )
    results = json.loads(results_path.read_text())
    oof = [json.loads(line) for line in oof_path.read_text().splitlines() if line.strip()]
    return results, oof


def find_issues(task: str, classes: list[str], oof: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(a flag per row, a label-quality score per row in [0, 1], lower is worse), by cleanlab."""
    from cleanlab.filter import find_label_issues

    probabilities = np.array([[row["probabilities"][name] for name in classes] for row in oof], dtype=float)
    ids = {name: i for i, name in enumerate(classes)}
    if task == MULTI_LABEL:
        from cleanlab.multilabel_classification import get_label_quality_scores

        given = [sorted(ids[str(name)] for name in row_classes(row)) for row in oof]
        flags = find_label_issues(labels=given, pred_probs=probabilities, multi_label=True)
        scores = get_label_quality_scores(labels=given, pred_probs=probabilities)
        return np.asarray(flags), np.asarray(scores)
    from cleanlab.rank import get_label_quality_scores

    # Single-label rows sum to 1 up to the 6-decimal rounding of the file; cleanlab checks that they do.
    probabilities = probabilities / probabilities.sum(axis=1, keepdims=True)
    given_ids = np.array([ids[str(row["label"])] for row in oof])
    flags = find_label_issues(labels=given_ids, pred_probs=probabilities)
    scores = get_label_quality_scores(labels=given_ids, pred_probs=probabilities)
    return np.asarray(flags), np.asarray(scores)


def row_classes(row: dict[str, Any]) -> list:
    """A multi-label row's given classes, as the out-of-fold file holds them (a list, or one delimited string)."""
    label = row["label"]
    return label if isinstance(label, list) else row.get("label_classes", [label])


def label_issues(directory: str, top: int = 10, drop_to: str | None = None) -> int:
    """label_issues.csv in the cross-validation's directory, the top rows and per-class counts printed;
    with `drop_to` ("" for the default name), the training file without the flagged rows."""
    directory_path = Path(directory)
    results, oof = read_crossval(directory_path)
    if results["task"] == REGRESSION:
        print("label-issues: regression is not supported (cleanlab's label issues need class probabilities).")
        return 2
    training = read_training_rows(results.get("data_arguments") or {"train_file": results["train_file"]})
    if results["task"] == MULTI_LABEL:
        for row in oof:  # a delimited string of classes in the file: the recipe's own reading of it
            row["label_classes"] = [str(c) for c in training.labels.classes_of(row["label"])]
    classes = results["classes"]
    flags, scores = find_issues(results["task"], classes, oof)
    text_columns = results.get("text_columns") or []
    flagged = sorted(np.flatnonzero(flags), key=lambda i: (scores[i], i))
    lines = [
        {
            "row": oof[i]["row"],
            "text": " | ".join(str(training.rows[oof[i]["row"]].get(column, "")) for column in text_columns),
            "given_label": describe(oof[i]["label"]),
            "suggested_label": describe(oof[i]["prediction"]),
            "label_quality": round(float(scores[i]), 6),
        }
        for i in flagged
    ]
    path = directory_path / ISSUES_FILE
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(
            handle, fieldnames=["row", "text", "given_label", "suggested_label", "label_quality"]
        )
        writer.writeheader()
        writer.writerows(lines)
    temporary.replace(path)
    print(
        f"{len(lines)} of {len(oof)} training rows of {results['train_file']} look mislabelled (cleanlab, from "
        f"{results['folds']}-fold out-of-fold probabilities); all of them, worst first: {path}"
    )
    if lines:
        shown = [[str(line["row"]), shorten(line["text"]), line["given_label"], line["suggested_label"],
                  f"{line['label_quality']:.3f}"] for line in lines[:top]]  # fmt: skip
        print(format_table(["row", "text", "given", "suggested", "quality"], shown))
        per_class = Counter(
            name for i in flagged for name in (oof[i].get("label_classes") or [describe(oof[i]["label"])])
        )
        print(
            "Suspects per given class: " + ", ".join(f"{name} {per_class.get(name, 0)}" for name in classes)
        )
    if drop_to is not None:
        write_cleaned(
            training,
            {oof[i]["row"] for i in flagged},
            drop_to or default_cleaned(directory_path, training.path),
        )
    return 0


def default_cleaned(directory: Path, train_file: str) -> Path:
    suffix = Path(train_file).suffix.lower()
    return directory / f"{CLEANED_STEM}{suffix if suffix in DELIMITED or suffix == '.jsonl' else '.jsonl'}"


def write_cleaned(training, dropped: set[int], destination: str | Path) -> None:
    destination = Path(destination)
    if destination.resolve() == Path(training.path).resolve():
        raise ConfigError(
            f"--drop_label_issues would overwrite the training file {training.path}; give another file name."
        )
    kept = [row for index, row in enumerate(training.rows) if index not in dropped]
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_rows(destination, kept, training.columns)
    print(f"Cleaned training file ({len(kept)} rows, {len(dropped)} dropped): {destination}; retrain with "
          f"--train_file {destination} and compare.")  # fmt: skip


def describe(label) -> str:
    return ", ".join(map(str, label)) if isinstance(label, list) else str(label)


def shorten(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
