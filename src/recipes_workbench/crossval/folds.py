"""The folds of a cross-validation: the training file read as the recipe reads it, its rows split into K
folds (stratified, grouped; docs/crossval.md says how per task), each fold's train and held-out files
written for its run. Every check that can stop a cross-validation runs here, before any fold trains.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from datasets import DatasetDict

from recipes_lib.config.arguments import DataArguments
from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from recipes_lib.data.files import DELIMITED, decide_delimiter, parse_delimiter, read_local_files, write_jsonl
from recipes_lib.data.label_column import unlabelled_value
from recipes_lib.data.labels import LabelMapping, label_mapping
from recipes_lib.errors import ConfigError, DataError
from recipes_lib.whole_files import write_text_whole, written_whole

FOLDS_DIR = "folds"
TRAIN_NAME, HELD_OUT_NAME = "train", "held_out"
MAX_REGRESSION_BINS = 10
RARE_SETS = "(label sets of fewer than K rows)"


@dataclass
class TrainingRows:
    """The training file's rows, in file order, and what their labels mean."""

    path: str
    rows: list[dict[str, Any]]
    columns: list[str]
    label_column: str
    labels: LabelMapping
    delimiter: str | None = None  # a delimited file's (the fold files are written with it)

    @property
    def task(self) -> str:
        return self.labels.problem_type

    def given_label(self, index: int):
        return self.rows[index][self.label_column]


def read_training_rows(data: dict[str, Any]) -> TrainingRows:
    """The training file named by the recipe's data arguments (`data`: train_file, label_column_name,
    problem_type, label_delimiter, csv_quoting), its labels read by the recipe's own label logic."""
    path = data.get("train_file")
    if not path:
        raise ConfigError(
            "Cross-validation splits a local training file, and the recipe's arguments name none; give "
            "--train_file FILE (CSV, TSV, JSON Lines), on the command line or in the --config file."
        )
    if not Path(path).is_file():
        raise ConfigError(f"The training file {path} does not exist; give --train_file an existing file.")
    return read_labelled_rows(path, data)


def read_labelled_rows(path: str, data: dict[str, Any]) -> TrainingRows:
    """A local file's rows and what their labels mean, read as the recipe reads a training file (`data`:
    the recipe's label_column_name, problem_type, label_delimiter, csv_quoting)."""
    arguments = DataArguments(
        train_file=path,
        label_column_name=data.get("label_column_name") or "label",
        problem_type=data.get("problem_type") or "auto",
        label_delimiter=data.get("label_delimiter"),
    )
    delimiter = parse_delimiter(data.get("delimiter"))
    raw, locate = read_local_files({"train": path}, None, data.get("csv_quoting") or "auto", delimiter)
    train = raw["train"]
    # The recipe checks labels on train and validation; every row of this file is both, fold by fold.
    labels = label_mapping(DatasetDict(train=train, validation=train), arguments, locate)
    if Path(path).suffix.lower() in DELIMITED:
        delimiter = decide_delimiter(path, delimiter).delimiter
    return TrainingRows(
        path, train.to_list(), train.column_names, arguments.label_column_name, labels, delimiter
    )


def read_labelled_file(data: dict[str, Any], labels: LabelMapping) -> list | None:
    """The labels of the test file `data["test_file"]`, encoded with the training file's `labels` (class
    ids, multi-hot rows, scores); None when it has no label column or a row without a label."""
    quoting, delimiter = data.get("csv_quoting") or "auto", parse_delimiter(data.get("delimiter"))
    raw, locate = read_local_files({"test": data["test_file"]}, None, quoting, delimiter)
    split, column = raw["test"], data.get("label_column_name") or "label"
    if column not in split.column_names:
        return None
    feature, values = split.features[column], split[column]
    if any(unlabelled_value(value, feature) for value in values):
        return None
    encoded = []
    for index, value in enumerate(values):
        try:
            encoded.append(labels.encode(value))
        except (KeyError, ValueError):
            raise DataError(
                f"{locate['test'](index)} has the label {value!r}, which is not one of the training file's classes "
                f"({', '.join(map(str, labels.names))}): the folds' models cannot predict it. Fix the row, or "
                "leave --test_file out."
            ) from None
    return encoded


# --- the splits ---------------------------------------------------------------------------------------


