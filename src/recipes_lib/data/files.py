"""Local data files: CSV and TSV (quoted or not), JSON, JSON Lines and Parquet, read as their writer meant.

A delimited file's delimiter comes from its first lines' content; it is read both ways, quoted and
GLUE's unquoted, streaming, and one plausible reading decides (two that disagree: data/quoting.py, or
the run asks for `--csv_quoting`), never a guess. docs/data-and-tasks.md, "Where the data comes from", says how.
"""

from __future__ import annotations

import codecs
import csv
import itertools
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from datasets import DatasetDict

from recipes_lib.config.arguments import DataArguments
from recipes_lib.errors import DataError
from recipes_lib.whole_files import written_whole

logger = logging.getLogger(__name__)

# The delimited extensions, and the delimiter each usually means (a tie's fallback: the content decides).
# Public sentence-pair and similarity sets ship tab-separated `.txt` (MRPC, SICK): read like a .tsv.
DELIMITED = {".csv": ",", ".tsv": "\t", ".txt": "\t"}
_CHUNK = 1 << 16  # bytes read at a time when looking for a '"'
# The delimiters looked for, in the order a tie falls back to after the extension's own.
DELIMITER_NAMES = {"tab": "\t", "comma": ",", "semicolon": ";", "pipe": "|"}
SNIFFED = ("\t", ",", ";")
_SAMPLE_LINES, _SAMPLE_CHARS = 200, 1 << 20  # what the delimiter is decided on: the first lines only
_FIELD_LIMIT = 1 << 30  # characters in one field: a whole book, as a text column may hold
_BYTE_ORDER_MARKS = {b"\xff\xfe": "UTF-16 (little-endian)", b"\xfe\xff": "UTF-16 (big-endian)"}


def delimiter_name(delimiter: str) -> str:
    """'tab', 'comma', 'semicolon', 'pipe', or the character in quotes."""
    return next((name for name, value in DELIMITER_NAMES.items() if value == delimiter), repr(delimiter))


def parse_delimiter(value: str | None) -> str | None:
    """The character --delimiter names ('tab', '\\t', ',', 'comma', ';', ...), None for auto, or a DataError."""
    if value is None or value == "auto":
        return None
    found = DELIMITER_NAMES.get(value.lower(), "\t" if value in ("\\t", "\t") else value)
    if len(found) != 1 or found in ('"', "\n", "\r"):
        raise DataError(
            f"--delimiter is '{value}'; give one character (',' or ';'), a name ({', '.join(DELIMITER_NAMES)}), "
            "or auto (the default: decided from the file's first lines)."
        )
    return found


# A header field that reads as data: a number or numbers joined by , ; | ('27', '2,27'), or a sentence.
_NUMBERS = re.compile(r"^\s*-?\d+(\.\d+)?(\s*[,;|]\s*-?\d+(\.\d+)?)*\s*$")


def data_like_fields(header: tuple[str, ...]) -> list[str]:
    """The header's fields that read as a data row's (a number, or a sentence: four words or more, or over
    30 characters), each described ("'27' (a number)"): the file likely has no header."""
    found = []
    for name in header:
        if _NUMBERS.match(name):
            found.append(f"'{name}' (a number)")
        elif len(name.split()) >= 4 or (len(name) > 30 and " " in name.strip()):
            found.append(f"'{name[:40]}{'...' * (len(name) > 40)}' (a sentence)")
    return found


def no_header_note(header: tuple[str, ...]) -> str:
    """One sentence for a header that reads as a data row, naming --column_names; empty for a header of names."""
    found = data_like_fields(header)
    if not found:
        return ""
    example = ["text", "labels", "id"] + [f"column{number}" for number in range(4, len(header) + 1)]
    return (
        f" Its first line reads as a data row, not a header of column names: {', '.join(found[:3])}. If the "
        f"file has no header, give its {len(header)} column names with --column_names (e.g. --column_names "
        f"{','.join(example[: len(header)])})."
    )


