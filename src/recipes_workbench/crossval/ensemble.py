"""The test split of a cross-validation (docs/crossval.md, "The test split"): each fold's run scored the
--test_file in its own process, so only its predictions are read here: per fold the metric, mean ± std;
the ensemble the folds' probabilities averaged row by row, scored as one model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from recipes_lib.config.tasks import DEFAULT_THRESHOLD, MULTI_LABEL, REGRESSION
from recipes_lib.data.files import write_jsonl
from recipes_lib.errors import DataError
from recipes_lib.evaluation.predictions import TEST_PREDICTIONS_FILE, prediction_rows
from recipes_lib.results import RESULT_KEYS, read_results
from recipes_workbench.crossval.folds import TrainingRows, read_labelled_file
from recipes_workbench.crossval.oof import RUN_FOLD_AGAIN, read_jsonl
from recipes_workbench.export.bundle import read_thresholds
from recipes_workbench.shared import mean_and_std
from recipes_workbench.sweep.config import test_metric_of

ENSEMBLE_FILE = "test_ensemble_predictions.jsonl"
ENSEMBLE_HOW = {
    MULTI_LABEL: "the mean of the folds' sigmoid probabilities, each class decided at the mean of the folds' "
    "tuned thresholds",
    REGRESSION: "the mean of the folds' scores",
}
SINGLE_LABEL_HOW = "the mean of the folds' softmax probabilities, the likeliest class predicted"


def read_test_predictions(fold_dir: Path) -> list[dict[str, Any]]:
    path = Path(fold_dir) / TEST_PREDICTIONS_FILE
    if not path.is_file():
        raise DataError(
            f"{path} is missing: the fold's run wrote no test predictions (it ran before --test_file was added to the "
            "command, or its recipe could not read the file: its log says). A finished fold is not rerun; give the "
            "cross-validation with --test_file a new --output_dir."
        )
    return read_jsonl(path, "a fold's test predictions", RUN_FOLD_AGAIN.format(fold=Path(fold_dir)))


def fold_probabilities(lines: list[dict[str, Any]], task: str, classes: list[str]) -> np.ndarray:
    """One fold's test predictions as an array: (rows, classes) probabilities, or (rows,) regression scores."""
    if task == REGRESSION:
        return np.array([line["prediction"] for line in lines], dtype=float)
    return np.array([[line["probabilities"][name] for name in classes] for line in lines], dtype=float)


def as_logits(probabilities: np.ndarray, task: str) -> np.ndarray:
    """What TaskMetrics scores (logits): the inverse of the softmax (a log, up to a constant) or of the sigmoid."""
    if task == REGRESSION:
        return probabilities.reshape(-1, 1)
    clipped = np.clip(probabilities, 1e-12, 1 - 1e-12)
    if task == MULTI_LABEL:
        return np.log(clipped) - np.log1p(-clipped)
    return np.log(clipped)


def test_figures(
    training: TrainingRows, data: dict[str, Any], metric: str, fold_dirs: dict[int, Path], output_dir: Path
) -> dict[str, Any] | None:
    """The per-fold and ensemble figures of the test split (this module's docstring); None without a test file."""
    test_file = data.get("test_file")
    if not test_file:
        return None
    key = test_metric_of(metric)
    # eval_tuned_* has no test twin (the test split is scored at the tuned thresholds as test_*).
    directories = [directory for _, directory in sorted(fold_dirs.items())]
    per_fold = [read_results(d).value(key) if key in RESULT_KEYS else None for d in directories]
    task, classes = training.task, [str(name) for name in training.labels.names]
    folds = [fold_probabilities(read_test_predictions(d), task, classes) for d in directories]
    if len({len(fold) for fold in folds}) != 1:
        raise DataError(
            f"The folds' {TEST_PREDICTIONS_FILE} files hold different numbers of rows "
            f"({', '.join(str(len(fold)) for fold in folds)}): they did not all score the same test file. Rerun "
            "the cross-validation in a new --output_dir."
        )
    mean = np.mean(folds, axis=0)
    thresholds = None
    if task == MULTI_LABEL:
        saved = [read_thresholds(d, classes) for d in directories]
        thresholds = np.mean([t or [DEFAULT_THRESHOLD] * len(classes) for t in saved], axis=0).tolist()
    logits = as_logits(mean, task)
    write_jsonl(output_dir / ENSEMBLE_FILE, prediction_rows(logits, classes, task, thresholds))
    figures: dict[str, Any] = {
        "test_file": test_file,
        "metric": key,
        "per_fold": per_fold,
        **mean_and_std([float(value) for value in per_fold if value is not None]),
        "ensemble": ensemble_score(training, data, metric, logits, thresholds),
        "ensemble_of": ENSEMBLE_HOW.get(task, SINGLE_LABEL_HOW),
        "ensemble_predictions": str(output_dir / ENSEMBLE_FILE),
    }
    if figures["ensemble"] is None:
        figures["ensemble_note"] = ensemble_note(metric, per_fold)
    return figures


def ensemble_score(
    training: TrainingRows, data: dict[str, Any], metric: str, logits: np.ndarray, thresholds
) -> float | None:
    """The ensemble's `metric` on the test file's labels; None when the file has no labels or the metric is
    not one the task's metrics compute from predictions (eval_loss)."""
    from recipes_lib.evaluation.metrics import TaskMetrics

    name = metric.removeprefix("eval_")
    test = read_labelled_file(data, training.labels)
    if test is None:
        return None
    if len(test) != len(logits):
        raise DataError(
            f"The test file {data['test_file']} has {len(test)} rows but the folds predicted {len(logits)}: "
            "a data filter (--max_test_samples?) left rows out. Leave such options out of a cross-validation."
        )
    scores = TaskMetrics(training.task, training.labels.num_labels).scores(
        logits, np.asarray(test), thresholds
    )
    value = scores.get(name)
    return None if value is None else float(value)


def ensemble_note(metric: str, per_fold: list) -> str:
    if all(value is None for value in per_fold):
        return "the test file has no labels: its predictions are written, no figure"
    return f"{metric} is not computed from predictions (only the task's metrics are): no ensemble figure"


def format_test_summary(figures: dict[str, Any]) -> str:
    """One line: the folds' test figure, mean ± std, and the ensemble's beside it."""
    values = [value for value in figures["per_fold"] if value is not None]
    if not values:
        folds = "no fold reports it"
    else:
        spread = "" if figures["std"] is None else f" ± {figures['std']:.4f}"
        each = ", ".join("-" if value is None else f"{value:.4f}" for value in figures["per_fold"])
        folds = f"each fold's model {figures['mean']:.4f}{spread} (per fold: {each})"
    ensemble = (
        f"{figures['ensemble']:.4f}" if figures["ensemble"] is not None else f"- ({figures['ensemble_note']})"
    )
    return (
        f"{figures['metric']} on {figures['test_file']}: {folds}; the {len(figures['per_fold'])} folds' ensemble "
        f"({figures['ensemble_of']}): {ensemble}"
    )
