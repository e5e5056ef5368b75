"""Predictions as rows, one format for every place that writes them (a run's validation and test splits,
`recipes-lib predict`): one JSON object per input row, in input order (docs/results-format.md, "Predict");
the per-class scores and confusion matrix of a labelled split; and `final_outputs`, what a run's record
derives from its final per-document predictions.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from recipes_lib.config.tasks import DEFAULT_THRESHOLD, MULTI_LABEL, REGRESSION, SINGLE_LABEL
from recipes_lib.evaluation.collapse import collapse_results
from recipes_lib.evaluation.thresholds import (
    POSITIVE_ID,
    predicted_labels,
    sigmoid,
    softmax,
)
from recipes_lib.whole_files import write_text_whole, written_whole

logger = logging.getLogger("recipes_lib")

EVAL_PREDICTIONS_FILE = "eval_predictions.jsonl"
TEST_PREDICTIONS_FILE = "test_predictions.jsonl"
CONFUSION_MATRIX_PNG = "confusion_matrix.png"
THRESHOLDS_FILE = "label_thresholds.json"
DECISION_THRESHOLD_FILE = "decision_threshold.json"


def prediction_rows(
    logits: np.ndarray,
    label_names: list[str],
    problem_type: str = SINGLE_LABEL,
    thresholds: list[float] | None = None,
    decision_threshold: float | None = None,
) -> list[dict[str, Any]]:
    """One row per logit row (module docstring); `decision_threshold`: a two-class model's positive-class threshold."""
    logits = np.asarray(logits, dtype=np.float64)
    if problem_type == REGRESSION:
        return [{"prediction": round(float(score), 6)} for score in logits.reshape(len(logits), -1)[:, 0]]
    if problem_type == MULTI_LABEL:
        probabilities = sigmoid(logits)
        decisions = predicted_labels(probabilities, thresholds or [DEFAULT_THRESHOLD] * len(label_names))
        return [
            {
                "prediction": [
                    name for name, chosen in zip(label_names, row_decisions, strict=True) if chosen
                ],
                "probabilities": _rounded(label_names, row),
            }
            for row, row_decisions in zip(probabilities, decisions, strict=True)
        ]

    def chosen(row: np.ndarray) -> int:
        if decision_threshold is None:
            return int(row.argmax())
        return POSITIVE_ID if row[POSITIVE_ID] >= decision_threshold else 1 - POSITIVE_ID

    return [
        {"prediction": label_names[chosen(row)], "probabilities": _rounded(label_names, row)}
        for row in softmax(logits)
    ]


def _rounded(label_names: list[str], probabilities: np.ndarray) -> dict[str, float]:
    return {name: round(float(p), 6) for name, p in zip(label_names, probabilities, strict=True)}


def per_class_report(
    predictions: np.ndarray, references: np.ndarray, label_names: list[str]
) -> dict[str, Any]:
    """{"per_class": {name: precision, recall, f1, support}, "confusion_matrix": {labels, matrix}}: rows the
    true classes, columns the predicted ones, in id order. Multi-label (0/1 rows): each class a yes/no
    decision of its own, and no matrix, which needs one true and one predicted class per example."""
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    multi_label = np.ndim(references) == 2

    ids = list(range(len(label_names)))
    precision, recall, f1, support = precision_recall_fscore_support(
        references, predictions, labels=ids, zero_division=0
    )
    per_class = {
        name: {
            "precision": round(float(precision[i]), 4),
            "recall": round(float(recall[i]), 4),
            "f1": round(float(f1[i]), 4),
            "support": int(support[i]),
        }
        for i, name in enumerate(label_names)
    }
    if multi_label:
        return {"per_class": per_class, "confusion_matrix": None}
    matrix = confusion_matrix(references, predictions, labels=ids).tolist()
    return {"per_class": per_class, "confusion_matrix": {"labels": list(label_names), "matrix": matrix}}


def draw_confusion_matrix(report: dict[str, Any], path: Path, title: str) -> None:
    """The confusion matrix as a PNG: counts in each cell, true classes down, predicted across."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, matrix = report["labels"], np.array(report["matrix"])
    size = max(4.0, 0.6 * len(labels) + 2)
    figure, axes = plt.subplots(figsize=(size, size))
    axes.imshow(matrix, cmap="Blues")
    axes.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    axes.set_yticks(range(len(labels)), labels)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    axes.set_title(title)
    threshold = matrix.max() / 2 if matrix.size else 0
    for (row, column), count in np.ndenumerate(matrix):
        axes.text(
            column, row, str(count), ha="center", va="center", color="white" if count > threshold else "black"
        )
    figure.tight_layout()
    with written_whole(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=100)
    plt.close(figure)


@dataclass
class EvaluationOutputs:
    """A run's final per-document predictions (validation; test if given), and what is derived from them."""

    logits: Any
    references: Any
    test_logits: Any = None
    test_references: Any = None  # None for an unlabelled test split
    test_metrics: dict[str, float] = field(default_factory=dict)  # the Trainer's, at the tuned thresholds
    thresholds: list[float] | None = None  # multi-label: tuned on validation
    decision_threshold: float | None = None  # binary, --decision_threshold: the positive class's
    results: dict[str, Any] = field(default_factory=dict)  # results.json's keys for these


