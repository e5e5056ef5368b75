"""--label_names_file: class names from a file, line i naming class id i, checked against the labels."""

from __future__ import annotations

import dataclasses
import logging
import unicodedata
from collections import Counter
from pathlib import Path

from recipes_lib.config.tasks import REGRESSION
from recipes_lib.data.label_column import INTEGER
from recipes_lib.errors import ConfigError, DataError

logger = logging.getLogger("recipes_lib.data.labels")  # it logs as the label checks it is part of


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


def named(mapping, path: str):
    """The LabelMapping with --label_names_file's names: class id i is named by the file's line i (from 0), and
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
    odd = next((c for c in ids if not (isinstance(c, int) or INTEGER.match(str(c)))), None)
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
    return dataclasses.replace(mapping, names=names, to_id=to_id)