@dataclass(frozen=True)
class Layout:
    """How a delimited file's fields are separated, and how its header reads that way."""

    path: str
    delimiter: str
    header: tuple[str, ...]
    source: str  # "its content", "--delimiter", "its extension" (nothing decided it)

    def describe(self) -> str:
        """'tab-separated (from its content; the .csv extension says comma)'."""
        expected = DELIMITED.get(Path(self.path).suffix.lower())
        said = f"{delimiter_name(self.delimiter)}-separated (from {self.source}"
        if self.source == "its content" and expected not in (None, self.delimiter):
            said += f"; its {Path(self.path).suffix} extension says {delimiter_name(expected)}"
        return said + ")"

    def header_note(self) -> str:
        """One sentence on how the header was read, and which other delimiter it holds, for a column error."""
        fields = ", ".join(f"'{name}'" for name in self.header) or "nothing"
        note = (
            f"{Path(self.path).name} was read as {self.describe()}: its header as "
            f"{len(self.header)} field{'s' * (len(self.header) != 1)}, {fields}."
        )
        line = self.delimiter.join(self.header)
        other = next((d for d in SNIFFED if d != self.delimiter and d in line), None)
        if other is not None:
            note += (
                f" The header holds {line.count(other)} {delimiter_name(other)}(s): "
                f"--delimiter {delimiter_name(other)} reads it so."
            )
        return note + no_header_note(self.header)


def _sample_records(path: str, delimiter: str, quoted: bool) -> list[list[str]]:
    """The complete records among the file's first lines (a record cut by the sample's end is left out)."""
    lines = []
    with _open(path) as handle:
        size = 0
        for line in handle:
            lines.append(line)
            size += len(line)
            if len(lines) >= _SAMPLE_LINES or size >= _SAMPLE_CHARS:
                break
        whole = next(handle, None) is None
    records = []
    for record, _ in _records(iter(lines), delimiter, quoted):
        if record is None:
            break
        records.append(record)
    return records if whole or len(records) < 2 else records[:-1]


def _fits(path: str, delimiter: str) -> tuple[int, bool]:
    """(the header's field count, whether every sampled row has it) read with this delimiter, quoted or not."""
    width, fits = 0, False
    for quoted in (True, False):
        records = _sample_records(path, delimiter, quoted)
        if records:
            width = max(width, len(records[0]))
            fits = fits or (len(records[0]) > 1 and all(len(r) == len(records[0]) for r in records))
    return width, fits


def decide_delimiter(path: str, requested: str | None = None) -> Layout:
    """The file's delimiter: `requested` (a character, from --delimiter) or decided from its first lines
    (docs/data-and-tasks.md). When none fits (a one-column file, or a broken one), the extension's is used,
    or the one that splits the header most, and the full reading that follows names the bad line."""
    expected = DELIMITED.get(Path(path).suffix.lower(), ",")
    if requested is not None:
        delimiter, source = requested, "--delimiter"
    else:
        widths, fitting = {}, []
        for candidate in sorted(SNIFFED, key=lambda d: d != expected):
            widths[candidate], fits = _fits(path, candidate)
            if fits:
                fitting.append(candidate)
        if fitting:
            delimiter, source = fitting[0], "its content"
        elif widths[expected] > 1 or max(widths.values()) <= 1:
            delimiter, source = expected, "its extension"
        else:
            delimiter, source = max(widths, key=widths.get), "its header"
    header = next(iter(_sample_records(path, delimiter, True) or _sample_records(path, delimiter, False)), [])
    return Layout(path, delimiter, tuple(header), source)


@dataclass
class Reading:
    """One way of reading a delimited file, tallied as it streams (no record kept), up to its first bad record."""

    width: int | None = None  # the header's field count (None: no record at all)
    count: int = 0  # records read, the header included, before the first bad one
    bad_line: int | None = None  # first record whose field count differs from the header's, or a stray quote
    bad_width: int | None = None  # that record's field count (None: a stray quote)

    @property
    def plausible(self) -> bool:
        return self.bad_line is None and self.count > 0

    def add(self, record: list[str] | None, line: int) -> bool:
        """Count one record (None: the csv module stopped at a stray quote there); whether reading goes on."""
        if record is None or (self.width is not None and len(record) != self.width):
            self.bad_line, self.bad_width = line, None if record is None else len(record)
            return False
        if self.width is None:
            self.width = len(record)
        self.count += 1
        return True


