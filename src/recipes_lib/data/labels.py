"""Labels: what they mean (LabelMapping), which task they describe, and the checks on them.

The task is read from the training labels (lists or a delimiter: multi-label; fractions:
regression; otherwise single-label classes), or taken from --problem_type and checked against
them. Every labelled split is checked on the raw values before tokenization; an error names the
first bad row. A split's label column is read once, as Arrow holds it (`LabelColumn`): each distinct
value is looked at once in Python, the rows only as arrays, so a million rows cost about what a few
classes do.
"""

from __future__ import annotations

import json
import logging
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import ClassLabel, DatasetDict

from recipes_lib.config.arguments import DataArguments
from recipes_lib.config.tasks import AUTO, MULTI_LABEL, REGRESSION, SINGLE_LABEL
from recipes_lib.data.files import split_column_note
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
        return len(self.names)  # asked once a row by `encode`: no ClassLabel built for it

    @property
    def id2label(self) -> dict[int, str]:
        # Through datasets' ClassLabel, which refuses a name given twice.
        return dict(enumerate(ClassLabel(names=self.names).names))

    @property
    def label2id(self) -> dict[str, int]:
        return {name: i for i, name in self.id2label.items()}

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


def _numbered(classes, names: list[str], **task) -> LabelMapping:
    """The mapping of these classes, in id order (class i has id i), with these names."""
    return LabelMapping(names=list(names), to_id={c: i for i, c in enumerate(classes)}, **task)


def label_mapping(raw: DatasetDict, data_args: DataArguments, locate: dict) -> LabelMapping:
    """The task and its labels, checked on every split that has labels (normalised: `normalise_label`)."""
    label_column = data_args.label_column_name
    for split in ("train", "validation"):
        if label_column not in raw[split].column_names:
            raise DataError(
                f"Label column '{label_column}' is not in the {split} data; its columns are: "
                f"{', '.join(raw[split].column_names)}.{split_column_note(data_args, split)} Set --label_column_name "
                "to the column holding the labels."
            )
    feature, values = raw["train"].features[label_column], label_values(raw["train"], label_column)
    problem_type, delimiter = _problem_type(values, feature, data_args, locate)
    if problem_type == REGRESSION:
        mapping = LabelMapping(names=[label_column], to_id={}, problem_type=REGRESSION)
    elif problem_type == MULTI_LABEL:
        mapping = _multi_label_mapping(values, feature, delimiter, locate)
    else:
        mapping = _single_label_mapping(values, feature, label_column, locate)
    if data_args.label_names_file is not None:
        mapping = _named(mapping, data_args.label_names_file, locate)
    return _checked(mapping, raw, label_column, locate, values)


# An error lists at most this many of the training classes (a file of joined labels read whole has hundreds).
MAX_LISTED_CLASSES = 20
# What may join a row's classes in one string ('2,27'), looked for when no --label_delimiter is given.
JOINERS = (",", ";", "|")


def _joined_labels(values: LabelColumn) -> str | None:
    """The joiner of labels that read as lists of classes: some labels hold it, and each part of those is an
    integer id or a label of another row on its own ('2,27' beside rows of '2' and of '27'). A class name
    that holds a comma ('Arts, Crafts') is no list: its parts are never labels alone."""
    labels = {normalise_label(v) for v in values.distinct[0] if isinstance(v, str)}
    for joiner in JOINERS:
        parts = {part.strip() for label in labels if joiner in label for part in label.split(joiner)}
        parts.discard("")
        if parts and all(_INTEGER.match(part) or part in labels for part in parts):
            return joiner
    return None


def _joined_note(values: LabelColumn) -> str:
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


