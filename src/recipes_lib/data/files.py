"""Local data files: CSV and TSV (quoted or not), JSON, JSON Lines and Parquet, read as their writer meant.

A TSV is written two ways. GLUE's files are unquoted: a `"` in a sentence is text. Python's `csv`
module and `pandas.to_csv(sep="\\t")` quote fields that hold a tab, a newline or a quote, and a
reader that ignores the quotes splits such a text into several rows. Reading a file the wrong way
can still yield rows of the right width, and then the run trains on fragments without a word.

So a delimited file is read both ways (Python's `csv` module, with and without quoting) before
`datasets` loads it. A reading is plausible when every record has the header's number of fields.
One plausible reading decides; two that agree are the same file. When both are plausible and
disagree, the file is quoted if writing its quoted reading back with `csv` (minimal or full
quoting) gives the file again, as it does for whatever a quoting writer made; otherwise it is an
error naming `--csv_quoting`, never a guess. The records' starting line numbers
are kept, so an error about a row names the line an editor shows.
"""

from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import datasets
from datasets import DatasetDict

from recipes_lib.errors import DataError

logger = logging.getLogger(__name__)

DELIMITED = {".csv": ",", ".tsv": "\t"}
QUOTING_CHOICES = ("auto", "quoted", "none")


@dataclass
class Reading:
    """One way of reading a delimited file: its records, the line each starts on, and the first bad one."""

    records: list[list[str]]
    lines: list[int]  # 1-based line of each record (the header is line 1)
    bad_line: int | None  # first record whose field count differs from the header's

    @property
    def plausible(self) -> bool:
        return self.bad_line is None and len(self.records) > 0


def read_delimited(path: str, delimiter: str, quoted: bool) -> Reading:
    """Read as quoted (strictly: a quote must open and close a whole field, as writers do) or unquoted."""
    options = {"quoting": csv.QUOTE_MINIMAL, "strict": True} if quoted else {"quoting": csv.QUOTE_NONE}
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle, delimiter=delimiter, **options)
        records, lines, bad_line, width, start = [], [], None, None, 1
        while True:
            try:
                record = next(reader)
            except StopIteration:
                break
            except csv.Error:  # a stray quote: no quoting writer made this file
                return Reading(records, lines, bad_line or start)
            if record:  # blank lines are no records for datasets either
                if width is None:
                    width = len(record)
                elif len(record) != width and bad_line is None:
                    bad_line = start
                records.append(record)
                lines.append(start)
            start = reader.line_num + 1
    return Reading(records, lines, bad_line)


def written_by_a_quoting_writer(path: str, delimiter: str, records: list[list[str]]) -> bool:
    """Whether writing `records` with csv's minimal or full quoting reproduces the file, line ends aside."""
    import io

    with open(path, newline="", encoding="utf-8-sig") as handle:
        text = handle.read().replace("\r\n", "\n")
    for quoting in (csv.QUOTE_MINIMAL, csv.QUOTE_ALL):
        buffer = io.StringIO()
        csv.writer(buffer, delimiter=delimiter, quoting=quoting, lineterminator="\n").writerows(records)
        if buffer.getvalue().rstrip("\n") == text.rstrip("\n"):
            return True
    return False


def decide_quoting(path: str, requested: str = "auto") -> tuple[bool, list[int]]:
    """(whether the file is quoted, the line each data row starts on), or a DataError."""
    delimiter = DELIMITED[Path(path).suffix.lower()]
    if requested != "auto":
        reading = read_delimited(path, delimiter, quoted=requested == "quoted")
        if reading.bad_line is not None:
            width = (
                f"the header's {len(reading.records[0])} fields" if reading.records else "a readable header"
            )
            raise DataError(
                f"{path} line {reading.bad_line} does not have {width} when "
                f"read with --csv_quoting {requested}. Fix that line, or try --csv_quoting "
                f"{'none' if requested == 'quoted' else 'quoted'}."
            )
        return requested == "quoted", reading.lines[1:]
    quoted = read_delimited(path, delimiter, quoted=True)
    unquoted = read_delimited(path, delimiter, quoted=False)
    if quoted.plausible and unquoted.plausible and quoted.records != unquoted.records:
        # Split without quotes, a quoted text with a tab and a newline can still give two rows of the
        # right width. A file a quoting writer made is exactly what writing its quoted reading gives.
        if written_by_a_quoting_writer(path, delimiter, quoted.records):
            return True, quoted.lines[1:]
        pairs = zip(quoted.records, unquoted.records, strict=False)
        differs = next(
            (i for i, (a, b) in enumerate(pairs) if a != b),
            min(len(quoted.records), len(unquoted.records)) - 1,
        )
        raise DataError(
            f"{path} reads two ways, and both give rows of the header's width: with quoting (as Python's csv "
            f"module and pandas write) and without (GLUE-style, a '\"' is text). They differ from line "
            f"{quoted.lines[differs]} on. Say which it is: --csv_quoting quoted or --csv_quoting none."
        )
    if quoted.plausible:
        return True, quoted.lines[1:]
    if unquoted.plausible:
        return False, unquoted.lines[1:]
    raise DataError(
        f"{path} has rows whose field count differs from the header's, whether read with quoting (first at line "
        f"{quoted.bad_line}) or without (first at line {unquoted.bad_line}). Fix those lines: quote fields that "
        "hold the delimiter, or give every row the header's fields."
    )