def _records(handle, delimiter: str, quoted: bool) -> Iterator[tuple[list[str] | None, int]]:
    """(record, the line it starts on) for each record; blank lines are none (for datasets neither).

    Quoted is read strictly: a quote must open and close a whole field, as writers do. A stray quote
    ends the records with (None, its record's line): no quoting writer made that file.
    """
    # The csv module refuses a field over 128 KiB as if it were malformed; a long document is a text
    # like any other (datasets reads it, and max_seq_length or --long_text decides what is kept).
    csv.field_size_limit(max(csv.field_size_limit(), _FIELD_LIMIT))
    options = {"quoting": csv.QUOTE_MINIMAL, "strict": True} if quoted else {"quoting": csv.QUOTE_NONE}
    reader = csv.reader(handle, delimiter=delimiter, **options)
    start = 1
    try:
        for record in reader:
            if record:
                yield record, start
            start = reader.line_num + 1
    except csv.Error:
        yield None, start


def _open(path: str):
    return open(path, newline="", encoding="utf-8-sig")


def copy_delimited_rows(
    path: str, target: str, skipped: set[int], quoted: bool, delimiter: str | None = None
) -> None:
    """Copy a CSV/TSV without the data rows `skipped` (row indices; the header is no row), every kept
    record's lines as written, a line at a time (a blank line goes with the record before it).
    The delimiter is decided from the content unless given."""
    delimiter = decide_delimiter(path, delimiter).delimiter
    with (
        _open(path) as records,
        open(path, encoding="utf-8", newline="") as lines,
        written_whole(target, newline="") as copy,
    ):
        starts = (line for _, line in _records(records, delimiter, quoted))
        next_start, record = next(starts, None), -1  # record 0 is the header
        for number, line in enumerate(lines, start=1):
            if number == next_start:
                record, next_start = record + 1, next(starts, None)
            if record == 0 or (record > 0 and record - 1 not in skipped):
                copy.write(line)


def read_delimited(path: str, delimiter: str, quoted: bool) -> Reading:
    """Read as quoted (strictly: a quote must open and close a whole field, as writers do) or unquoted."""
    reading = Reading()
    with _open(path) as handle:
        for record, line in _records(handle, delimiter, quoted):
            if not reading.add(record, line):
                break
    return reading


def _holds_quotes(path: str) -> bool:
    """Whether the file has a '"' anywhere (a byte search, much faster than reading its records)."""
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK * 16):
            if b'"' in chunk:
                return True
    return False


def _compare_readings(path: str, delimiter: str) -> tuple[Reading, Reading, int | None]:
    """(the quoted reading, the unquoted one, the quoted reading's line where they first give different
    records, or None: the same records), in one pass, side by side (each on its own handle). Without a
    '"' in the file the two are the same reading, read once. Where one ends first, they differ at the
    last record both gave."""
    if not _holds_quotes(path):
        reading = read_delimited(path, delimiter, quoted=False)
        return reading, reading, None
    quoted, unquoted = Reading(), Reading()
    differs_line = common_line = None
    with _open(path) as quoted_handle, _open(path) as unquoted_handle:
        quoted_records = _records(quoted_handle, delimiter, quoted=True)
        unquoted_records = _records(unquoted_handle, delimiter, quoted=False)
        quoted_going = unquoted_going = True
        while quoted_going or unquoted_going:
            quoted_item = next(quoted_records, None) if quoted_going else None
            unquoted_item = next(unquoted_records, None) if unquoted_going else None
            quoted_going = quoted_item is not None and quoted.add(*quoted_item)
            unquoted_going = unquoted_item is not None and unquoted.add(*unquoted_item)
            if differs_line is not None or (quoted_item is None and unquoted_item is None):
                continue  # found already, or both ended together, every record the same
            if quoted_item is None or unquoted_item is None:
                differs_line = common_line
            elif quoted_item[0] != unquoted_item[0]:
                differs_line = quoted_item[1]
            else:
                common_line = quoted_item[1]
    return quoted, unquoted, differs_line