def _problem_type(
    values: LabelColumn, feature, data_args: DataArguments, locate: dict
) -> tuple[str, str | None]:
    """(the task the labels describe (lists or a delimiter: multi-label; fractions: regression), or the one
    asked for; the delimiter between a row's classes: --label_delimiter's, or the one the labels show)."""
    requested, delimiter = data_args.problem_type, data_args.label_delimiter
    if delimiter == "":
        raise ConfigError(
            "--label_delimiter is empty; give the string between a row's classes, e.g. ';' or '|'."
        )
    # A datasets feature holding a list per row (List, Sequence, LargeList; [Value] in old releases).
    list_feature = isinstance(feature, list) or (
        hasattr(feature, "feature") and not isinstance(feature, ClassLabel)
    )
    lists = list_feature or values.lists
    if delimiter is not None and (lists or not values.strings):
        raise ConfigError(
            f"--label_delimiter '{delimiter}' splits string labels, but the training labels are "
            f"{'lists already' if lists else 'not strings'}. Leave --label_delimiter out."
        )
    fraction = None if lists else values.first_fraction()
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
    if requested == AUTO:
        if lists or delimiter is not None:
            return MULTI_LABEL, delimiter
        if fraction is None:
            _hint_integer_scores(values, feature)
        return (REGRESSION if fraction is not None else SINGLE_LABEL), None
    if requested != MULTI_LABEL and (lists or delimiter is not None):
        raise ConfigError(
            f"--problem_type {requested} takes one label per row, but the training labels are "
            f"{'lists' if lists else f'split on --label_delimiter {delimiter!r}'}, which means several classes per "
            "row. Use --problem_type multi_label_classification (or auto)."
        )
    if requested == SINGLE_LABEL and fraction is not None:
        raise DataError(
            f"{_where(locate, 'train', fraction)} has the label {values.value(fraction)!r}, which is not a class: "
            "--problem_type single_label_classification needs class names, ids or booleans. For a score to "
            "predict, use --problem_type regression (or auto)."
        )
    return requested, delimiter if requested == MULTI_LABEL else None


# Whole numbers taking at least this many values may be scores (a 1-10 rating, a 0-100 score) read as classes.
# Not fewer: ordinary class sets are whole numbers of 5 or 6 values (SST-5's 0-4, 1-5 stars, TREC's 0-5), and
# a hint on every such run would be noise; a 1-5 relatedness scale needs --problem_type regression unprompted.
INTEGER_SCORE_VALUES = 10


def _hint_integer_scores(values: LabelColumn, feature) -> None:
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


def _single_label_mapping(values: LabelColumn, feature, label_column: str, locate: dict) -> LabelMapping:
    if isinstance(feature, ClassLabel):
        return _numbered(range(feature.num_classes), feature.names)
    tally = values.classes(None)
    if len(tally.kinds) > 1 or not tally.kinds <= {int, str}:
        kind_names = ", ".join(sorted(k.__name__ for k in tally.kinds))
        odd = tally.first(lambda c: not isinstance(c, int | str))
        if odd is None:  # integers and strings: name the first row whose type is not the first row's
            first_type = type(tally.first(lambda _: True)[1])
            odd = tally.first(lambda c: type(c) is not first_type)
        example = f" (e.g. {odd[1]!r} at {_where(locate, 'train', odd[0])})" if odd is not None else ""
        raise DataError(
            f"Label column '{label_column}' mixes value types ({kind_names}){example}. Labels must be all integers "
            "(class ids), all booleans or all strings (class names) for classification, or all numbers for "
            "regression (--problem_type regression)."
        )
    classes = _in_order(tally.counts)  # ids 0..K-1 keep their ids; other classes are numbered in sorted order
    joined = _joined_note(values)
    if joined:
        logger.warning("The labels are read as %d single classes.%s", len(classes), joined)
    return _numbered(classes, [("False", "True")[c] if values.all_bools else str(c) for c in classes])


_INTEGER = re.compile(r"^-?\d+$")


def _in_order(classes) -> list:
    """Classes sorted: integer ids as numbers, written as text too ('2' before '10', from a split '2,10')."""
    if all(isinstance(c, str) and _INTEGER.match(c) for c in classes):
        return sorted(classes, key=int)
    return sorted(classes)


