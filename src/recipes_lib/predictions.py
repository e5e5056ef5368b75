"""Predictions as rows, and the per-class scores and confusion matrix of a labelled split.

One format for every place that writes predictions (a run's validation and test splits,
`recipes-lib predict`), so they can be compared line by line:

    {"prediction": "billing", "probabilities": {"billing": 0.91, "shipping": 0.05, ...}}

one JSON object per input row, in input order. Probabilities are the softmax of the logits,
rounded to 6 decimals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

EVAL_PREDICTIONS_FILE = "eval_predictions.jsonl"
TEST_PREDICTIONS_FILE = "test_predictions.jsonl"
CONFUSION_MATRIX_PNG = "confusion_matrix.png"


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exponentials = np.exp(shifted)
    return exponentials / exponentials.sum(axis=-1, keepdims=True)


def prediction_rows(logits: np.ndarray, label_names: list[str]) -> list[dict[str, Any]]:
    probabilities = softmax(np.asarray(logits, dtype=np.float64))
    return [
        {
            "prediction": label_names[int(row.argmax())],
            "probabilities": {name: round(float(p), 6) for name, p in zip(label_names, row, strict=True)},
        }
        for row in probabilities
    ]


def per_class_report(
    predictions: np.ndarray, references: np.ndarray, label_names: list[str]
) -> dict[str, Any]:
    """{"per_class": {name: precision, recall, f1, support}, "confusion_matrix": {labels, matrix}}.

    Rows of the matrix are the true classes, columns the predicted ones, both in id order.
    """
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

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
    matrix = confusion_matrix(references, predictions, labels=ids).tolist()
    return {"per_class": per_class, "confusion_matrix": {"labels": list(label_names), "matrix": matrix}}


def draw_confusion_matrix(report: dict[str, Any], path: str | Path, title: str) -> Path:
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
    path = Path(path)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