@dataclass
class RecordLines:
    """The line each data row of a file starts on, found by reading the file again when an error asks.

    A delimited file's rows are its records after the header (`delimiter` given); a JSON Lines
    file's (`delimiter` None) are its non-blank lines. len(): the rows (counted when asked, unless given).
    """

    path: str
    delimiter: str | None
    quoted: bool = False
    rows: int | None = None
    header: bool = True
    _found: dict[int, int] = field(default_factory=dict, repr=False)

    def _starts(self, handle) -> Iterator[int]:
        if self.delimiter is None:
            return (number for number, line in enumerate(handle, start=1) if line.strip())
        records = _records(handle, self.delimiter, self.quoted)
        return itertools.islice((line for _, line in records), int(self.header), None)  # a header is record 0

    def _read(self):
        return _open(self.path) if self.delimiter is not None else open(self.path, encoding="utf-8")

    def __len__(self) -> int:
        if self.rows is None:
            with self._read() as handle:
                self.rows = sum(1 for _ in self._starts(handle))
        return self.rows

    def __getitem__(self, index: int) -> int:
        if not 0 <= index < len(self):
            raise IndexError(index)
        if index not in self._found:
            with self._read() as handle:
                self._found[index] = next(itertools.islice(self._starts(handle), index, None))
        return self._found[index]


def decide_quoting(
    path: str,
    requested: str = "auto",
    delimiter: str | None = None,
    layout: Layout | None = None,
    header: bool = True,
) -> tuple[bool, RecordLines]:
    """(whether the file is quoted, the line each data row starts on), or a DataError.

    `delimiter`: a character (from --delimiter), or None to decide it from the content; or the
    `layout` already decided. `header` False (--column_names): the first record is a row too; it
    still sets the width every other record must have."""
    layout = layout or decide_delimiter(path, delimiter)
    delimiter = layout.delimiter
    if requested != "auto":
        quoted = requested == "quoted"
        reading = read_delimited(path, delimiter, quoted=quoted)
        if reading.bad_line is not None:
            width = (
                f"the header's {reading.width} fields" if reading.width is not None else "a readable header"
            )
            note = layout.header_note()
            if not header:  # --column_names: no header to describe, and no option to suggest
                width, note = f"the {reading.width} fields --column_names names", f"({layout.describe()})"
            raise DataError(
                f"{path} line {reading.bad_line} does not have {width} ({_bad_width(reading)[2:]}) when "
                f"read with --csv_quoting {requested}. {note} Fix that line, or try --csv_quoting "
                f"{'none' if requested == 'quoted' else 'quoted'}{_other_delimiters(layout)}."
            )
        return quoted, RecordLines(path, delimiter, quoted, reading.count - header, header)
    quoted, unquoted, differs_line = _compare_readings(path, delimiter)
    if quoted.plausible and unquoted.plausible and differs_line is not None:
        # Split without quotes, a quoted text with a tab and a newline can still give two rows of the
        # right width, and a text may itself be in quotes: the way each '"' is written decides.
        from recipes_lib.data.quoting import weigh_quotes  # loaded only for such a file

        is_quoted = weigh_quotes(path, delimiter, differs_line)
    elif quoted.plausible:
        if not unquoted.plausible:
            logger.info(
                "%s: read quoted (as csv and pandas write it); read unquoted, its line %s would not have "
                "the header's %s fields.",
                path,
                unquoted.bad_line,
                quoted.width,
            )
        is_quoted = True
    elif unquoted.plausible:
        logger.info(
            "%s: read unquoted (GLUE-style, a '\"' is text); read quoted, its line %s would have a '\"' "
            "that does not open and close a whole field, or not the header's %s fields.",
            path,
            quoted.bad_line,
            unquoted.width,
        )
        is_quoted = False
    elif not header:
        raise DataError(_width_error_without_header(layout, quoted, unquoted))
    else:
        raise DataError(
            f"{path} has rows whose field count differs from the header's, whether read with quoting (first at line "
            f"{quoted.bad_line}{_bad_width(quoted)}) or without (first at line {unquoted.bad_line}"
            f"{_bad_width(unquoted)}). {layout.header_note()}{_no_fit(layout)} Fix those lines: "
            f"quote fields that hold the delimiter, or give every row the header's fields{_other_delimiters(layout)}."
        )
    rows = (quoted if is_quoted else unquoted).count - header  # a header is no row
    return is_quoted, RecordLines(path, delimiter, is_quoted, rows, header)


