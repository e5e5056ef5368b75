"""Multi-label labels: a list of classes per row, classes joined in one string ('billing;shipping', split on
--label_delimiter or on the joiner the labels show), or a row of 0/1 flags, one per class. Loaded only
when the labels may be such (data/labels.py decides)."""

from __future__ import annotations

import logging

import numpy as np
from datasets import ClassLabel

from recipes_lib.config.tasks import AUTO, MULTI_LABEL
from recipes_lib.data.label_column import (
    INTEGER,
    JOINERS,
    ClassTally,
    LabelColumn,
    first_true,
    in_order,
    normalise_label,
    numbered,
    where,
)
from recipes_lib.errors import ConfigError, DataError

logger = logging.getLogger("recipes_lib.data.labels")  # it logs as the label checks it is part of


def _joined_labels(values: LabelColumn) -> str | None:
    """The joiner of labels that read as lists of classes: some labels hold it, and each part of those is an
    integer id or a label of another row on its own ('2,27' beside rows of '2' and of '27'). A class name
    that holds a comma ('Arts, Crafts') is no list: its parts are never labels alone."""
    labels = {normalise_label(v) for v in values.distinct[0] if isinstance(v, str)}
    for joiner in JOINERS:
        parts = {part.strip() for label in labels if joiner in label for part in label.split(joiner)}
        parts.discard("")
        if parts and all(INTEGER.match(part) or part in labels for part in parts):
            return joiner
    return None


def joined_note(values: LabelColumn) -> str:
    """For single-label classes that hold a joiner: which one, and the option that splits on it."""
    labels = [v for v in values.distinct[0] if isinstance(v, str)]
    for joiner in JOINERS:
        joined = [label for label in labels if joiner in label]
        if joined:
            return (
                f" {len(joined)} distinct label(s) hold '{joiner}' (e.g. {joined[0]!r}); if such a label lists several "
                f"classes, give --label_delimiter '{joiner}'."
            )
    return ""


def read_delimiter(values: LabelColumn, delimiter: str | None, requested: str, lists: bool) -> str | None:
    """The delimiter between a row's classes: --label_delimiter's, checked, or the joiner the labels show."""
    if delimiter == "":
        raise ConfigError(
            "--label_delimiter is empty; give the string between a row's classes, e.g. ';' or '|'."
        )
    if delimiter is not None and (lists or not values.strings):
        raise ConfigError(
            f"--label_delimiter '{delimiter}' splits string labels, but the training labels are "
            f"{'lists already' if lists else 'not strings'}. Leave --label_delimiter out."
        )
    if requested in (AUTO, MULTI_LABEL) and delimiter is None and not lists and values.strings:
        delimiter = _joined_labels(values)
        if delimiter is not None:
            several = sum(delimiter in str(v) for v in values.distinct[0])
            logger.warning(
                "Labels such as %r are read as lists of classes joined by '%s' (multi-label): %d distinct "
                "label(s) hold it. Give --label_delimiter '%s' to say so, or --problem_type "
                "single_label_classification to read each label whole, as one class.",
                next(v for v in values.distinct[0] if delimiter in str(v)), delimiter, several, delimiter,
            )  # fmt: skip
    return delimiter


def _multi_hot_width(values: LabelColumn) -> int | None:
    """The number of flags, where every row is a list of as many 0/1 flags (at least 2)."""
    if not values.listed or not values.rows or not values.present.all():
        return None
    widths = np.unique(values.lengths)
    flags = {normalise_label(value) for value in values.distinct[0]}
    return int(widths[0]) if len(widths) == 1 and widths[0] >= 2 and flags <= {0, 1} else None