def _multi_label_mapping(values: LabelColumn, feature, delimiter: str | None, locate: dict) -> LabelMapping:
    """Class names from every class a training row names; a Hub list of ClassLabel keeps its names and order."""
    inner = getattr(feature, "feature", None)
    if isinstance(inner, ClassLabel):
        return _numbered(range(inner.num_classes), inner.names, problem_type=MULTI_LABEL, delimiter=delimiter)
    # Rows of 0/1 flags: every row a list of the same length (at least 2) holding only 0 and 1. A list
    # of class ids varies in length from row to row, and [0, 1, 0] would name class 0 twice.
    width = values.multi_hot_width()
    if width is not None:
        logger.info(
            "Labels are rows of %d 0/1 flags: class i is the i-th flag, named '0' to '%d'.", width, width - 1
        )
        positions = range(width)
        return _numbered(positions, map(str, positions), problem_type=MULTI_LABEL, multi_hot=True)
    tally = values.classes(LabelMapping([], {}, MULTI_LABEL, delimiter))
    odd = tally.first(lambda c: isinstance(c, bool) or not isinstance(c, int | str))
    # The first row that is wrong either way, its odd class before its repeated one.
    if odd is not None and (tally.first_repeat is None or odd[0] <= tally.first_repeat):
        raise DataError(
            f"{_where(locate, 'train', odd[0])} lists {odd[1]!r} among its classes; a multi-label row lists "
            "class names (strings) or class ids (integers). Fix that row."
        )
    if tally.first_repeat is not None:
        raise DataError(
            f"{_where(locate, 'train', tally.first_repeat)} has the labels {values.value(tally.first_repeat)!r}, "
            "which name a class twice. A multi-label row lists each of its classes once (['billing', 'shipping']); "
            "a row of 0/1 flags per class must be written as the names of the classes flagged."
        )
    if len(tally.kinds) > 1:
        raise DataError(
            "The multi-label rows mix class names and class ids (strings and integers). Use one or the other."
        )
    classes = _in_order(tally.counts)
    return _numbered(classes, map(str, classes), problem_type=MULTI_LABEL, delimiter=delimiter)


def _refuse_invisible_characters(names: list[str], path: str) -> None:
    """A class name holding a control or format character (a stray byte-order mark, a NUL, an escape) would
    be written as a name nobody can type or read in results.json, the card and predictions."""
    for number, name in enumerate(names, start=1):
        odd = next((c for c in name if unicodedata.category(c) in ("Cc", "Cf")), None)
        if odd is not None:
            raise ConfigError(
                f"--label_names_file {path}: line {number} ({name!r}) holds the invisible character "
                f"U+{ord(odd):04X} ({unicodedata.name(odd, 'a control character')}). Save the file as plain text, "
                "one class name per line, without it."
            )


def _named(mapping: LabelMapping, path: str, locate: dict) -> LabelMapping:
    """The mapping with --label_names_file's names: class id i is named by the file's line i (from 0), and
    every line is a class, whether the training rows use it or not."""
    if mapping.problem_type == REGRESSION:
        raise ConfigError(
            f"--label_names_file {path} names classes, but the labels are scores (regression). Leave it out, or "
            "give --problem_type single_label_classification or multi_label_classification."
        )
    try:
        # utf-8-sig: a byte-order mark that Windows editors put first is the file's, not class 0's name.
        names = [line.strip() for line in Path(path).read_text(encoding="utf-8-sig").splitlines()]
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"--label_names_file {path} cannot be read: {error}.") from None
    while names and not names[-1]:
        names.pop()  # a file's trailing blank lines name nothing
    _refuse_invisible_characters(names, path)
    blank = next((number for number, name in enumerate(names) if not name), None)
    repeated = next((name for name, count in Counter(names).items() if count > 1), None)
    if not names or blank is not None or repeated is not None:
        problem = (
            "is empty" if not names else f"has a blank line {blank + 1}" if blank is not None
            else f"names '{repeated}' twice"
        )  # fmt: skip
        raise ConfigError(
            f"--label_names_file {path} {problem}. Give one distinct class name per line, the first line naming "
            "class id 0."
        )
    ids = list(mapping.to_id)
    text_ids = any(isinstance(c, str) for c in ids)
    odd = next((c for c in ids if not (isinstance(c, int) or _INTEGER.match(str(c)))), None)
    if odd is not None:
        raise ConfigError(
            f"--label_names_file {path} names class ids by line, but the labels are names already (e.g. {odd!r}). "
            "Leave --label_names_file out."
        )
    beyond = [c for c in ids if not 0 <= int(c) < len(names)]
    if mapping.multi_hot and len(ids) != len(names):
        raise DataError(
            f"The training labels are rows of {len(ids)} 0/1 flags, one per class, but --label_names_file {path} "
            f"names {len(names)} classes. Give one line per flag."
        )
    if beyond:
        raise DataError(
            f"The training labels use class id {beyond[0]}, but --label_names_file {path} has {len(names)} "
            f"lines, naming ids 0 to {len(names) - 1}. Give every class id a line (the first line is id 0)."
        )
    to_id = {(str(i) if text_ids else i): i for i in range(len(names))}
    logger.info("Class names from %s: %s.", path, ", ".join(f"{i} {name}" for i, name in enumerate(names)))
    return LabelMapping(names, to_id, mapping.problem_type, mapping.delimiter, mapping.multi_hot)


