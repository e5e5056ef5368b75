"""`recipes-lib label-issues`: the rows most likely mislabelled, by cleanlab, from held-out probabilities
(a crossval's every training row, or a run's validation rows), with the checks that the model had learnt
(`learning_check`) and which classes it never predicts (`class_check`): docs/crossval.md, "Label issues".
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION
from recipes_lib.errors import ConfigError, DataError
from recipes_lib.evaluation.neglected import NEGLECTED_RECALL, describe_class
from recipes_lib.evaluation.predictions import EVAL_PREDICTIONS_FILE
from recipes_lib.locking import lock_directory
from recipes_lib.results import RESULTS_FILE as RUN_RESULTS_FILE
from recipes_lib.results import read_results
from recipes_lib.whole_files import read_json, write_text_whole
from recipes_workbench.crossval.folds import (
    TrainingRows,
    read_labelled_rows,
    read_training_rows,
    write_rows,
    written_suffix,
)
from recipes_workbench.crossval.oof import OOF_FILE, RESULTS_FILE, read_jsonl
from recipes_workbench.shared import format_table

ISSUES_FILE = "label_issues.csv"
# Beside the CSV: the counts, where the probabilities came from, and whether the model had learnt.
SUMMARY_FILE = "label_issues.json"
# How far above the majority-class rate held-out accuracy must be for the flags to be read as label
# issues: 5 points, twice the chance spread of a few hundred rows (one standard deviation of a rate
# near 0.3 over 400 rows is sqrt(0.3 * 0.7 / 400) = 2.3 points) without asking much of a model that learnt anything.
LEARNT_MARGIN = 0.05
# --drop_label_issues removing more than this share of a class's rows asks for --drop_most_of_a_class.
MOST_OF_A_CLASS = 0.5
CLEANED_STEM = "train_cleaned"
VALIDATION_CLEANED_STEM = "validation_cleaned"
# The recipe's data arguments a run's results.json holds (its "config"), to read its validation file as it did.
RUN_DATA_KEYS = ("label_column_name", "label_delimiter", "csv_quoting", "delimiter")


def neglected_from_label_sets(predicted, given, names: list[str], max_recall: float = NEGLECTED_RECALL):
    """neglected_classes from each row's predicted and given sets of class ids (multi-label: any number;
    a class's recall is the share of the rows given it that the model predicts it for)."""
    neglected = []
    for index, name in enumerate(names):
        rows = [i for i, classes in enumerate(given) if index in classes]
        if not rows:
            continue
        recall = sum(1 for i in rows if index in predicted[i]) / len(rows)
        if recall < max_recall:
            count = sum(1 for classes in predicted if index in classes)
            neglected.append({"name": name, "support": len(rows), "recall": recall, "predicted": count})
    return neglected


@dataclass
class HeldOutPredictions:
    """Rows of one file, each with a probability from a model that never trained on it, and where from."""

    # The file `row` indexes: a cross-validation's training file, or a run's validation file.
    rows: TrainingRows
    # {"row", "label", "prediction", "probabilities"} per row, in file order.
    predictions: list[dict[str, Any]]
    task: str
    classes: list[str]
    text_columns: list[str]
    source: str  # in words: where the probabilities come from, and which rows they are
    cleaned_stem: str


def read_held_out(directory: Path) -> HeldOutPredictions:
    if (directory / RESULTS_FILE).is_file() and (directory / OOF_FILE).is_file():
        return read_crossval(directory)
    if (directory / RUN_RESULTS_FILE).is_file() and (directory / EVAL_PREDICTIONS_FILE).is_file():
        return read_run(directory)
    raise ConfigError(
        f"{directory} holds neither a finished cross-validation ({RESULTS_FILE} and {OOF_FILE}) nor a finished run "
        f"({RUN_RESULTS_FILE} and {EVAL_PREDICTIONS_FILE}): label issues need held-out probabilities. Run "
        f"`recipes-lib crossval RECIPE --output_dir {directory} ...` first (every training row), or give a run's "
        "output_dir (its validation rows only)."
    )


