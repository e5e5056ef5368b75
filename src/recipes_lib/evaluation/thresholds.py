"""From logits to decisions: probabilities, multi-label decisions at per-class thresholds, and the
tuning of those thresholds on a validation split."""

from __future__ import annotations

import numpy as np

from recipes_lib.config.tasks import DEFAULT_THRESHOLD

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


# Binary single-label classification (--decision_threshold): the positive class is label id 1.
POSITIVE_ID = 1


def positive_probabilities(logits: np.ndarray) -> np.ndarray:
    """The softmax probability of the positive class (label id 1) of a two-class model."""
    return softmax(logits)[:, POSITIVE_ID]


def binary_decisions(logits: np.ndarray, threshold: float) -> np.ndarray:
    """Label ids of a two-class model: 1 where the positive class's probability reaches `threshold`.

    At 0.5 these are the argmax decisions (but for exact ties, which argmax gives to class 0).
    """
    return (positive_probabilities(logits) >= threshold).astype(np.int64)


def tune_decision_threshold(logits: np.ndarray, references: np.ndarray) -> float:
    """The positive class's threshold with the best positive-class F1 on these examples.

    The multi-label rule applied to the one positive class: the same grid, ties nearest 0.5, and
    0.5 when there is no positive example to tune on.
    """
    truth = (np.asarray(references) == POSITIVE_ID)[:, None]
    return tune_thresholds(positive_probabilities(logits)[:, None], truth)[0]