def _bad_width(reading: Reading) -> str:
    """', 9 fields' for the first bad record, or ', a stray quote' where the csv module stopped."""
    return ", a stray quote" if reading.bad_width is None else f", {reading.bad_width} fields"


def _width_error_without_header(layout: Layout, quoted: Reading, unquoted: Reading) -> str:
    """Rows of another width in a file read with --column_names: the first offending line leads (the names
    were given, so the cure is the rows, not the option)."""
    first = min((quoted, unquoted), key=lambda reading: (reading.bad_width is None, reading.bad_line))
    found = (
        f"line {first.bad_line} is the first row with {first.bad_width} fields"
        if first.bad_width is not None
        else f"line {first.bad_line} has a stray quote"
    )
    other = unquoted if first is quoted else quoted
    return (
        f"{layout.path}: {found}, where --column_names names {quoted.width or unquoted.width} fields, as many as "
        f"its first row has ({layout.describe()}; read {'without' if first is unquoted else 'with'} quoting; "
        f"{'with' if first is unquoted else 'without'}, the first bad line is {other.bad_line}{_bad_width(other)}). "
        "Fix those lines: quote fields that hold the delimiter, or give every row the same fields"
        f"{_other_delimiters(layout)}."
    )


def _no_fit(layout: Layout) -> str:
    if layout.source in ("its content", "--delimiter"):
        return ""
    names = ", ".join(delimiter_name(d) for d in SNIFFED)
    return f" None of {names} gives the header two or more fields and its first rows as many."


def _other_delimiters(layout: Layout) -> str:
    if layout.source == "--delimiter":
        return "; or leave --delimiter out to decide it from the file"
    return "; or name the delimiter with --delimiter"


def has_rows(path: str | Path, header: bool = True) -> bool:
    """Whether a data file holds at least one example (below its header, if it has one). Reads a few lines."""
    path = Path(path)
    extension = path.suffix.lower()
    if extension == ".parquet":
        return path.stat().st_size > 0
    with open(path, encoding="utf-8", errors="replace") as handle:
        if extension == ".json":
            start = handle.read(64).strip()
            return bool(start) and not (start.startswith("[") and start[1:].strip().startswith("]"))
        needed = 1 + (header and extension in DELIMITED)  # a header, then a row
        found = 0
        for line in handle:
            found += bool(line.strip())
            if found >= needed:
                return True
    return False


