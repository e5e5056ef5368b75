"""One file whose split is a column (`--split_column NAME`), as some data sets are published (SICK's
`SemEval_set`: TRAIN / TRIAL / TEST): its rows become train, validation and test by that column's value.

The common spellings are recognised, in any case: train / training; trial, dev, development,
validation, valid, val (validation); test, testing. A value that is none of them is an error naming
it. Without validation rows, part of train is held out as when no validation file is given.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from datasets import DatasetDict

from recipes_lib.errors import ConfigError, DataError

SPLIT_SPELLINGS = {
    "train": ("train", "training"),
    "validation": ("trial", "dev", "development", "validation", "valid", "val"),
    "test": ("test", "testing"),
}
SPLIT_OF = {spelling: split for split, spellings in SPLIT_SPELLINGS.items() for spelling in spellings}


def check_split_column_options(data_args) -> None:
    """--split_column reads one local file: a validation or test file beside it, or a Hub dataset, is an error."""
    column = data_args.split_column
    if column is None:
        return
    if data_args.train_file is None:
        raise ConfigError(
            f"--split_column {column} splits the rows of one local file by that column, but no --train_file is "
            "given. Pass the file with --train_file, or leave --split_column out for a Hub dataset's own splits."
        )
    given = [f"--{split}_file" for split in ("validation", "test") if getattr(data_args, f"{split}_file")]
    if given:
        raise ConfigError(
            f"--split_column {column} takes every split from --train_file's rows, but {' and '.join(given)} "
            "also name(s) a split. Give the one file alone, or leave --split_column out."
        )


def split_by_column(
    raw: DatasetDict, locate: dict[str, Callable[[int], str]], column: str, path: str
) -> tuple[DatasetDict, dict[str, Callable[[int], str]], dict[str, str]]:
    """(the splits, each split's row locator into the file, each split's source in words)."""
    rows = raw["train"]
    if column not in rows.column_names:
        raise DataError(
            f"--split_column '{column}' is not a column of {path}; its columns are: {', '.join(rows.column_names)}. "
            "Name the column that says each row's split."
        )
    written = [str(value).strip() for value in rows[column]]
    values = np.asarray([value.lower() for value in written])
    unknown = sorted({value for value in written if value.lower() not in SPLIT_OF})
    if unknown:
        first = int(np.flatnonzero(values == unknown[0].lower())[0])
        where = locate["train"](first) if "train" in locate else f"row {first + 1}"
        spellings = "; ".join(f"{split}: {', '.join(names)}" for split, names in SPLIT_SPELLINGS.items())
        raise DataError(
            f"--split_column '{column}' of {path} holds {', '.join(repr(v) for v in unknown[:5])}, which name(s) no "
            f"split (first at {where}). The values recognised, in any case: {spellings}. Rename those values, "
            "or drop their rows."
        )
    splits, locators, sources = {}, {}, {}
    name = Path(path).name
    for split in SPLIT_SPELLINGS:
        indices = np.flatnonzero(np.isin(values, SPLIT_SPELLINGS[split]))
        if len(indices) == 0:
            continue
        splits[split] = rows.select(indices)
        if "train" in locate:
            locators[split] = lambda index, rows=indices: locate["train"](int(rows[index]))
        spelled = sorted({written[i] for i in indices})
        sources[split] = f"{name}, {column} {'/'.join(spelled)}"
    if "train" not in splits:
        raise DataError(
            f"--split_column '{column}' of {path} marks no row as train (values: {', '.join(sorted(set(values)))}). "
            "Training needs rows marked train or training."
        )
    return DatasetDict(splits), locators, sources