def multi_label_tally(values: LabelColumn, mapping) -> ClassTally:
    """The rows' classes: each item of a list column, a mapping's `classes_of` each value, or the positions
    of the 1 flags (multi-hot)."""
    distinct, codes = values.distinct
    if mapping.multi_hot and values.listed:
        # An item's class is its position in its row, where its flag is 1: value (position, flag).
        ones = np.array([normalise_label(value) == 1 for value in distinct], dtype=np.int64)[codes]
        positions = np.arange(len(codes)) - values.row_starts[values.item_rows]
        per_value = [
            [p] if flag else [] for p in range(int(positions.max(initial=-1)) + 1) for flag in (0, 1)
        ]
        return ClassTally(values, positions * 2 + ones, per_value)
    if values.listed:
        return ClassTally(values, codes, [[normalise_label(v)] for v in distinct])
    return ClassTally(values, codes, [mapping.classes_of(v) for v in distinct])


def _first_repeat(tally: ClassTally) -> int | None:
    """The first row that names a class twice."""
    column, codes = tally.column, tally.codes
    if column.listed:  # a list naming a class twice: two items of one class in a row
        number = {c: i for i, c in enumerate(tally.counts)}
        item_classes = np.array([number[c] for (c,) in tally.per_value], dtype=np.int64)[codes]
        keys = np.sort(column.item_rows * len(number) + item_classes)
        repeats = keys[1:][keys[1:] == keys[:-1]]
        return int(repeats[0] // len(number)) if repeats.size else None
    # a value naming a class twice: a delimited string, a JSON list
    repeated = tally.first_row([k for k, cs in enumerate(tally.per_value) if len(set(cs)) != len(cs)])
    return None if repeated is None else repeated[0]


def multi_label_mapping(values: LabelColumn, feature, mapping, locate: dict):
    """`mapping` (a LabelMapping without classes) with the classes of every training row; a Hub list of
    ClassLabel keeps its names and order."""
    inner = getattr(feature, "feature", None)
    if isinstance(inner, ClassLabel):
        return numbered(mapping, range(inner.num_classes), inner.names)
    # Rows of 0/1 flags: every row a list of the same length (at least 2) holding only 0 and 1. A list
    # of class ids varies in length from row to row, and [0, 1, 0] would name class 0 twice.
    width = _multi_hot_width(values)
    if width is not None:
        logger.info(
            "Labels are rows of %d 0/1 flags: class i is the i-th flag, named '0' to '%d'.", width, width - 1
        )
        positions = range(width)
        return numbered(mapping, positions, map(str, positions), multi_hot=True)
    tally = multi_label_tally(values, mapping)
    first_repeat = _first_repeat(tally)
    odd = tally.first(lambda c: isinstance(c, bool) or not isinstance(c, int | str))
    # The first row that is wrong either way, its odd class before its repeated one.
    if odd is not None and (first_repeat is None or odd[0] <= first_repeat):
        raise DataError(
            f"{where(locate, 'train', odd[0])} lists {odd[1]!r} among its classes; a multi-label row lists "
            "class names (strings) or class ids (integers). Fix that row."
        )
    if first_repeat is not None:
        raise DataError(
            f"{where(locate, 'train', first_repeat)} has the labels {values.value(first_repeat)!r}, "
            "which name a class twice. A multi-label row lists each of its classes once (['billing', 'shipping']); "
            "a row of 0/1 flags per class must be written as the names of the classes flagged."
        )
    if len(tally.kinds) > 1:
        raise DataError(
            "The multi-label rows mix class names and class ids (strings and integers). Use one or the other."
        )
    classes = in_order(tally.counts)
    return numbered(mapping, classes, map(str, classes))


def check_flags(values: LabelColumn, mapping, split: str, locate: dict) -> None:
    """Every row of a split holds as many 0/1 flags as the training rows."""
    if values.listed:
        bad = first_true(~values.present | (values.lengths != mapping.num_labels))
    else:
        bad = 0 if values.rows else None
    if bad is not None:
        raise DataError(
            f"{where(locate, split, bad)} has the labels {values.value(bad)!r}, but the training rows are "
            f"{mapping.num_labels} 0/1 flags, one per class. Give every row the same {mapping.num_labels} flags."
        )
