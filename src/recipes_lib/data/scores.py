"""Scores to predict (regression): each split's labels checked to be numbers and described by their range,
and the hint that whole-number labels of many values may be scores read as classes. Loaded only for
such labels (data/labels.py decides)."""

from __future__ import annotations

import logging
import math

import numpy as np
import pyarrow.compute as pc
from datasets import ClassLabel

from recipes_lib.data.label_column import LabelColumn, as_numpy, first_true, where
from recipes_lib.errors import DataError

logger = logging.getLogger("recipes_lib.data.labels")  # it logs as the label checks it is part of

# Whole numbers taking at least this many values may be scores (a 1-10 rating, a 0-100 score) read as classes.
# Not fewer: ordinary class sets are whole numbers of 5 or 6 values (SST-5's 0-4, 1-5 stars, TREC's 0-5), and
# a hint on every such run would be noise; a 1-5 relatedness scale needs --problem_type regression unprompted.
INTEGER_SCORE_VALUES = 10


def hint_integer_scores(values: LabelColumn, feature) -> None:
    """One line when numeric labels are all whole numbers of many values: classes, unless they are a scale."""
    if isinstance(feature, ClassLabel) or values.lists or values.strings or values.all_bools:
        return
    numbers = sorted({float(v) for v in values.distinct[0] if _is_number(v)})
    if len(numbers) < INTEGER_SCORE_VALUES:
        return
    logger.warning(
        "The labels are whole numbers of %d values, %g to %g: read as %d classes, their order ignored "
        "(single-label classification). If they are scores on a scale, give --problem_type regression.",
        len(numbers), numbers[0], numbers[-1], len(numbers),
    )  # fmt: skip


def _is_number(value) -> bool:
    """Whether a label can be a regression target: a finite number (a numeric string, from JSON, too)."""
    if isinstance(value, bool) or value is None:
        return False
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _first_not_number(values: LabelColumn) -> int | None:
    if values.by_value:
        return values.first_where(lambda value: not _is_number(value))
    if not values.numbers:  # lists, booleans and blanks are no scores
        return 0 if values.rows else None
    return first_true(as_numpy(pc.invert(pc.is_finite(values.array)).fill_null(True)))


def check_scores(values: LabelColumn, split: str, locate: dict, label_column: str) -> None:
    bad = _first_not_number(values)
    if bad is not None:
        raise DataError(
            f"{where(locate, split, bad)} has the label {values.value(bad)!r}, which is not a number; "
            f"regression learns a score per row, so every '{label_column}' must be a finite number. Fix "
            "that row, or, for classes, use --problem_type auto or single_label_classification."
        )


def describe_scores(values: LabelColumn, name: str) -> str:
    """The scores' mean, min and max, for the log."""
    if values.by_value:
        distinct, codes = values.distinct
        counts = np.bincount(codes, minlength=len(distinct))
        scores = np.array([float(value) for value in distinct])
        mean, low, high = float(scores @ counts) / values.rows, float(scores.min()), float(scores.max())
    else:
        extremes = pc.min_max(values.floats)
        mean, low, high = (
            pc.sum(values.floats).as_py() / values.rows,
            extremes["min"].as_py(),
            extremes["max"].as_py(),
        )
    return f"score '{name}' mean {mean:.3g}, min {low:.3g}, max {high:.3g}"
