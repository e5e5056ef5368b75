"""A test split's labels (--test_file, --test_split_name): scored where every row has one, only predicted
where none has (empty, or -1 everywhere: GLUE's hidden test labels, STS-B's too); some of each is an
error. Loaded only with a test split."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
from datasets import ClassLabel

from recipes_lib.data.label_column import (
    LabelColumn,
    as_numpy,
    first_true,
    normalise_label,
    unlabelled_value,
    where,
)
from recipes_lib.errors import DataError


def _unlabelled(values: LabelColumn, feature) -> np.ndarray:
    """Per row: whether it has no label (`unlabelled_value`)."""
    if values.listed:
        return ~values.present
    if values.by_value:
        distinct, codes = values.distinct
        return np.array([unlabelled_value(value, feature) for value in distinct], dtype=bool)[codes]
    unlabelled = pc.is_null(values.array, nan_is_null=True)
    if isinstance(feature, ClassLabel) and values.kind == "number":
        unlabelled = pc.or_(unlabelled, pc.equal(values.floats, -1).fill_null(False))
    return as_numpy(unlabelled)


def _hidden(values: LabelColumn, unlabelled: np.ndarray) -> bool:
    """Whether no row has a label: all empty, or -1 everywhere."""
    if values.rows == 0 or unlabelled.all():
        return True
    if values.kind == "json" and not values.listed:
        return all(normalise_label(value) == -1 for value in values.distinct[0])
    return values.numbers and bool(as_numpy(pc.equal(values.floats, -1).fill_null(False)).all())


def labelled_test(values: LabelColumn, feature, locate: dict) -> bool:
    """Whether the test split has labels to score; a DataError where some rows have one and others not."""
    unlabelled = _unlabelled(values, feature)
    if _hidden(values, unlabelled):
        return False
    first = first_true(unlabelled)
    if first is not None:
        raise DataError(
            f"{where(locate, 'test', first)} has no label, but other test rows have one. Label every "
            "test row (it is then scored) or none (it is then only predicted)."
        )
    return True