def read_crossval(directory: Path) -> HeldOutPredictions:
    summary = read_json(
        directory / RESULTS_FILE, "a cross-validation's summary", "Run the cross-validation again."
    )
    oof = read_jsonl(directory / OOF_FILE, "out-of-fold predictions", "Run the cross-validation again.")
    if summary["task"] == REGRESSION:
        return HeldOutPredictions(None, oof, REGRESSION, [], [], "", CLEANED_STEM)  # type: ignore[arg-type]
    training = read_training_rows(summary.get("data_arguments") or {"train_file": summary["train_file"]})
    source = (
        f"training rows of {summary['train_file']} (cleanlab, from {summary['folds']}-fold out-of-fold "
        "probabilities)"
    )
    return HeldOutPredictions(training, oof, summary["task"], summary["classes"],
                              summary.get("text_columns") or [], source, CLEANED_STEM)  # fmt: skip


def read_run(directory: Path) -> HeldOutPredictions:
    """A run's eval_predictions.jsonl: its model never trained on its validation rows, so they are held out
    (its training rows are not: that needs a cross-validation)."""
    results = read_results(directory)
    task = results.problem_type
    lines = read_jsonl(directory / EVAL_PREDICTIONS_FILE, "a run's predictions", "Run the recipe again.")
    if task == REGRESSION:
        return HeldOutPredictions(None, lines, REGRESSION, [], [], "", VALIDATION_CLEANED_STEM)  # type: ignore[arg-type]
    config = results.config or {}
    validation_file = config.get("validation_file")
    if not validation_file:
        raise ConfigError(
            f"The run in {directory} took its validation split from {results.eval_split or 'a Hub dataset'}, "
            "not from a --validation_file, so its rows cannot be named in a file of yours. Run it with "
            "--validation_file FILE, or cross-validate the training file (recipes-lib crossval)."
        )
    if not Path(validation_file).is_file():
        raise ConfigError(
            f"The run's validation file {validation_file} is not there (a relative path is read from where this "
            "command runs): run label-issues from where the run was launched."
        )
    # Read as the run's own task (its labels alone might look like another: one class per multi-label row).
    data = {**{key: config.get(key) for key in RUN_DATA_KEYS}, "problem_type": task}
    validation = read_labelled_rows(validation_file, data)
    if len(lines) != len(validation.rows):
        raise DataError(
            f"{directory / EVAL_PREDICTIONS_FILE} has {len(lines)} predictions for the {len(validation.rows)} rows "
            f"of {validation_file} (--max_eval_samples?): each row must have its prediction. Rerun without it."
        )
    classes = list(lines[0]["probabilities"]) if lines else []
    predictions = [
        {"row": index, "label": validation.given_label(index), **line} for index, line in enumerate(lines)
    ]
    source = (
        f"validation rows of {validation_file} (cleanlab, from the run's held-out predictions of its validation "
        f"split, {EVAL_PREDICTIONS_FILE}; `row` indexes that file's data rows, not the training file's)"
    )
    return HeldOutPredictions(validation, predictions, task, classes, results.text_columns or [],
                              source, VALIDATION_CLEANED_STEM)  # fmt: skip


