"""Labels: what they mean (LabelMapping), which task they describe, and the checks on them.

The task is read from the training labels (lists or a delimiter: multi-label; fractions:
regression; otherwise single-label classes), or taken from --problem_type and checked against
them. Every labelled split is then checked against the mapping, on the raw values, before
tokenization: an error names the first bad row, and where it is.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass, field

from datasets import ClassLabel, DatasetDict

from recipes_lib.config.arguments import DataArguments
from recipes_lib.config.tasks import AUTO, MULTI_LABEL, REGRESSION, SINGLE_LABEL
from recipes_lib.errors import ConfigError, DataError

logger = logging.getLogger(__name__)


@dataclass
class LabelMapping:
    """What the labels mean: class names in id order (or the score's name), and the kind of task.

    String labels are sorted, so ids are stable across runs. A regression task has one "class",
    named after its label column: the model has one output.
    """

    names: list[str]
    # Raw label value -> id. Identity for ClassLabel features and for ints that are already 0..K-1.
    to_id: dict = field(repr=False)
    problem_type: str = SINGLE_LABEL
    # Multi-label from strings: the separator between a row's classes ('billing;shipping'); a blank
    # cell is then a row of none of the classes.
    delimiter: str | None = None
    # Multi-label as 0/1 flags, one per class, in every row ([0, 1, 1]): classes by position.
    multi_hot: bool = False

    @property
    def num_labels(self) -> int:
        return len(self.names)

    @property
    def id2label(self) -> dict[int, str]:
        return dict(enumerate(self.names))

    @property
    def label2id(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    def classes_of(self, value) -> list:
        """A multi-label row's classes, as raw values (normalised): a list as is, a string split, a scalar alone."""
        if isinstance(value, list | tuple):
            if self.multi_hot:
                return [position for position, flag in enumerate(value) if normalise_label(flag) == 1]
            return [normalise_label(v) for v in value]
        value = normalise_label(value)
        if self.delimiter is not None:
            # A file where no row holds the delimiter reads as numbers ('2'): its classes are still strings.
            text = "" if value is None else str(value)
            return [part.strip() for part in text.split(self.delimiter) if part.strip()]
        return [value]

    def encode(self, value):
        """What the model is trained on: a class id, a multi-hot row of 0.0/1.0, or a float."""
        if self.problem_type == REGRESSION:
            return float(value)
        if self.problem_type == MULTI_LABEL:
            row = [0.0] * self.num_labels
            for raw in self.classes_of(value):
                row[self.to_id[raw]] = 1.0
            return row
        return self.to_id[normalise_label(value)]


def label_mapping(raw: DatasetDict, data_args: DataArguments, locate: dict) -> LabelMapping:
    """The task and its labels, checked on every split that has labels.

    Labels are normalised first (`normalise_label`): booleans are classes 0 and 1 (False, True),
    integers written as floats (1.0, from a CSV column with a blank) are integers, and strings lose
    stray whitespace, so 'billing ' and 'billing' are one class.
    """
    label_column = data_args.label_column_name
    for split in ("train", "validation"):
        if label_column not in raw[split].column_names:
            raise DataError(
                f"Label column '{label_column}' is not in the {split} data; its columns are: "
                f"{', '.join(raw[split].column_names)}. Set --label_column_name to the column holding the labels."
            )
    feature, values = raw["train"].features[label_column], raw["train"][label_column]
    problem_type = _problem_type(values, feature, data_args, locate)
    if problem_type == REGRESSION:
        mapping = LabelMapping(names=[label_column], to_id={}, problem_type=REGRESSION)
    elif problem_type == MULTI_LABEL:
        mapping = _multi_label_mapping(values, feature, data_args.label_delimiter, locate)
    else:
        mapping = _single_label_mapping(values, feature, label_column, locate)
    return _checked(mapping, raw, label_column, locate)


def _is_list_feature(feature) -> bool:
    """A datasets feature holding a list per row (List, Sequence, LargeList; [Value] in old releases)."""
    return isinstance(feature, list) or (hasattr(feature, "feature") and not isinstance(feature, ClassLabel))


def _problem_type(values: list, feature, data_args: DataArguments, locate: dict) -> str:
    """The task the labels describe (lists or a delimiter: multi-label; fractions: regression), or the one asked for."""
    requested, delimiter = data_args.problem_type, data_args.label_delimiter
    if delimiter == "":
        raise ConfigError(
            "--label_delimiter is empty; give the string between a row's classes, e.g. ';' or '|'."
        )
    lists = _is_list_feature(feature) or any(isinstance(value, list | tuple) for value in values)
    if delimiter is not None and (lists or not any(isinstance(normalise_label(v), str) for v in values)):
        raise ConfigError(
            f"--label_delimiter '{delimiter}' splits string labels, but the training labels are "
            f"{'lists already' if lists else 'not strings'}. Leave --label_delimiter out."
        )
    fraction = None if lists else next((i for i, v in enumerate(values) if _is_fraction(v)), None)
    if requested == AUTO:
        if lists or delimiter is not None:
            return MULTI_LABEL
        return REGRESSION if fraction is not None else SINGLE_LABEL
    if requested != MULTI_LABEL and (lists or delimiter is not None):
        raise ConfigError(
            f"--problem_type {requested} takes one label per row, but the training labels are "
            f"{'lists' if lists else f'split on --label_delimiter {delimiter!r}'}, which means several classes per "
            "row. Use --problem_type multi_label_classification (or auto)."
        )
    if requested == SINGLE_LABEL and fraction is not None:
        raise DataError(
            f"{_where(locate, 'train', fraction)} has the label {values[fraction]!r}, which is not a class: "
            "--problem_type single_label_classification needs class names, ids or booleans. For a score to "
            "predict, use --problem_type regression (or auto)."
        )
    return requested


def _multi_hot(values: list) -> bool:
    """Whether list labels are 0/1 flags, one per class, rather than the classes themselves.

    Every row a list of the same length (at least 2) holding only 0 and 1: a list of class ids
    varies in length from row to row, and [0, 1, 0] would name class 0 twice.
    """
    if not values or not all(isinstance(value, list | tuple) for value in values):
        return False
    widths = {len(value) for value in values}
    flags = {normalise_label(flag) for value in values for flag in value}
    return len(widths) == 1 and widths.pop() >= 2 and flags <= {0, 1}


def _is_fraction(value) -> bool:
    return isinstance(value, float) and not isinstance(value, bool) and not value.is_integer()


def _is_number(value) -> bool:
    """Whether a label can be a regression target: a finite number (a numeric string, from JSON, too)."""
    if isinstance(value, bool) or value is None:
        return False
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _single_label_mapping(values: list, feature, label_column: str, locate: dict) -> LabelMapping:
    if isinstance(feature, ClassLabel):
        names = list(feature.names)
        return LabelMapping(names=names, to_id={i: i for i in range(len(names))})
    train_values = [normalise_label(value) for value in values]
    kinds = {type(value) for value in train_values}
    if len(kinds) > 1 or not kinds <= {int, str}:
        kind_names = ", ".join(sorted(k.__name__ for k in kinds))
        odd = next((i for i, v in enumerate(train_values) if not isinstance(v, int | str)), None)
        example = (
            f" (e.g. {train_values[odd]!r} at {_where(locate, 'train', odd)})" if odd is not None else ""
        )
        raise DataError(
            f"Label column '{label_column}' mixes value types ({kind_names}){example}. Labels must be all integers "
            "(class ids), all booleans or all strings (class names) for classification, or all numbers for "
            "regression (--problem_type regression)."
        )
    unique = sorted(set(train_values))
    if kinds == {int} and unique == list(range(len(unique))):
        mapping = LabelMapping(names=[str(v) for v in unique], to_id={v: v for v in unique})
    else:
        mapping = LabelMapping(names=[str(v) for v in unique], to_id={v: i for i, v in enumerate(unique)})
    if all(isinstance(value, bool) for value in values):
        mapping.names = ["False", "True"][: mapping.num_labels]
    return mapping


def _multi_label_mapping(values: list, feature, delimiter: str | None, locate: dict) -> LabelMapping:
    """Class names from every class a training row names; a Hub list of ClassLabel keeps its names and order."""
    inner = getattr(feature, "feature", None)
    if isinstance(inner, ClassLabel):
        names = list(inner.names)
        return LabelMapping(names, {i: i for i in range(len(names))}, MULTI_LABEL, delimiter)
    if _multi_hot(values):
        width = len(values[0])
        logger.info(
            "Labels are rows of %d 0/1 flags: class i is the i-th flag, named '%d' to '%d'.",
            width,
            0,
            width - 1,
        )
        return LabelMapping(
            [str(i) for i in range(width)], {i: i for i in range(width)}, MULTI_LABEL, multi_hot=True
        )
    probe = LabelMapping([], {}, MULTI_LABEL, delimiter)
    seen: set = set()
    for index, value in enumerate(values):
        classes = probe.classes_of(value)
        odd = next(
            (i for i, c in enumerate(classes) if isinstance(c, bool) or not isinstance(c, int | str)), None
        )
        if odd is not None:
            raise DataError(
                f"{_where(locate, 'train', index)} lists {classes[odd]!r} among its classes; a multi-label row lists "
                "class names (strings) or class ids (integers). Fix that row."
            )
        if len(set(classes)) != len(classes):
            raise DataError(
                f"{_where(locate, 'train', index)} has the labels {value!r}, which name a class twice. A multi-label "
                "row lists each of its classes once (['billing', 'shipping']); a row of 0/1 flags per class must be "
                "written as the names of the classes flagged."
            )
        seen.update(classes)
    if len({type(c) for c in seen}) > 1:
        raise DataError(
            "The multi-label rows mix class names and class ids (strings and integers). Use one or the other."
        )
    unique = sorted(seen)
    identity = all(isinstance(c, int) for c in unique) and unique == list(range(len(unique)))
    to_id = {c: c for c in unique} if identity else {c: i for i, c in enumerate(unique)}
    return LabelMapping([str(c) for c in unique], to_id, MULTI_LABEL, delimiter)


def check_labels_present(raw: DatasetDict, label_column: str, locate: dict, delimiter: str | None) -> None:
    """Every training and validation row has a label; an error names the first that has none, where it is.

    With --label_delimiter a blank cell is a row of none of the classes, as [] is in a JSON list.
    """
    if delimiter:
        return
    for split in [name for name in ("train", "validation") if name in raw]:
        if label_column not in raw[split].column_names or isinstance(
            raw[split].features[label_column], ClassLabel
        ):
            continue  # a missing column is reported with the columns there are, later
        values = raw[split][label_column]
        missing = next((i for i, value in enumerate(values) if normalise_label(value) in (None, "")), None)
        if missing is not None:
            raise DataError(
                f"{_where(locate, split, missing)} has no label (empty '{label_column}'). Fill it in or remove the row."
            )


def _checked(mapping: LabelMapping, raw: DatasetDict, label_column: str, locate: dict) -> LabelMapping:
    """Every labelled split's labels mean something to this mapping: known classes, or numbers for regression."""
    # Multi-label may detect a single class (its rows without it are the negatives); single-label needs two.
    needed = {SINGLE_LABEL: 2, MULTI_LABEL: 1, REGRESSION: 0}[mapping.problem_type]
    if mapping.num_labels < needed:
        raise DataError(
            f"The training data has {mapping.num_labels} distinct label(s) in '{label_column}' "
            f"({mapping.names}); classification needs at least {needed}."
        )
    for split in [name for name in ("train", "validation", "test") if name in raw]:
        if label_column not in raw[split].column_names:
            continue
        values = raw[split][label_column]
        if split == "test":
            unlabelled = [unlabelled_value(v, raw["test"].features[label_column]) for v in values]
            if labels_hidden(values, raw["test"].features[label_column]):
                continue  # an unlabelled test split: predicted, not scored
            if any(unlabelled):
                first = unlabelled.index(True)
                raise DataError(
                    f"{_where(locate, split, first)} has no label, but other test rows have one. Label every "
                    "test row (it is then scored) or none (it is then only predicted)."
                )
        if mapping.problem_type == REGRESSION:
            bad = next((i for i, v in enumerate(values) if not _is_number(v)), None)
            if bad is not None:
                raise DataError(
                    f"{_where(locate, split, bad)} has the label {values[bad]!r}, which is not a number; regression "
                    f"learns a score per row, so every '{label_column}' must be a finite number. Fix that row, or, "
                    "for classes, use --problem_type auto or single_label_classification."
                )
            continue
        if mapping.multi_hot:
            bad = next(
                (
                    i
                    for i, v in enumerate(values)
                    if not isinstance(v, list | tuple) or len(v) != mapping.num_labels
                ),
                None,
            )
            if bad is not None:
                raise DataError(
                    f"{_where(locate, split, bad)} has the labels {values[bad]!r}, but the training rows are "
                    f"{mapping.num_labels} 0/1 flags, one per class. Give every row the same {mapping.num_labels} flags."
                )
        if split == "train":
            continue  # its classes are the mapping's own
        classes = (
            mapping.classes_of if mapping.problem_type == MULTI_LABEL else lambda v: [normalise_label(v)]
        )
        unseen = [(i, c) for i, v in enumerate(values) for c in classes(v) if c not in mapping.to_id]
        if unseen:
            first, value = unseen[0]
            others = sorted({repr(v) for _, v in unseen})
            raise DataError(
                f"The {split} data has label(s) the training data never uses: {', '.join(others[:5])}"
                f"{' ...' if len(others) > 5 else ''} (first at {_where(locate, split, first)}). Training labels are: "
                f"{', '.join(mapping.names)}. Fix those labels, or add training examples of those classes"
                + (
                    "; if the labels are scores, train with --problem_type regression."
                    if any(_is_fraction(v) for _, v in unseen)
                    else "."
                )
            )
    return mapping


def describe_labels(mapping: LabelMapping, values: list) -> str:
    """One log line's worth: rows per class, classes per row (multi-label), or the range of the scores."""
    if mapping.problem_type == REGRESSION:
        scores = [float(v) for v in values]
        return (
            f"score '{mapping.names[0]}' mean {sum(scores) / len(scores):.3g}, min {min(scores):.3g}, "
            f"max {max(scores):.3g}"
        )
    classes = mapping.classes_of if mapping.problem_type == MULTI_LABEL else lambda v: [normalise_label(v)]
    rows = [classes(value) for value in values]
    counts = Counter(c for row in rows for c in row)
    described = ", ".join(
        f"{mapping.names[mapping.to_id[k]]} {n}"
        for k, n in sorted(counts.items(), key=lambda kv: mapping.to_id[kv[0]])
    )
    if mapping.problem_type == MULTI_LABEL:
        return f"rows with each class: {described}; {sum(map(len, rows)) / len(rows):.2f} classes per row"
    return f"classes: {described}"


def _where(locate: dict, split: str, index: int) -> str:
    """'train.csv line 17' (or 'training row 17' where the source has no lines)."""
    if split in locate:
        return locate[split](index)
    return f"{split} row {index + 1}"


def labels_hidden(values: list, feature) -> bool:
    """Whether a test split's labels are all absent: empty, or -1 everywhere (GLUE's hidden test labels,
    in a ClassLabel or, for STS-B, a float column)."""
    return all(unlabelled_value(v, feature) for v in values) or all(normalise_label(v) == -1 for v in values)


def unlabelled_value(value, feature) -> bool:
    """Whether a raw label value means "no label": empty, or -1 in a ClassLabel (GLUE's test splits)."""
    value = normalise_label(value)
    return value is None or value == "" or (isinstance(feature, ClassLabel) and value == -1)


def normalise_label(value):
    """The class a raw label value means: bools and integral floats as ints, strings stripped, NaN as none."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and math.isnan(value):
        return None  # a blank cell in a numeric column
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return value.strip()
    return value
