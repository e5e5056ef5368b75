"""From logits to decisions: probabilities, multi-label decisions at per-class thresholds, a binary
model's decisions at its threshold (their tuning on a validation split: threshold_tuning.py)."""

from __future__ import annotations

import numpy as np


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))


def softmax(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    exponentials = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exponentials / exponentials.sum(axis=-1, keepdims=True)


def predicted_labels(probabilities: np.ndarray, thresholds) -> np.ndarray:
    """Multi-label decisions (0/1 per class): probability at or above the class's threshold."""
    return (probabilities >= np.asarray(thresholds, dtype=np.float64)).astype(np.int64)


# A class whose probability varies across rows with a standard deviation under 0.1 percentage points
# does not tell the rows apart: no threshold can (and evaluation/collapse.py calls a model whose every
# class is so, and whose rows all get one prediction, collapsed). Measured (docs/troubleshooting.md, "A
# collapsed model"): all-MiniLM-L6-v2 collapsed at 1e-3 on 24 rare labels, 4e-06; the tiny test BERT
# collapsed at 0.05, 1.3e-05, and the same model learning the task at 2e-3, 0.074. A weak model that
# still ranks its rare class above the common one (test_model_card's tuned threshold, 55 steps) varies
# by 0.0047: the bound sits between, 70x above the collapses and 4x below that one.
FLAT_STD = 0.001

# Binary single-label classification (--decision_threshold): the positive class is label id 1.
POSITIVE_ID = 1


def positive_probabilities(logits: np.ndarray) -> np.ndarray:
    """The softmax probability of the positive class (label id 1) of a two-class model."""
    return softmax(logits)[:, POSITIVE_ID]


def binary_decisions(logits: np.ndarray, threshold: float) -> np.ndarray:
    """Label ids of a two-class model: 1 where the positive class's probability reaches `threshold` (at 0.5
    the argmax decisions, but for exact ties, which argmax gives to class 0)."""
    return (positive_probabilities(logits) >= threshold).astype(np.int64)