def final_outputs(validation, test, scorer, names: list[str], option, tuned_on: str) -> EvaluationOutputs:
    """Thresholds (multi-label), --decision_threshold (`option`: 'tune', a probability or None), per-class
    scores, from validation's (logits, references) and test's (logits, references or None, the Trainer's
    metrics), None without a test split. `scorer`: the run's metrics (TaskMetrics)."""
    outputs = EvaluationOutputs(*validation, *(test or (None, None, {})))
    outputs.results["label_thresholds"] = None
    # issue #50: a model whose outputs do not depend on the input is said, and gets no tuned threshold.
    outputs.results.update(collapse_results(outputs.logits, scorer.problem_type, outputs.references))
    collapsed = outputs.results["model_collapsed"]
    if scorer.problem_type == MULTI_LABEL:
        from recipes_lib.evaluation.threshold_tuning import tune_multi_label, weakest_labels

        tune_multi_label(outputs, scorer, names, collapsed)
        if outputs.test_references is not None:
            scores = scorer.scores(outputs.test_logits, outputs.test_references, outputs.thresholds)
            outputs.test_metrics.update({f"test_{name}": value for name, value in scores.items()})
    if option is not None:
        from recipes_lib.evaluation.threshold_tuning import decide_binary_threshold

        decide_binary_threshold(option, names, tuned_on, scorer, outputs)
    report = per_class(outputs.logits, outputs.references, scorer.problem_type, names, outputs.thresholds)
    outputs.results.update(report)
    if scorer.problem_type == MULTI_LABEL:
        logger.info("%s", weakest_labels(report["per_class"]))
    return outputs


def per_class(logits, references, problem_type: str, names: list[str], thresholds) -> dict[str, Any]:
    """Per-class precision, recall, F1 and the confusion matrix (single-label); none for regression."""
    if problem_type == REGRESSION:
        return {"per_class": None, "confusion_matrix": None}
    if problem_type == MULTI_LABEL:
        predictions = predicted_labels(sigmoid(logits), thresholds)
        return per_class_report(predictions, references.round().astype(int), names)
    return per_class_report(logits.argmax(-1), references, names)


def write_decision_files(
    directories: list[Path], outputs: EvaluationOutputs, names, tuned_on: str, title: str
):
    """What turns the model's probabilities into labels, beside each model directory (output_dir, and
    merged/ if written): label_thresholds.json (multi-label), decision_threshold.json (binary, with
    --decision_threshold); and the validation confusion matrix as a PNG in the first (single-label).
    `tuned_on`: the validation split's source."""
    records = {}
    if outputs.thresholds is not None:
        records[THRESHOLDS_FILE] = {
            "thresholds": dict(zip(names, outputs.thresholds, strict=True)),
            "tuned_on": tuned_on,
            "rule": "a class is predicted when its sigmoid probability is at or above its threshold",
        }
    if outputs.decision_threshold is not None:
        positive, negative = names[POSITIVE_ID], names[1 - POSITIVE_ID]
        records[DECISION_THRESHOLD_FILE] = {
            "threshold": outputs.decision_threshold,
            "positive_label": positive,
            # None: given with --decision_threshold
            "tuned_on": outputs.results["decision_threshold_tuned_on"],
            "rule": f"'{positive}' is predicted when its softmax probability is at or above the threshold, "
            f"else '{negative}'",
        }
    for directory in directories:
        for name, record in records.items():
            write_text_whole(directory / name, json.dumps(record, indent=2) + "\n")
    if outputs.results["confusion_matrix"] is not None:
        draw_confusion_matrix(
            outputs.results["confusion_matrix"], directories[0] / CONFUSION_MATRIX_PNG, title
        )


def prediction_files(outputs: EvaluationOutputs, names: list[str], problem_type: str) -> dict[str, list]:
    """The rows of eval_predictions.jsonl (and test_predictions.jsonl), by file name."""
    files = {EVAL_PREDICTIONS_FILE: outputs.logits, TEST_PREDICTIONS_FILE: outputs.test_logits}
    return {
        name: prediction_rows(logits, names, problem_type, outputs.thresholds, outputs.decision_threshold)
        for name, logits in files.items()
        if logits is not None
    }
