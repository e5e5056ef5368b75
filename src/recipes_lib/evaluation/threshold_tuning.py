"""The tuning of decision thresholds on a validation split: per class (multi-label) and for a binary
model's positive class (--decision_threshold tune)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from recipes_lib.config.tasks import DEFAULT_THRESHOLD, TUNE
from recipes_lib.evaluation.thresholds import (
    FLAT_STD,
    POSITIVE_ID,
    positive_probabilities,
    predicted_labels,
    sigmoid,
)

logger = logging.getLogger("recipes_lib")

# Candidate thresholds: 0.05 apart. A finer grid fits the validation split's noise, not the task.
THRESHOLD_GRID = np.round(np.arange(0.05, 0.96, 0.05), 2)


# A threshold that marks at least this share of the rows with a class under LOW_PREVALENCE of them is
# refused: it buys its F1 by putting the class on every row (2p / (1 + p) for prevalence p, without
# looking at the row). So is any threshold whose F1 is no better than that.
NEARLY_EVERY_ROW = 0.9
LOW_PREVALENCE = 0.5


def choose_thresholds(probabilities: np.ndarray, references: np.ndarray) -> list[dict]:
    """Per class: {"threshold", "tuned", "why"}: the grid value with the best F1 for that class on these
    examples, ties going to the value closest to 0.5, the refused ones (above) left out; 0.5 (tuned False,
    `why` says) for a class with no positive example here, a class whose probability does not vary across
    the rows (a threshold on it would mark all rows or none), or a class no allowed threshold lifts above
    marking every row."""
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
    """The positive class's threshold with the best positive-class F1 on these examples: choose_thresholds'
    rule (grid, ties nearest 0.5, refusals, 0.5 when there is nothing to tune on) on the one class."""
    truth = (np.asarray(references) == POSITIVE_ID)[:, None]
    return tune_thresholds(positive_probabilities(logits)[:, None], truth)[0]


def tune_multi_label(outputs, scorer, names: list[str], collapsed: bool) -> None:
    """Into `outputs` (predictions.EvaluationOutputs): multi-label thresholds tuned on validation (each
    class's, choose_thresholds' refusals kept at 0.5), and validation scored at them beside 0.5, with the
    share of rows each threshold marks (`threshold_tuning`). A collapsed model keeps 0.5 everywhere and
    gets no tuned figure."""
    probabilities = sigmoid(outputs.logits)
    if collapsed:
        choices = [_untuned("the model collapsed: its outputs do not depend on the input") for _ in names]
    else:
        choices = choose_thresholds(probabilities, outputs.references)
    outputs.thresholds = [choice["threshold"] for choice in choices]
    at_half = [DEFAULT_THRESHOLD] * len(names)
    prevalence = np.asarray(outputs.references).round().mean(axis=0)
    outputs.results["label_thresholds"] = dict(zip(names, outputs.thresholds, strict=True))
    outputs.results["threshold_tuning"] = {
        name: {
            **choice,
            "prevalence": round(float(share), 4),
            "marked_at_threshold": marked,
            "marked_at_0.5": marked_half,
        }
        for name, choice, share, marked, marked_half in zip(
            names,
            choices,
            prevalence,
            marked_shares(probabilities, outputs.thresholds),
            marked_shares(probabilities, at_half),
            strict=True,
        )
    }
    if not any(choice["tuned"] for choice in choices):
        reasons = sorted({choice["why"] for choice in choices})
        logger.info("Thresholds on validation: none tuned (%s); every class at 0.5", "; ".join(reasons))
        return
    # Optimistic: tuned and scored on the same split. The test split, scored at them, is not.
    tuned = scorer.scores(outputs.logits, outputs.references, outputs.thresholds)
    half = scorer.scores(outputs.logits, outputs.references, at_half)
    outputs.results.update({f"eval_tuned_{name}": value for name, value in tuned.items()})
    logger.info(
        "Thresholds tuned on validation (optimistic: scored on the rows they were tuned on): macro-F1 %.4f at "
        "0.5, %.4f at them; per class threshold (share of rows marked at it / at 0.5): %s",
        half["f1"],
        tuned["f1"],
        ", ".join(
            f"{name} {entry['threshold']:g} ({entry['marked_at_threshold']:.0%} / {entry['marked_at_0.5']:.0%})"
            + ("" if entry["tuned"] else f" not tuned: {entry['why']}")
            for name, entry in outputs.results["threshold_tuning"].items()
        ),
    )


# How many labels the end of a multi-label run shows on the terminal; results.json and the card hold all.
WEAKEST_SHOWN = 5


def weakest_labels(scores: dict[str, dict[str, Any]], count: int = WEAKEST_SHOWN) -> str:
    """The `count` labels of lowest validation F1 (of two at the same F1, the one with more rows first: more
    missed), as a small table for the terminal."""
    weakest = sorted(scores.items(), key=lambda item: (item[1]["f1"], -item[1]["support"]))[:count]
    width = max(len("label"), *(len(name) for name, _ in weakest))
    lines = [
        f"The {len(weakest)} weakest of {len(scores)} labels on validation, by F1 (all of them: per_class in "
        "results.json, and the model card):",
        f"  {'label':<{width}}  precision  recall  f1      support",
    ]
    lines += [
        f"  {name:<{width}}  {s['precision']:<9.4f}  {s['recall']:<6.4f}  {s['f1']:<6.4f}  {s['support']}"
        for name, s in weakest
    ]
    return "\n".join(lines)


def decide_binary_threshold(option, names: list[str], tuned_on: str, scorer, outputs) -> None:
    """--decision_threshold: the positive class's threshold, and validation (and test) scored at 0.5 and at it
    (a tuned threshold's validation figures are optimistic, the test split's honest)."""
    tuned = option == TUNE and not outputs.results.get("model_collapsed")  # a collapsed model: not tuned
    threshold = tune_decision_threshold(outputs.logits, outputs.references) if tuned else option
    if option == TUNE and not tuned:
        threshold = DEFAULT_THRESHOLD
        logger.warning("--decision_threshold tune: not tuned, the model collapsed; its threshold stays 0.5.")
    outputs.decision_threshold = threshold
    positive = positive_probabilities(outputs.logits)
    results = {
        "decision_threshold": threshold,
        "decision_threshold_tuned_on": tuned_on if tuned else None,
        "positive_label": names[POSITIVE_ID],
        # The share of validation rows given the positive class at the threshold and at 0.5.
        "decision_threshold_marked": round(float((positive >= threshold).mean()), 4),
        "decision_threshold_marked_at_default": round(float((positive >= DEFAULT_THRESHOLD).mean()), 4),
    }
    splits = {"eval": (outputs.logits, outputs.references)}
    if outputs.test_references is not None:
        splits["test"] = (outputs.test_logits, outputs.test_references)
    at_half = {}  # the positive class's F1 at 0.5 is the evaluation's own (eval_f1_positive, test_f1_positive)
    for prefix, (logits, references) in splits.items():
        references = np.asarray(references)
        at_half[prefix] = scorer.binary_scores(logits, references, DEFAULT_THRESHOLD)["f1_positive"]
        at_threshold = scorer.binary_scores(logits, references, threshold)
        results.update({f"{prefix}_threshold_{name}": value for name, value in at_threshold.items()})
    outputs.results.update(results)
    shown = "test" if "test" in splits else "eval"  # the honest split where there is one
    logger.info(
        "Decision threshold for '%s': %.2f (%s); positive-class F1 on %s %.4f at 0.5, %.4f at it",
        names[POSITIVE_ID],
        threshold,
        "tuned on validation" if tuned else "given",
        "test" if shown == "test" else "validation",
        at_half[shown],
        results[f"{shown}_threshold_f1_positive"],
    )
