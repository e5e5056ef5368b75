"""The tuning of decision thresholds on a validation split: per class (multi-label) and for a binary
model's positive class (--decision_threshold tune)."""

from __future__ import annotations

import numpy as np

from recipes_lib.config.tasks import DEFAULT_THRESHOLD
from recipes_lib.evaluation.thresholds import FLAT_STD, POSITIVE_ID, positive_probabilities, predicted_labels

# Candidate thresholds: 0.05 apart. A finer grid fits the validation split's noise, not the task.
THRESHOLD_GRID = np.round(np.arange(0.05, 0.96, 0.05), 2)


# A threshold that marks at least this share of the rows with a class under LOW_PREVALENCE of them is
# refused: it buys its F1 by putting the class on every row (2p / (1 + p) for prevalence p, without
# looking at the row). So is any threshold whose F1 is no better than that.
NEARLY_EVERY_ROW = 0.9
LOW_PREVALENCE = 0.5


def choose_thresholds(probabilities: np.ndarray, references: np.ndarray) -> list[dict]:
    """Per class: {"threshold", "tuned", "why"}: the grid value with the best F1 for that class on these
    examples, ties going to the value closest to 0.5; 0.5 (tuned False, `why` says) for a class with no
    positive example here, a class whose probability does not vary across the rows (a threshold on it
    would mark all rows or none: evaluation/collapse.py), or a class no allowed threshold lifts above
    marking every row. Refused: a threshold marking NEARLY_EVERY_ROW of the rows with a class under
    LOW_PREVALENCE of them, and one whose F1 is no better than marking every row.
    """
    probabilities, references = np.asarray(probabilities), np.asarray(references).astype(bool)
    return [
        _choose(probabilities[:, column], references[:, column]) for column in range(probabilities.shape[1])
    ]


def _untuned(why: str) -> dict:
    return {"threshold": DEFAULT_THRESHOLD, "tuned": False, "why": why}


def _choose(chances: np.ndarray, truth: np.ndarray) -> dict:
    """One class's choice (choose_thresholds): its probabilities and its 0/1 truth over the rows."""
    if not truth.any():
        return _untuned("no positive row to tune on")
    if chances.std() < FLAT_STD:
        return _untuned("its probability does not vary across rows")
    predicted = chances[None, :] >= THRESHOLD_GRID[:, None]  # grid x examples
    true_positives = (predicted & truth).sum(axis=1)
    f1 = 2 * true_positives / (predicted.sum(axis=1) + truth.sum())
    prevalence, marked = truth.mean(), predicted.mean(axis=1)
    every_row_f1 = 2 * prevalence / (1 + prevalence)
    allowed = (f1 > every_row_f1 + 1e-12) & ~((marked >= NEARLY_EVERY_ROW) & (prevalence < LOW_PREVALENCE))
    if not allowed.any():
        return _untuned(
            "each threshold marks nearly every row or scores no better than marking every row "
            f"(F1 {every_row_f1:.3f})"
        )
    order = np.lexsort((np.abs(THRESHOLD_GRID - DEFAULT_THRESHOLD), -np.where(allowed, f1, -1.0)))
    return {"threshold": float(THRESHOLD_GRID[order[0]]), "tuned": True, "why": None}


def tune_thresholds(probabilities: np.ndarray, references: np.ndarray) -> list[float]:
    """One threshold per class (choose_thresholds' values)."""
    return [choice["threshold"] for choice in choose_thresholds(probabilities, references)]


def marked_shares(probabilities: np.ndarray, thresholds) -> list[float]:
    """Per class: the share of the rows its threshold marks with it."""
    return [round(float(share), 4) for share in predicted_labels(probabilities, thresholds).mean(axis=0)]


def tune_decision_threshold(logits: np.ndarray, references: np.ndarray) -> float:
    """The positive class's threshold with the best positive-class F1 on these examples.

    The multi-label rule applied to the one positive class (choose_thresholds): the same grid, ties
    nearest 0.5, the same refusals, and 0.5 when there is nothing to tune on.
    """
    truth = (np.asarray(references) == POSITIVE_ID)[:, None]
    return tune_thresholds(positive_probabilities(logits)[:, None], truth)[0]