def check_labels_present(raw: DatasetDict, label_column: str, locate: dict, delimiter: str | None) -> None:
    """Every training and validation row has a label; an error names the first that has none, where it is.

    With --label_delimiter a blank cell is a row of none of the classes, as [] is in a JSON list.
    """
    if delimiter:
        return
    for split in [name for name in ("train", "validation") if name in raw]:
        feature = raw[split].features.get(label_column)
        if feature is None or isinstance(feature, ClassLabel):
            continue  # a missing column is reported with the columns there are, later
        values = label_values(raw[split], label_column, f" (from {_where(locate, split, 0)})")
        odd = (
            values._first_where(partial(_names_no_class, listed=values.listed))
            if values.kind == "json"
            else None
        )
        if odd is not None:
            raise DataError(
                f"{_where(locate, split, odd)} has the label {values.value(odd)!r}, which names no class: labels must "
                "be class names or ids, booleans, numbers (regression), or lists of class names or ids (multi-label). "
                "Fix that row, or set --label_column_name to the column that holds the labels."
            )
        missing = values.first_missing()
        if missing is not None:
            raise DataError(
                f"{_where(locate, split, missing)} has no label (empty '{label_column}'). Fill it in or remove the row."
            )


def _checked(
    mapping: LabelMapping, raw: DatasetDict, label_column: str, locate: dict, train: LabelColumn
) -> LabelMapping:
    """Every labelled split's labels mean something to this mapping: known classes, or numbers for regression."""
    # Multi-label may detect a single class (its rows without it are the negatives); single-label needs two.
    needed = {SINGLE_LABEL: 2, MULTI_LABEL: 1, REGRESSION: 0}[mapping.problem_type]
    if mapping.num_labels < needed:
        raise DataError(
            f"The training data has {mapping.num_labels} distinct label(s) in '{label_column}' "
            f"({mapping.names}, from {_where(locate, 'train', 0)} on); classification needs at least {needed}."
        )
    for split in [name for name in ("train", "validation", "test") if name in raw]:
        if label_column not in raw[split].column_names:
            continue
        values = train if split == "train" else label_values(raw[split], label_column)
        if split == "test":
            feature = raw["test"].features[label_column]
            if values.hidden(feature):
                continue  # an unlabelled test split: predicted, not scored
            first = _first(values.unlabelled(feature))
            if first is not None:
                raise DataError(
                    f"{_where(locate, split, first)} has no label, but other test rows have one. Label every "
                    "test row (it is then scored) or none (it is then only predicted)."
                )
        if mapping.problem_type == REGRESSION:
            bad = values.first_not_number()
            if bad is not None:
                raise DataError(
                    f"{_where(locate, split, bad)} has the label {values.value(bad)!r}, which is not a number; "
                    f"regression learns a score per row, so every '{label_column}' must be a finite number. Fix "
                    "that row, or, for classes, use --problem_type auto or single_label_classification."
                )
            continue
        if mapping.multi_hot:
            bad = values.first_not_flags(mapping.num_labels)
            if bad is not None:
                raise DataError(
                    f"{_where(locate, split, bad)} has the labels {values.value(bad)!r}, but the training rows are "
                    f"{mapping.num_labels} 0/1 flags, one per class. Give every row the same {mapping.num_labels} flags."
                )
        if split == "train":
            continue  # its classes are the mapping's own
        tally = values.classes(mapping if mapping.problem_type == MULTI_LABEL else None)
        unseen = [c for c in tally.counts if c not in mapping.to_id]
        if unseen:
            first, _ = tally.first(lambda c: c not in mapping.to_id)
            others = sorted({repr(v) for v in unseen})
            scores = any(_is_fraction(v) for v in unseen)
            shown = MAX_LISTED_CLASSES
            raise DataError(
                f"The {split} data has label(s) the training data never uses: {', '.join(others[:5])}"
                f"{' ...' if len(others) > 5 else ''} (first at {_where(locate, split, first)}). Training labels are: "
                f"{', '.join(mapping.names[:shown])}"
                f"{f' ... ({mapping.num_labels} in all)' if mapping.num_labels > shown else ''}. Fix those labels, "
                f"or add training examples of those classes"
                f"{'; if the labels are scores, train with --problem_type regression' if scores else ''}."
                f"{_joined_note(values) if mapping.problem_type == SINGLE_LABEL else ''}"
            )
    return mapping


