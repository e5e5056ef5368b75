"""One split's label column as Arrow holds it (`LabelColumn`), read once: each distinct value is looked at
once in Python, the rows only as arrays, so a million rows cost about what a few classes do. What every
task's label checks (data/labels.py, multi_label.py, scores.py) share.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import ClassLabel

from recipes_lib.errors import DataError

INTEGER = re.compile(r"^-?\d+$")
# What may join a row's classes in one string ('2,27'), looked for when no --label_delimiter is given.
JOINERS = (",", ";", "|")


def where(locate: dict, split: str, index: int) -> str:
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


def is_fraction(value) -> bool:
    return isinstance(value, float) and not isinstance(value, bool) and not value.is_integer()


def numbered(mapping, classes, names, **changes):
    """The LabelMapping `mapping` with these classes, in id order (class i has id i), and these names."""
    return dataclasses.replace(
        mapping, names=list(names), to_id={c: i for i, c in enumerate(classes)}, **changes
    )


def in_order(classes) -> list:
    """Classes sorted: integer ids as numbers, written as text too ('2' before '10', from a split '2,10')."""
    if all(isinstance(c, str) and INTEGER.match(c) for c in classes):
        return sorted(classes, key=int)
    return sorted(classes)


_NONE = object()


@dataclass
class ClassTally:
    """Each row's classes, taken together: an item whose code is k has the classes `per_value[k]` (its
    normalised value; for multi-label, a mapping's `classes_of` it, or a 0/1 flag's position)."""

    column: LabelColumn
    codes: np.ndarray
    per_value: list[list]

    @cached_property
    def counts(self) -> Counter:
        """class -> times it occurs, over all rows."""
        counts: Counter = Counter()
        items = np.bincount(self.codes, minlength=len(self.per_value)).tolist()
        for value_classes, times in zip(self.per_value, items, strict=True):
            for c in value_classes if times else ():
                counts[c] += times
        return counts

    @property
    def kinds(self) -> set:
        return {type(c) for c in self.counts}

    def first_row(self, wanted_codes: list[int]) -> tuple[int, int] | None:
        """(the first row with an item of one of these codes, that item's code)."""
        item = first_true(np.isin(self.codes, wanted_codes)) if wanted_codes else None
        return None if item is None else (int(self.column.item_rows[item]), int(self.codes[item]))

    def first(self, wanted: Callable[[Any], bool]) -> tuple[int, Any] | None:
        """The first row with a class `wanted(class)` holds, and that class (the row's first such); None: no row."""
        hits = {k: next((c for c in cs if wanted(c)), _NONE) for k, cs in enumerate(self.per_value)}
        found = self.first_row([k for k, c in hits.items() if c is not _NONE])
        return None if found is None else (found[0], hits[found[1]])


def first_true(mask: np.ndarray) -> int | None:
    """The first row (or item) a boolean mask holds True for."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def as_numpy(array: pa.Array) -> np.ndarray:
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
        self.present = as_numpy(array.is_valid())
        self.lengths = as_numpy(pc.list_value_length(array).fill_null(-1))
        if kind == "json":  # lists of JSON texts (pyarrow's list kernels take no extension type)
            array = type(array).from_arrays(array.offsets, array.values.storage, mask=array.is_null())
        filled = pc.fill_null(array, pa.scalar([None], array.type))
        offsets = as_numpy(filled.offsets)
        self.items, self.row_starts = filled.flatten(), offsets[:-1] - offsets[0]
        self.item_rows = as_numpy(pc.list_parent_indices(filled))

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
        return [_json(v) for v in values] if self.kind == "json" else values, as_numpy(encoded.indices)

    def first_where(self, test: Callable[[Any], bool]) -> int | None:
        """The first row with an item that passes `test` (asked once per distinct value)."""
        wanted = [k for k, value in enumerate(self.distinct[0]) if test(value)]
        item = first_true(np.isin(self.distinct[1], wanted)) if wanted else None
        return None if item is None else int(self.item_rows[item])

    @property
    def by_value(self) -> bool:
        """Whether a scalar column's checks ask each distinct value (strings, JSON), not the rows as numbers."""
        return not self.listed and self.kind in ("string", "json")

    @property
    def numbers(self) -> bool:
        return not self.listed and self.kind == "number"

    @cached_property
    def floats(self) -> pa.Array:
        """A scalar column's values as float64 (booleans as 0.0 and 1.0; a missing value stays missing)."""
        return pc.cast(self.array, pa.float64(), safe=False)

    @property
    def lists(self) -> bool:
        if self.listed:
            return bool(self.present.any())
        return self.kind == "json" and any(isinstance(value, list) for value in self.distinct[0])

    @property
    def strings(self) -> bool:
        return self.by_value and any(isinstance(normalise_label(value), str) for value in self.distinct[0])

    @property
    def all_bools(self) -> bool:
        return self.rows == 0 or (
            not self.listed and all(isinstance(value, bool) for value in self.distinct[0])
        )

    def first_missing(self) -> int | None:
        if self.listed:
            return first_true(~self.present)
        if self.by_value:
            return self.first_where(lambda value: normalise_label(value) in (None, ""))
        if self.array.null_count == 0 and not pa.types.is_floating(self.array.type):
            return None
        # NaN: a blank cell in a numeric column
        return first_true(as_numpy(pc.is_null(self.array, nan_is_null=True)))

    def first_fraction(self) -> int | None:
        if self.kind == "json" and not self.listed:
            return self.first_where(is_fraction)
        if self.listed or not pa.types.is_floating(self.array.type):
            return None
        values = self.array
        whole = pc.and_kleene(pc.is_finite(values), pc.equal(pc.floor(values), values))
        # NaN and infinities are no integers either; a missing value is no fraction.
        return first_true(as_numpy(pc.and_(pc.is_valid(values), pc.invert(whole)).fill_null(False)))

    def classes(self) -> ClassTally:
        """The rows' classes, one each: the values normalised (single-label)."""
        if self.listed:
            row = first_true(self.present)
            raise DataError(
                f"The labels are lists ({self.value(row) if row is not None else []!r} in row {(row or 0) + 1}), "
                "but the training labels are one class per row. Give every split one label per row, or lists "
                "in every split for multi-label classification."
            )
        values, codes = self.distinct
        return ClassTally(self, codes, [[normalise_label(v)] for v in values])


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
    """The split's column as one Arrow array, in the split's row order. A split made by select, shuffle or
    train_test_split is the whole table plus an indices mapping (`_indices`), taken here in one call:
    datasets' own way, row by row (`with_format("arrow")` too, in batches), takes seconds a million rows."""
    table = getattr(dataset.data, "table", dataset.data)
    array = table.column(column)
    indices = getattr(dataset, "_indices", None)
    if indices is not None:
        array = array.take(indices.column(0))
    if len(array) != len(dataset):  # a layout of datasets this does not know: let datasets apply it
        array = dataset.with_format("arrow")[column]
    return array.combine_chunks()
