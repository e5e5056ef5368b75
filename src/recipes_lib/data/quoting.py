"""Whether a CSV/TSV that reads two ways is quoted, from how each '"' in it is written.

data/files.py reads a delimited file with and without quoting. Only when both readings give every
record the header's width and still give different records (texts in quotes that hold no delimiter,
say) is this module loaded and the evidence looked at: a file whose every '"' opens, closes or is
doubled inside a field in quotes is quoted, as csv and pandas write it (they also quote fields that
need no quotes); a file with a '"' inside a bare text, and no field in quotes that only quoting
explains (a doubled '"', a delimiter, a line end), is GLUE-style. Only when it has both, the run
stops and asks for `--csv_quoting`. Like the readings, it streams: one record's text at a time.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass

from recipes_lib.errors import DataError

logger = logging.getLogger("recipes_lib.data.files")  # its decisions log beside the reading they finish


def weigh_quotes(path: str, delimiter: str, differs_line: int) -> bool:
    """Whether a file both readings fit is quoted, from how its '"' are written (read quoted, a record at a
    time, until both kinds of field are seen); logs why, or asks."""
    evidence = QuotingEvidence()
    with open(path, newline="", encoding="utf-8-sig") as handle:  # as data/files.py reads it
        taken: list[str] = []  # the lines the csv module took for the record it is reading
        tapped = (taken.append(line) or line for line in handle)
        reader = csv.reader(tapped, delimiter=delimiter, quoting=csv.QUOTE_MINIMAL, strict=True)
        start = 1
        for record in reader:
            text = "".join(taken)  # as written (its line end too: the fields are matched from its start)
            taken.clear()
            if record:
                _weigh_record(evidence, record, text, delimiter, start)
                if evidence.writer_line is not None and evidence.bare_quote_line is not None:
                    break
            start = reader.line_num + 1
    if evidence.bare_quote_line is None:
        logger.info(
            "%s: read quoted (as csv and pandas write it): fields enclosed in '\"': %d (the first at "
            "line %s), and every '\"' in the file opens, closes or is doubled inside one. Read unquoted, "
            "the texts from line %s on would keep those quotes; --csv_quoting none reads it so.",
            path,
            evidence.enclosed_fields,
            evidence.enclosed_line,
            differs_line,
        )
        return True
    if evidence.writer_line is None:
        logger.info(
            "%s: read unquoted (GLUE-style, a '\"' is text): line %s has a '\"' inside a text, which a "
            "quoting writer never leaves bare, and the fields in quotes (the first at line %s) hold no "
            "doubled '\"', delimiter or line end that only quoting explains, so their quotes are text; "
            "--csv_quoting quoted reads them as quoting.",
            path,
            evidence.bare_quote_line,
            evidence.enclosed_line,
        )
        return False
    raise DataError(
        f"{path} reads two ways, and both give rows of the header's width: with quoting (as Python's csv "
        f"module and pandas write) and without (GLUE-style, a '\"' is text). Line {evidence.writer_line} "
        f"has a field in quotes that only quoting explains (a doubled '\"', a delimiter or a line end inside), "
        f"but line {evidence.bare_quote_line} has a '\"' inside a text, which a quoting writer never leaves. "
        "Say which it is: --csv_quoting quoted or --csv_quoting none."
    )


@dataclass
class QuotingEvidence:
    """What the '"' in a delimited file say about its writer: the first line of each kind of field.

    Each field of the quoted reading is either enclosed in quotes in the file (any '"' inside
    doubled), or bare. A quoting writer (csv, pandas) encloses every field that holds a '"', the
    delimiter or a line end, and may enclose others too; it never leaves a '"' bare.
    """

    enclosed_line: int | None = None  # a field enclosed in quotes
    enclosed_fields: int = 0
    # An enclosed field holding what only quoting can hold: a doubled '"', the delimiter or a line end.
    # Read unquoted, its text would keep the doubled quotes or split in two: quoting is the one reading.
    writer_line: int | None = None
    bare_quote_line: int | None = None  # a '"' in a field not enclosed: text, which no quoting writer leaves


def _weigh_record(evidence: QuotingEvidence, record: list[str], text: str, delimiter: str, line: int) -> None:
    at = 0
    for index, value in enumerate(record):
        at += index > 0  # the delimiter before the field
        enclosed = '"' + value.replace('"', '""') + '"'
        if text.startswith(enclosed, at):
            at += len(enclosed)
            evidence.enclosed_fields += 1
            if evidence.enclosed_line is None:
                evidence.enclosed_line = line
            if evidence.writer_line is None and any(mark in value for mark in ('"', delimiter, "\n", "\r")):
                evidence.writer_line = line
        else:
            at += len(value)
            if '"' in value and evidence.bare_quote_line is None:
                evidence.bare_quote_line = line