def describe_labels(mapping: LabelMapping, dataset, label_column: str) -> str:
    """One log line's worth: rows per class, classes per row (multi-label), or the range of the scores."""
    values = label_values(dataset, label_column)
    if mapping.problem_type == REGRESSION:
        mean, low, high = values.scores()
        return f"score '{mapping.names[0]}' mean {mean:.3g}, min {low:.3g}, max {high:.3g}"
    counts = values.classes(mapping if mapping.problem_type == MULTI_LABEL else None).counts
    described = ", ".join(
        f"{mapping.names[mapping.to_id[k]]} {n}"
        for k, n in sorted(counts.items(), key=lambda kv: mapping.to_id[kv[0]])
    )
    if mapping.problem_type == MULTI_LABEL:
        return f"rows with each class: {described}; {sum(counts.values()) / values.rows:.2f} classes per row"
    return f"classes: {described}"


def _where(locate: dict, split: str, index: int) -> str:
    """'train.csv line 17' (or 'training row 17' where the source has no lines)."""
    return locate[split](index) if split in locate else f"{split} row {index + 1}"


def unlabelled_value(value, feature) -> bool:
    """Whether a raw label value means "no label": empty, or -1 in a ClassLabel (GLUE's test splits)."""
    value = normalise_label(value)
    return value is None or value == "" or (isinstance(feature, ClassLabel) and value == -1)


def normalise_label(value):
    """The class a raw label value means: booleans as 0 and 1, integral floats (1.0, from a CSV column with a
    blank) as ints, strings stripped ('billing ' is 'billing'), NaN as none."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and math.isnan(value):
        return None  # a blank cell in a numeric column
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return value.strip()
    return value


# -- one split's label column, as the checks ask about it ------------------------------------------


@dataclass
class ClassTally:
    """Each row's classes (a multi-label mapping's `classes_of`, else the normalised value), taken together."""

    counts: Counter  # class -> times it occurs, over all rows
    kinds: set  # the types of the classes
    first_repeat: int | None  # the first row that names a class twice
    # The first row with a class `wanted(class)` holds, and that class (the row's first such); None: no row.
    first: Callable[[Callable[[Any], bool]], tuple[int, Any] | None]


def _first(mask: np.ndarray) -> int | None:
    """The first row (or item) a boolean mask holds True for."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _numpy(array: pa.Array) -> np.ndarray:
    return array.to_numpy(zero_copy_only=False)