def check_utf8(path: str) -> None:
    """A DataError naming the line and byte where a text file stops being UTF-8 (a UTF-8 BOM is fine), read
    in constant memory: the csv module and datasets would stop at a position inside some buffer, or
    (pyarrow's JSON reader) not stop at all."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    with open(path, "rb") as handle:
        start = handle.read(2)
        if start in _BYTE_ORDER_MARKS:
            raise DataError(
                f"{path} is {_BYTE_ORDER_MARKS[start]} text (it starts with that byte order mark); data files are "
                "read as UTF-8. Save it as UTF-8 (in a spreadsheet: 'CSV UTF-8'; or `iconv -f UTF-16 -t UTF-8`)."
            )
        handle.seek(0)
        line, offset = 1, 0
        while chunk := handle.read(_CHUNK):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                # error.object: the bytes the decoder held back from the last chunk (no line end), then this one.
                held, bad = error.object, error.object[error.start : error.start + 4]
                line += held.count(b"\n", 0, error.start)
                raise DataError(
                    f"{path} line {line} is not UTF-8 text (byte {offset + error.start - (len(held) - len(chunk))} "
                    f"is 0x{bad[0]:02x}, in "
                    f"{bad!r}); data files are read as UTF-8. It may be Latin-1 or Windows-1252: save it as UTF-8 "
                    "(`iconv -f latin1 -t UTF-8 FILE`, or 'CSV UTF-8' in a spreadsheet)."
                ) from None
            line, offset = line + chunk.count(b"\n"), offset + len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise DataError(
                f"{path} line {line} ends in the middle of a UTF-8 character: the file was cut short, or is not "
                "UTF-8. Save it again as UTF-8."
            ) from None


def read_local_files(
    files: dict[str, str],
    cache_dir: str | None,
    quoting: str = "auto",
    delimiter: str | None = None,
    column_names: list[str] | None = None,
) -> tuple[DatasetDict, dict]:
    """The splits of `files` ({split: path}), each read in its own format, and per split a function naming
    a row's place in its file. `delimiter` (--delimiter's character) and `column_names` (--column_names:
    no header) apply to every delimited file."""
    locators, how, loaded = {}, {}, DatasetDict()
    for split, path in files.items():
        extension = Path(path).suffix.lower()
        if extension != ".parquet":
            check_utf8(path)
        if extension in DELIMITED:
            layout = decide_delimiter(path, delimiter)
            _check_column_names(layout, column_names)
            quoted, lines = decide_quoting(path, quoting, layout=layout, header=column_names is None)
            locators[split] = _line_locator(path, lines)
            builder, options = "csv", {"delimiter": layout.delimiter}
            if column_names is not None:
                options["column_names"] = column_names
            elif data_like_fields(layout.header):
                logger.warning(
                    "%s was read with its first line as the header.%s", path, no_header_note(layout.header)
                )
            if not quoted:
                options["quoting"] = csv.QUOTE_NONE
            written = ("quoted" if quoted else "unquoted") if _holds_quotes(path) else "no quotes"
            how[split] = f", {layout.describe()}, {written}"
        elif extension == ".jsonl":
            builder, options = "json", {}
            locators[split] = _line_locator(path, RecordLines(path, None))
        else:  # .json, .parquet
            builder, options = ("json" if extension == ".json" else "parquet"), {}
            locators[split] = lambda index, name=Path(path).name: f"{name} record {index + 1}"
        # One file at a time: each gets its own column types (a validation label column of strings next
        # to a numeric one in train is then reported by the label checks, with its line), and a file
        # that cannot be parsed is named alone.
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
                f"Could not read {path} as {extension[1:]}{how.get(split, '')}: {detail}. {_FORMAT_HINTS[builder]}"
            ) from None
    for split, path in files.items():
        columns = ", ".join(loaded[split].column_names)
        logger.info("Read %s: %d rows%s; columns: %s.", path, len(loaded[split]), how.get(split, ""), columns)
    return loaded, locators


def _check_column_names(layout: Layout, column_names: list[str] | None) -> None:
    """--column_names names every field of a header-less file, once each."""
    if column_names is None:
        return
    width = len(layout.header)  # the first record's fields: with no header, a data row's
    if len(column_names) != width or len(set(column_names)) != width:
        raise DataError(
            f"--column_names gives {len(column_names)} name(s) ({', '.join(column_names)}), but the rows of "
            f"{Path(layout.path).name} have {width} fields ({layout.describe()}). Give one distinct name per field, "
            "in order, comma-separated."
        )


def column_note(path: str | None, delimiter: str | None = None) -> str:
    """For an error about a column: how a delimited file's header was read (empty for other formats)."""
    if path is None or Path(path).suffix.lower() not in DELIMITED:
        return ""
    return " " + decide_delimiter(path, delimiter).header_note()


def split_column_note(data_args: DataArguments, split: str) -> str:
    """column_note for a split's local file (empty for a Hub dataset)."""
    if data_args.column_names is not None:
        return ""  # the files have no header to describe: the columns are the ones given
    path = getattr(data_args, f"{split}_file", None) if data_args.train_file is not None else None
    return column_note(path, parse_delimiter(data_args.delimiter))


_FORMAT_HINTS = {
    "csv": "Check that every row has the header's number of fields (a field holding the delimiter, a quote or a "
    "newline must be quoted; --csv_quoting says how the file is written).",
    "json": "Check that each line of a .jsonl file is one JSON object, and that a .json file holds one array of "
    "objects, with the same keys and value types throughout.",
    "parquet": "Check that it is a Parquet file (written by pandas.to_parquet or pyarrow, say).",
}


def _line_locator(path: str, lines: RecordLines) -> Callable[[int], str]:
    """'train.tsv line 17' for a row: its lines are looked up only now, when an error names one."""
    name = Path(path).name
    return lambda index: f"{name} line {lines[index]}" if index < len(lines) else f"{name} row {index + 1}"


def write_jsonl(path: str | Path, rows: list[dict]) -> Path:
    """Rows as JSON Lines, whole or not at all (whole_files.written_whole): a crash never leaves half a file."""
    path = Path(path)
    with written_whole(path) as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
