"""The three kinds of task a recipe trains, named as transformers names them (`config.problem_type`).

- single-label classification: one class per example; softmax over the classes, cross-entropy.
- multi-label classification: any number of classes per example (a list, or a delimited string);
  one sigmoid per class, binary cross-entropy; a class is predicted when its probability reaches
  its threshold, one threshold per class, tuned on the validation split (`tune_thresholds`).
- regression: one number per example; one output, mean squared error.

The data decides the kind (data.py), `--problem_type` overrides it. Everything downstream (loss,
metrics, prediction rows, predict) branches on these three names.
"""

from __future__ import annotations

import numpy as np

SINGLE_LABEL = "single_label_classification"
MULTI_LABEL = "multi_label_classification"
REGRESSION = "regression"
PROBLEM_TYPES = (SINGLE_LABEL, MULTI_LABEL, REGRESSION)
AUTO = "auto"

# The metrics each kind reports, as compute_metrics returns them (the Trainer prefixes "eval_").
# Multi-label: exact-match accuracy (every class right), macro-F1 (every class counts the same) and
# micro-F1 (every decision counts the same). Regression: mean squared error, Pearson and Spearman.
TASK_METRICS = {
    SINGLE_LABEL: ("accuracy", "f1"),
    MULTI_LABEL: ("accuracy", "f1", "f1_micro"),
    REGRESSION: ("mse", "pearson", "spearman"),
}

DEFAULT_THRESHOLD = 0.5
# Candidate thresholds: 0.05 apart. A finer grid fits the validation split's noise, not the task.
THRESHOLD_GRID = np.round(np.arange(0.05, 0.96, 0.05), 2)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))


def softmax(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    exponentials = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exponentials / exponentials.sum(axis=-1, keepdims=True)


def predicted_labels(probabilities: np.ndarray, thresholds) -> np.ndarray:
    """Multi-label decisions (0/1 per class): probability at or above the class's threshold."""
    return (probabilities >= np.asarray(thresholds, dtype=np.float64)).astype(np.int64)


def tune_thresholds(probabilities: np.ndarray, references: np.ndarray) -> list[float]:
    """One threshold per class: the grid value with the best F1 for that class on these examples.

    Ties go to the value closest to 0.5. A class with no positive example here keeps 0.5: there is
    nothing to tune it on.
    """
    probabilities, references = np.asarray(probabilities), np.asarray(references).astype(bool)
    thresholds = []
    for column in range(probabilities.shape[1]):
        truth = references[:, column]
        if not truth.any():
            thresholds.append(DEFAULT_THRESHOLD)
            continue
        predicted = probabilities[:, column][None, :] >= THRESHOLD_GRID[:, None]  # grid x examples
        true_positives = (predicted & truth).sum(axis=1)
        f1 = 2 * true_positives / (predicted.sum(axis=1) + truth.sum())
        order = np.lexsort((np.abs(THRESHOLD_GRID - DEFAULT_THRESHOLD), -f1))  # best F1, then nearest 0.5
        thresholds.append(float(THRESHOLD_GRID[order[0]]))
    return thresholds