def has_rows(path: str | Path) -> bool:
    """Whether a data file holds at least one example. Reads a few lines, not the whole file."""
    path = Path(path)
    extension = path.suffix.lower()
    if extension == ".parquet":
        return path.stat().st_size > 0
    with open(path, encoding="utf-8", errors="replace") as handle:
        if extension == ".json":
            start = handle.read(64).strip()
            return bool(start) and not (start.startswith("[") and start[1:].strip().startswith("]"))
        needed = 2 if extension in DELIMITED else 1  # a header, then a row
        found = 0
        for line in handle:
            found += bool(line.strip())
            if found >= needed:
                return True
    return False


def _json_lines(path: str) -> list[int]:
    with open(path, encoding="utf-8") as handle:
        return [number for number, line in enumerate(handle, start=1) if line.strip()]


def read_local_files(
    files: dict[str, str], cache_dir: str | None, quoting: str = "auto"
) -> tuple[DatasetDict, dict]:
    """The splits of `files` ({split: path}) and, per split, a function naming a row's place in its file."""
    extension = Path(next(iter(files.values()))).suffix.lower()
    locators = {}
    if extension in DELIMITED:
        quoted_by_split = {}
        for split, path in files.items():
            quoted_by_split[split], lines = decide_quoting(path, quoting)
            locators[split] = _line_locator(path, lines)
        if len(set(quoted_by_split.values())) > 1:
            raise DataError(
                "The data files are written differently: "
                + ", ".join(f"{files[s]} {'quoted' if q else 'unquoted'}" for s, q in quoted_by_split.items())
                + ". Write them the same way (or read them separately with --csv_quoting)."
            )
        quoted = next(iter(quoted_by_split.values()))
        options = {"delimiter": DELIMITED[extension]}
        if not quoted:
            options["quoting"] = csv.QUOTE_NONE
        builder = "csv"
    elif extension == ".jsonl":
        builder, options = "json", {}
        locators = {split: _line_locator(path, _json_lines(path)) for split, path in files.items()}
    elif extension == ".json":
        builder, options = "json", {}
        locators = {split: _record_locator(path) for split, path in files.items()}
    else:  # .parquet
        builder, options = "parquet", {}
        locators = {split: _record_locator(path) for split, path in files.items()}
    # One file at a time: each gets its own column types (a validation label column of strings next
    # to a numeric one in train is then reported by the label checks, with its line), and a file
    # that cannot be parsed is named alone.
    loaded = DatasetDict()
    for split, path in files.items():
        try:
            loaded[split] = datasets.load_dataset(
                builder, data_files={split: path}, cache_dir=cache_dir, **options
            )[split]
        except Exception as error:  # pandas / pyarrow parser errors have many types
            detail = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
            cause = getattr(error, "__cause__", None)
            if cause is not None and str(cause).strip():
                detail = str(cause).strip().splitlines()[-1]
            raise DataError(
                f"Could not read {path} as {extension[1:]}: {detail}. {_FORMAT_HINTS[builder]}"
            ) from None
    for split, path in files.items():
        how = "" if extension not in DELIMITED else f", {'quoted' if quoted else 'unquoted'}"
        logger.info("Read %s: %d rows%s.", path, len(loaded[split]), how)
    return loaded, locators


_FORMAT_HINTS = {
    "csv": "Check that every row has the header's number of fields (a field holding the delimiter, a quote or a "
    "newline must be quoted; --csv_quoting says how the file is written).",
    "json": "Check that each line of a .jsonl file is one JSON object, and that a .json file holds one array of "
    "objects, with the same keys and value types throughout.",
    "parquet": "Check that it is a Parquet file (written by pandas.to_parquet or pyarrow, say).",
}


def _line_locator(path: str, lines: list[int]):
    name = Path(path).name
    return lambda index: f"{name} line {lines[index]}" if index < len(lines) else f"{name} row {index + 1}"


def _record_locator(path: str):
    name = Path(path).name
    return lambda index: f"{name} record {index + 1}"


def write_jsonl(path: str | Path, rows: list[dict]) -> Path:
    """Rows as JSON Lines, via a temporary file and a rename: a crash never leaves half a file."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    temporary.replace(path)
    return path