def find_issues(task: str, classes: list[str], oof: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(a flag per row, a label-quality score per row in [0, 1], lower is worse), by cleanlab."""
    from cleanlab.filter import find_label_issues

    probabilities = np.array([[row["probabilities"][name] for name in classes] for row in oof], dtype=float)
    ids = {name: i for i, name in enumerate(classes)}
    if task == MULTI_LABEL:
        from cleanlab.multilabel_classification import get_label_quality_scores

        given = [sorted(ids[name] for name in row["label_classes"]) for row in oof]
    else:
        from cleanlab.rank import get_label_quality_scores

        # Single-label rows sum to 1 up to the 6-decimal rounding of the file; cleanlab checks that they do.
        probabilities = probabilities / probabilities.sum(axis=1, keepdims=True)
        given = np.array([ids[str(row["label"])] for row in oof])
    flags = find_label_issues(labels=given, pred_probs=probabilities, multi_label=task == MULTI_LABEL)
    scores = get_label_quality_scores(labels=given, pred_probs=probabilities)
    return np.asarray(flags), np.asarray(scores)


@dataclass(frozen=True)
class LearningCheck:
    """Whether the held-out predictions beat always answering the most common given label."""

    accuracy: float  # prediction == given label (multi-label: the same set of classes)
    majority_rate: float  # the most common given label's (or label set's) share of the rows

    @property
    def learnt(self) -> bool:
        return self.accuracy > self.majority_rate + LEARNT_MARGIN

    def caution(self) -> str | None:
        if self.learnt:
            return None
        return (
            f"Caution: the held-out predictions match the given label on {self.accuracy:.1%} of rows; always "
            f"predicting the most common label would match {self.majority_rate:.1%}, and a model that learnt beats "
            f"that by more than {LEARNT_MARGIN * 100:.0f} points. This one has not learnt the task, so most flags are "
            "its own errors, not wrong labels. Train longer (more epochs), check the learning rate, and run "
            "label-issues on the new predictions."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "held_out_accuracy": round(self.accuracy, 6),
            "majority_class_rate": round(self.majority_rate, 6),
            "learnt_margin": LEARNT_MARGIN,
            "model_learnt": self.learnt,
            "caution": self.caution(),
        }


def learning_check(task: str, predictions: list[dict[str, Any]]) -> LearningCheck:
    """Held-out accuracy against the majority-class rate, from rows with `label_classes` and `prediction`."""
    given = [tuple(sorted(row["label_classes"])) for row in predictions]
    if task == MULTI_LABEL:
        predicted = [tuple(sorted(map(str, row["prediction"]))) for row in predictions]
    else:
        predicted = [(str(row["prediction"]),) for row in predictions]
    rows = max(len(given), 1)
    accuracy = sum(p == g for p, g in zip(predicted, given, strict=True)) / rows
    majority = Counter(given).most_common(1)[0][1] / rows if given else 0.0
    return LearningCheck(accuracy, majority)


@dataclass(frozen=True)
class ClassCheck:
    """The classes the held-out model (almost) never predicts, and how many of their rows cleanlab flagged."""

    neglected: list[dict[str, Any]]  # neglected_from_label_sets's entries, each with its "flagged" count

    def caution(self) -> str | None:
        if not self.neglected:
            return None
        classes = "; ".join(
            f"{describe_class(entry)}, {entry['flagged']} flagged" for entry in self.neglected
        )
        return (
            f"Caution: the held-out model (almost) never predicts {classes}. It has not learnt "
            f"{'these classes' if len(self.neglected) > 1 else 'this class'}, so it doubts every such row: those "
            "flags are its blind spot, not wrong labels, and they are left out of the issues (and of "
            "--drop_label_issues). Train so that it learns them (--class_weights balanced, a higher learning "
            "rate, more epochs) and run label-issues on the new predictions."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "neglected_recall_below": NEGLECTED_RECALL,
            "neglected_classes": self.neglected,
            "withheld": sum(entry["flagged"] for entry in self.neglected),
            "class_caution": self.caution(),
        }


def class_check(task: str, classes: list[str], predictions: list[dict[str, Any]], flags) -> ClassCheck:
    """Per class: held-out recall against the given labels (multi-label: of the rows given the class, the
    share predicted with it), and how many of the class's rows cleanlab flagged."""
    ids = {name: index for index, name in enumerate(classes)}
    given = [{ids[name] for name in row["label_classes"]} for row in predictions]
    if task == MULTI_LABEL:
        predicted = [{ids.get(str(name), -1) for name in row["prediction"]} for row in predictions]
    else:
        predicted = [{ids.get(str(row["prediction"]), -1)} for row in predictions]
    neglected = neglected_from_label_sets(predicted, given, classes)
    for entry in neglected:
        entry["recall"] = round(entry["recall"], 6)
        index = ids[entry["name"]]
        entry["flagged"] = int(sum(1 for i, labels in enumerate(given) if index in labels and flags[i]))
    return ClassCheck(neglected)


def label_issues(
    directory: str, top: int = 10, drop_to: str | None = None, drop_most_of_a_class: bool = False
) -> int:
    """label_issues.csv in `directory` (a cross-validation's or a run's), the top rows and per-class counts
    printed; with `drop_to` ("" for the default name), the file without the flagged rows. The directory's
    lock is held meanwhile (locking.py): a crossval or run still writing there refuses it."""
    advice = "Rerun the crossval (or resume the run) that wrote there first, so its predictions are whole. "
    with lock_directory(directory, "label-issues", stale_advice=advice):
        return _label_issues(Path(directory), top, drop_to, drop_most_of_a_class)


def _label_issues(directory_path: Path, top: int, drop_to: str | None, drop_most_of_a_class: bool) -> int:
    held_out = read_held_out(directory_path)
    if held_out.task == REGRESSION:
        print("label-issues: regression is not supported (cleanlab's label issues need class probabilities).")
        return 2
    rows, predictions = held_out.rows, held_out.predictions
    # The given classes, read by the recipe's own label logic (names, ids, flags, text).
    for row in predictions:
        value = row["label"]
        row["label_classes"] = (
            [str(c) for c in rows.labels.classes_of(value)] if held_out.task == MULTI_LABEL else [str(value)]
        )
    classes = held_out.classes
    flags, scores = find_issues(held_out.task, classes, predictions)
    by_class = class_check(held_out.task, classes, predictions, flags)
    neglected = {entry["name"] for entry in by_class.neglected}
    flagged = sorted(
        (i for i in np.flatnonzero(flags) if not neglected & set(predictions[i]["label_classes"])),
        key=lambda i: (scores[i], i),
    )
    lines = [
        {
            "row": predictions[i]["row"],
            "text": " | ".join(
                str(rows.rows[predictions[i]["row"]].get(column, "")) for column in held_out.text_columns
            ),
            "given_label": describe(predictions[i]["label_classes"]),
            "suggested_label": describe(predictions[i]["prediction"]),
            "label_quality": round(float(scores[i]), 6),
        }
        for i in flagged
    ]
    path = directory_path / ISSUES_FILE
    write_rows(path, lines, ["row", "text", "given_label", "suggested_label", "label_quality"])
    check = learning_check(held_out.task, predictions)
    summary = {"rows": len(predictions), "flagged": len(lines), "source": held_out.source,
               "issues_file": str(path), **check.to_dict(), **by_class.to_dict()}  # fmt: skip
    summary_path = directory_path / SUMMARY_FILE
    write_text_whole(summary_path, json.dumps(summary, indent=2) + "\n")
    print(
        f"{len(lines)} of {len(predictions)} {held_out.source} look mislabelled; all of them, worst first: {path}"
    )
    for caution in (check.caution(), by_class.caution()):
        if caution:
            print(caution)
    if lines:
        shown = [[str(line["row"]), shorten(line["text"]), line["given_label"], line["suggested_label"],
                  f"{line['label_quality']:.3f}"] for line in lines[:top]]  # fmt: skip
        print(format_table(["row", "text", "given", "suggested", "quality"], shown))
        per_class = Counter(name for i in flagged for name in predictions[i]["label_classes"])
        print(
            "Suspects per given class: " + ", ".join(f"{name} {per_class.get(name, 0)}" for name in classes)
        )
    if drop_to is not None:
        if not drop_most_of_a_class:
            refuse_dropping_most_of_a_class(predictions, flagged)
        write_cleaned(
            rows,
            {predictions[i]["row"] for i in flagged},
            drop_to or directory_path / f"{held_out.cleaned_stem}{written_suffix(rows.path)}",
        )
    return 0


def refuse_dropping_most_of_a_class(predictions: list[dict[str, Any]], flagged) -> None:
    """A ConfigError when the flagged rows are more than MOST_OF_A_CLASS of some given class's rows."""
    totals = Counter(name for row in predictions for name in row["label_classes"])
    dropped = Counter(name for i in flagged for name in predictions[i]["label_classes"])
    most = [name for name, count in dropped.items() if count > MOST_OF_A_CLASS * totals[name]]
    if most:
        said = ", ".join(f"'{name}' ({dropped[name]} of its {totals[name]} rows)" for name in most)
        raise ConfigError(
            f"--drop_label_issues would remove most of {said}. That is rarely a set of wrong labels: more often "
            "the model has not learnt the class. label_issues.csv is written; read its rows of that class "
            "first, and add --drop_most_of_a_class to write the cleaned file anyway."
        )


def write_cleaned(training, dropped: set[int], destination: str | Path) -> None:
    destination = Path(destination)
    if destination.resolve() == Path(training.path).resolve():
        raise ConfigError(
            f"--drop_label_issues would overwrite the file {training.path}; give another file name."
        )
    kept = [row for index, row in enumerate(training.rows) if index not in dropped]
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_rows(destination, kept, training.columns, training.delimiter)
    print(f"Cleaned copy of {training.path} ({len(kept)} rows, {len(dropped)} dropped): {destination}; train "
          "(or validate) on it and compare.")  # fmt: skip


def describe(label) -> str:
    return ", ".join(map(str, label)) if isinstance(label, list) else str(label)


def shorten(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