def strata(training: TrainingRows, folds: int) -> tuple[np.ndarray, str]:
    """What each row is stratified on, and how that was chosen, in words."""
    values = [training.given_label(i) for i in range(len(training.rows))]
    if training.task == SINGLE_LABEL:
        return np.array([str(value) for value in values]), "the class (StratifiedKFold)"
    if training.task == MULTI_LABEL:
        sets = ["|".join(sorted(map(str, training.labels.classes_of(value)))) for value in values]
        counts = Counter(sets)
        merged = [value if counts[value] >= folds else RARE_SETS for value in sets]
        if 0 < merged.count(RARE_SETS) < folds:  # too few rare rows to spread: they join the commonest set
            commonest = Counter(value for value in merged if value != RARE_SETS).most_common(1)[0][0]
            merged = [commonest if value == RARE_SETS else value for value in merged]
        how = (
            "each row's label set, sets of fewer than K rows merged into one stratum (a fallback: iterative "
            "stratification is not in scikit-learn)"
        )
        return np.array(merged), how
    targets = np.array([float(value) for value in values])
    bins = max(1, min(MAX_REGRESSION_BINS, len(targets) // folds))
    edges = np.unique(np.quantile(targets, np.linspace(0, 1, bins + 1)[1:-1]))
    return np.digitize(targets, edges).astype(str), f"the target in {len(edges) + 1} quantile bins"


def check_folds(training: TrainingRows, folds: int, group_column: str | None) -> None:
    """Every reason the folds cannot be made, one paragraph each, before any training."""
    rows = len(training.rows)
    if folds < 2 or folds > rows:
        raise ConfigError(
            f"--folds is {folds}; it must be at least 2 and at most the number of training rows ({rows} in "
            f"{training.path}). 5 is the usual choice."
        )
    if training.task == SINGLE_LABEL:
        counts = Counter(str(training.given_label(i)) for i in range(rows))
        small = {name: count for name, count in counts.items() if count < folds}
        if small:
            listed = ", ".join(f"'{name}' ({count} rows)" for name, count in sorted(small.items()))
            raise DataError(
                f"The label column '{training.label_column}' of {training.path} has classes with fewer rows than "
                f"--folds {folds}: {listed}. Each fold must hold every class out once and train on it; use "
                f"--folds {max(2, min(small.values()))} or fewer, or add rows of those classes."
            )
    if group_column is None:
        return
    if group_column not in training.columns:
        raise ConfigError(
            f"--group_column '{group_column}' is not a column of {training.path}; its columns are: "
            f"{', '.join(training.columns)}."
        )
    groups = {str(row[group_column]) for row in training.rows}
    if len(groups) < 2:
        raise DataError(
            f"--group_column '{group_column}' holds one group ({next(iter(groups))!r}) in all {rows} rows of "
            f"{training.path}: nothing can be held out without its group. Name a column that tells groups apart "
            "(a customer, a thread), or leave --group_column out."
        )
    if len(groups) < folds:
        raise DataError(
            f"--group_column '{group_column}' has {len(groups)} groups in {training.path}, fewer than --folds "
            f"{folds}: a group is never split, so each fold needs a group of its own. Use --folds {len(groups)} or "
            "fewer."
        )


def assign_folds(
    training: TrainingRows, folds: int, seed: int, group_column: str | None = None
) -> tuple[np.ndarray, str]:
    """Each row's fold (0..K-1) and how the split was stratified; checked first (check_folds)."""
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

    check_folds(training, folds, group_column)
    stratum, how = strata(training, folds)
    index = np.zeros(len(training.rows))
    if group_column is None:
        splits = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(index, stratum)
    else:
        groups = np.array([str(row[group_column]) for row in training.rows])
        splitter = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed)
        splits = splitter.split(index, stratum, groups)
        how += f", rows of one '{group_column}' in one fold (StratifiedGroupKFold)"
    assignment = np.full(len(training.rows), -1)
    for fold, (_, held_out) in enumerate(splits):
        assignment[held_out] = fold
    check_every_fold_trains_on_every_class(training, assignment)
    return assignment, how


def check_every_fold_trains_on_every_class(training: TrainingRows, assignment: np.ndarray) -> None:
    """A fold whose training part lacks a class would build a model without it (its probabilities could
    not be set beside the other folds'): refused, naming the fold and the class."""
    if training.task == REGRESSION:
        return
    everything = set(map(str, training.labels.names))
    for fold in range(int(assignment.max()) + 1):
        seen: set[str] = set()
        for index in np.flatnonzero(assignment != fold):
            value = training.given_label(int(index))
            classes = training.labels.classes_of(value) if training.task == MULTI_LABEL else [value]
            seen.update(str(name) for name in classes)
        missing = everything - seen
        if missing:
            raise DataError(
                f"Fold {fold}'s training part has no row of {', '.join(sorted(missing))}: with these groups and "
                "folds every row of that class is held out at once, and the fold's model could not learn it. "
                "Use fewer folds, or add rows of that class in other groups."
            )


# --- the files each fold's run reads ------------------------------------------------------------------


def written_suffix(path: str) -> str:
    """The suffix a copy of the file's rows gets: delimited files keep their format, any other is JSON Lines."""
    suffix = Path(path).suffix.lower()
    return suffix if suffix in DELIMITED or suffix == ".jsonl" else ".jsonl"


def fold_files(training: TrainingRows, output_dir: str | Path, fold: int) -> tuple[Path, Path]:
    """(train, held_out) of the fold, in the training file's format (written_suffix)."""
    suffix = written_suffix(training.path)
    directory = Path(output_dir) / FOLDS_DIR / str(fold)
    return directory / f"{TRAIN_NAME}{suffix}", directory / f"{HELD_OUT_NAME}{suffix}"


def write_fold_files(training: TrainingRows, assignment: np.ndarray, output_dir: str | Path) -> None:
    """Every fold's train (the other folds' rows) and held-out rows, in the training file's order, and
    folds.json (each row's fold)."""
    for fold in range(int(assignment.max()) + 1):
        train_path, held_out_path = fold_files(training, output_dir, fold)
        train_path.parent.mkdir(parents=True, exist_ok=True)
        for path, keep in ((train_path, assignment != fold), (held_out_path, assignment == fold)):
            write_rows(
                path, [training.rows[i] for i in np.flatnonzero(keep)], training.columns, training.delimiter
            )
    record = {"train_file": training.path, "folds": assignment.tolist()}
    write_text_whole(Path(output_dir) / FOLDS_DIR / "folds.json", json.dumps(record) + "\n")


def write_rows(
    path: Path, rows: list[dict[str, Any]], columns: list[str], delimiter: str | None = None
) -> None:
    """Rows as a delimited file (the training file's delimiter, else the extension's) or JSON Lines."""
    if path.suffix in DELIMITED:
        with written_whole(path, newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns, delimiter=delimiter or DELIMITED[path.suffix])
            writer.writeheader()
            writer.writerows(rows)
    else:
        write_jsonl(path, rows)