def _json(text: str | None):
    return None if text is None else json.loads(text)


class LabelColumn:
    """One split's label column as Arrow holds it: strings, integers, floats, booleans (a ClassLabel's ids
    too), JSON values of mixed types (datasets' Json feature, a .jsonl whose labels mix types), or lists of
    any of them. Its items are a list column's items, flattened (a missing row: one missing item), or a
    scalar column's values; `item_rows` is each item's row."""

    def __init__(self, array: pa.Array, kind: str, listed: bool):
        self.array, self.rows, self.kind, self.listed = array, len(array), kind, listed
        if not self.listed:
            self.present, self.item_rows = None, np.arange(self.rows)
            self.items = array.storage if kind == "json" else array  # JSON: its text
            return
        self.present = _numpy(array.is_valid())
        self.lengths = _numpy(pc.list_value_length(array).fill_null(-1))
        if kind == "json":  # lists of JSON texts (pyarrow's list kernels take no extension type)
            array = type(array).from_arrays(array.offsets, array.values.storage, mask=array.is_null())
        filled = pc.fill_null(array, pa.scalar([None], array.type))
        offsets = _numpy(filled.offsets)
        self.items, self.row_starts = filled.flatten(), offsets[:-1] - offsets[0]
        self.item_rows = _numpy(pc.list_parent_indices(filled))

    def value(self, index: int):
        """Row `index`'s label as the file gives it (JSON comes as its text, decoded here)."""
        value = self.array[index].as_py()
        if self.kind != "json" or value is None:
            return value
        return [_json(text) for text in value] if self.listed else json.loads(value)

    @cached_property
    def distinct(self) -> tuple[list, np.ndarray]:
        """(the items' distinct values, None for a missing one; each item's index into them)."""
        if self.kind == "null":
            return [None] * bool(len(self.items)), np.zeros(len(self.items), dtype=np.int64)
        encoded = self.items.dictionary_encode(null_encoding="encode")
        values = encoded.dictionary.to_pylist()
        return [_json(v) for v in values] if self.kind == "json" else values, _numpy(encoded.indices)

    def _first_where(self, test: Callable[[Any], bool]) -> int | None:
        """The first row with an item that passes `test` (asked once per distinct value)."""
        wanted = [k for k, value in enumerate(self.distinct[0]) if test(value)]
        item = _first(np.isin(self.distinct[1], wanted)) if wanted else None
        return None if item is None else int(self.item_rows[item])

    @property
    def _by_value(self) -> bool:
        """Whether a scalar column's checks ask each distinct value (strings, JSON), not the rows as numbers."""
        return not self.listed and self.kind in ("string", "json")

    @property
    def _numbers(self) -> bool:
        return not self.listed and self.kind == "number"

    @cached_property
    def _floats(self) -> pa.Array:
        """A scalar column's values as float64 (booleans as 0.0 and 1.0; a missing value stays missing)."""
        return pc.cast(self.array, pa.float64(), safe=False)

    @property
    def lists(self) -> bool:
        if self.listed:
            return bool(self.present.any())
        return self.kind == "json" and any(isinstance(value, list) for value in self.distinct[0])

    @property
    def strings(self) -> bool:
        return self._by_value and any(isinstance(normalise_label(value), str) for value in self.distinct[0])

    @property
    def all_bools(self) -> bool:
        return self.rows == 0 or (
            not self.listed and all(isinstance(value, bool) for value in self.distinct[0])
        )

    def first_missing(self) -> int | None:
        if self.listed:
            return _first(~self.present)
        if self._by_value:
            return self._first_where(lambda value: normalise_label(value) in (None, ""))
        if self.array.null_count == 0 and not pa.types.is_floating(self.array.type):
            return None
        # NaN: a blank cell in a numeric column
        return _first(_numpy(pc.is_null(self.array, nan_is_null=True)))

    def first_fraction(self) -> int | None:
        if self.kind == "json" and not self.listed:
            return self._first_where(_is_fraction)
        if self.listed or not pa.types.is_floating(self.array.type):
            return None
        values = self.array
        whole = pc.and_kleene(pc.is_finite(values), pc.equal(pc.floor(values), values))
        # NaN and infinities are no integers either; a missing value is no fraction.
        return _first(_numpy(pc.and_(pc.is_valid(values), pc.invert(whole)).fill_null(False)))

    def first_not_number(self) -> int | None:
        if self._by_value:
            return self._first_where(lambda value: not _is_number(value))
        if not self._numbers:  # lists, booleans and blanks are no scores
            return 0 if self.rows else None
        return _first(_numpy(pc.invert(pc.is_finite(self.array)).fill_null(True)))

    def scores(self) -> tuple[float, float, float]:
        """(mean, min, max) of a regression column."""
        if self._by_value:
            values, codes = self.distinct
            counts = np.bincount(codes, minlength=len(values))
            scores = np.array([float(value) for value in values])
            return float(scores @ counts) / self.rows, float(scores.min()), float(scores.max())
        extremes = pc.min_max(self._floats)
        return pc.sum(self._floats).as_py() / self.rows, extremes["min"].as_py(), extremes["max"].as_py()

    def unlabelled(self, feature) -> np.ndarray:
        """Per row: whether it has no label (`unlabelled_value`)."""
        if self.listed:
            return ~self.present
        if self._by_value:
            values, codes = self.distinct
            return np.array([unlabelled_value(value, feature) for value in values], dtype=bool)[codes]
        unlabelled = pc.is_null(self.array, nan_is_null=True)
        if isinstance(feature, ClassLabel) and self.kind == "number":
            unlabelled = pc.or_(unlabelled, pc.equal(self._floats, -1).fill_null(False))
        return _numpy(unlabelled)

    def hidden(self, feature) -> bool:
        """Whether no row has a label: all empty, or -1 everywhere (GLUE's hidden test labels)."""
        if self.rows == 0 or self.unlabelled(feature).all():
            return True
        if self.kind == "json" and not self.listed:
            return all(normalise_label(value) == -1 for value in self.distinct[0])
        return self._numbers and bool(_numpy(pc.equal(self._floats, -1).fill_null(False)).all())

    def multi_hot_width(self) -> int | None:
        """The number of flags, where every row is a list of as many 0/1 flags (at least 2)."""
        if not self.listed or not self.rows or not self.present.all():
            return None
        widths = np.unique(self.lengths)
        flags = {normalise_label(value) for value in self.distinct[0]}
        return int(widths[0]) if len(widths) == 1 and widths[0] >= 2 and flags <= {0, 1} else None

    def first_not_flags(self, width: int) -> int | None:
        if not self.listed:
            return 0 if self.rows else None
        return _first(~self.present | (self.lengths != width))

    def classes(self, mapping: LabelMapping | None) -> ClassTally:
        """The rows' classes: each value normalised (`mapping` None: single-label), a multi-label mapping's
        `classes_of` each value (a list column: each item), or the positions of the 1 flags (multi-hot)."""
        if mapping is None and self.listed:
            row = _first(self.present)
            raise DataError(
                f"The labels are lists ({self.value(row) if row is not None else []!r} in row {(row or 0) + 1}), "
                "but the training labels are one class per row. Give every split one label per row, or lists "
                "in every split for multi-label classification."
            )
        values, codes = self.distinct
        multi_hot = mapping is not None and mapping.multi_hot and self.listed
        if multi_hot:
            # An item's class is its position in its row, where its flag is 1: value (position, flag).
            ones = np.array([normalise_label(value) == 1 for value in values], dtype=np.int64)[codes]
            positions = np.arange(len(codes)) - self.row_starts[self.item_rows]
            codes = positions * 2 + ones
            per_value = [
                [p] if flag else [] for p in range(int(positions.max(initial=-1)) + 1) for flag in (0, 1)
            ]
        else:
            per_value = [
                [normalise_label(v)] if mapping is None or self.listed else mapping.classes_of(v)
                for v in values
            ]
        counts: Counter = Counter()
        for value_classes, items in zip(
            per_value, np.bincount(codes, minlength=len(per_value)).tolist(), strict=True
        ):
            for c in value_classes if items else ():
                counts[c] += items

        def first_row(wanted_values: list[int]) -> tuple[int, int] | None:
            """(the first row with an item of one of these distinct values, that item's value)."""
            item = _first(np.isin(codes, wanted_values)) if wanted_values else None
            return None if item is None else (int(self.item_rows[item]), int(codes[item]))

        def first(wanted):
            hits = {k: next((c for c in cs if wanted(c)), _NONE) for k, cs in enumerate(per_value)}
            found = first_row([k for k, c in hits.items() if c is not _NONE])
            return None if found is None else (found[0], hits[found[1]])

        if self.listed and not multi_hot:  # a list naming a class twice: two items of one class in a row
            number = {c: i for i, c in enumerate(counts)}
            item_classes = np.array([number[c] for (c,) in per_value], dtype=np.int64)[codes]
            keys = np.sort(self.item_rows * len(number) + item_classes)
            repeats = keys[1:][keys[1:] == keys[:-1]]
            first_repeat = int(repeats[0] // len(number)) if repeats.size else None
        else:  # a value naming a class twice: a delimited string, a JSON list
            repeated = first_row([k for k, cs in enumerate(per_value) if len(set(cs)) != len(cs)])
            first_repeat = None if repeated is None else repeated[0]
        return ClassTally(counts, {type(c) for c in counts}, first_repeat, first)


_NONE = object()


def _names_no_class(value, listed: bool) -> bool:
    """A JSON object, or a list inside a list: it names no class (and cannot be counted as one)."""
    return isinstance(value, dict) or (
        isinstance(value, list) and (listed or any(isinstance(item, dict | list) for item in value))
    )


def label_values(dataset, column: str, where: str = "") -> LabelColumn:
    """A reader of one split's label column, through Arrow: scalars (JSON too), or lists of them.
    `where`: the file and line an error names (" (from train.jsonl line 1)")."""
    array = _arrow_column(dataset, column)
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    listed = pa.types.is_list(array.type) or pa.types.is_large_list(array.type)
    if listed and pa.types.is_null(array.type.value_type):
        # Every list empty or all missing: pyarrow's list kernels take no list<null>; as strings they are the same.
        array = array.cast(
            pa.list_(pa.string()) if pa.types.is_list(array.type) else pa.large_list(pa.string())
        )
    kind = _kind(array.type.value_type if listed else array.type)
    if kind is None:
        raise DataError(
            f"Label column '{column}'{where} holds {array.type} values; labels must be class names or ids, booleans, "
            "numbers (regression), or lists of class names or ids (multi-label). Fix the column, or set "
            "--label_column_name to the column that holds the labels."
        )
    return LabelColumn(array, kind, listed)


def _kind(kind: pa.DataType) -> str | None:
    """How a flat Arrow column is read: 'string', 'number', 'bool', 'null', 'json' (mixed types); None: not a label."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return "number"
    if pa.types.is_boolean(kind):
        return "bool"
    if pa.types.is_null(kind):
        return "null"
    if isinstance(kind, pa.BaseExtensionType) and kind.extension_name == "arrow.json":
        return "json"
    return None


def _arrow_column(dataset, column: str) -> pa.Array:
    """The split's column as one Arrow array, in the split's row order (after a select or a shuffle).

    datasets keeps a split made by select, shuffle or train_test_split as the whole table plus an
    indices mapping (`_indices`); its own way of applying one, row by row, takes seconds a million
    rows. Taken here in one call (`with_format("arrow")` would apply it the same way, in batches).
    """
    table = getattr(dataset.data, "table", dataset.data)
    array = table.column(column)
    indices = getattr(dataset, "_indices", None)
    if indices is not None:
        array = array.take(indices.column(0))
    if len(array) != len(dataset):  # a layout of datasets this does not know: let datasets apply it
        array = dataset.with_format("arrow")[column]
    return array.combine_chunks()
