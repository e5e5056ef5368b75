"""Readers that never crash (issue #49, part 4): whatever bytes a data file holds, reading it for training
(data/loading.py, through data/files.py and data/labels.py) or for `recipes-lib predict` (tools/predict.py)
ends in a correct read or one paragraph of the project's error type naming the file, never a traceback
of another type and never a hang.

Hypothesis draws the files; each property is bounded (max_examples, and a deadline per example that
catches a reader that would hang). The cases the issue names outright (a UTF-16 file with a BOM,
Latin-1, a 10 MB line, a header alone, 10,000 columns) are fixed examples.
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from recipes_lib.config.arguments import DataArguments
from recipes_lib.data.loading import load_classification_data
from recipes_lib.errors import RecipeError
from recipes_workbench.tools.predict import read_input

EXTENSIONS = (".csv", ".tsv", ".json", ".jsonl")
HEADERS = {
    ".csv": b"sentence,label\n",
    ".tsv": b"sentence\tlabel\n",
    ".json": b'[{"sentence": "',
    ".jsonl": b'{"sentence": "',
}
# Bounded: each example loads a file through datasets (about 0.2 s; several under load).
FUZZ = settings(
    max_examples=30,
    deadline=timedelta(seconds=60),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


def read_for_training(path: Path, cache_dir: str):
    return load_classification_data(DataArguments(train_file=str(path), validation_file=str(path)), cache_dir)


def read_for_predict(path: Path, cache_dir: str):
    return read_input(path, cache_dir=cache_dir)


READERS = {"training": read_for_training, "predict": read_for_predict}


def outcome(reader: str, name: str, content: bytes) -> str:
    """'read', or the error's paragraph; fails on any other exception, or a message that names no file."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / name
        path.write_bytes(content)
        try:
            READERS[reader](path, str(Path(directory) / "cache"))
        except RecipeError as error:
            message = str(error)
            assert path.name in message, f"the error names no file: {message}"
            assert "\n\n" not in message.strip() and "Traceback" not in message, message
            return message
    return "read"


@pytest.mark.parametrize("reader", READERS)
@FUZZ
@given(
    extension=st.sampled_from(EXTENSIONS),
    with_header=st.booleans(),
    content=st.binary(max_size=600) | st.lists(st.sampled_from([b"\x00", b"a", b",", b"\t", b"\n", b'"', b"{"]),
                                               max_size=200).map(b"".join),
)  # fmt: skip
@example(extension=".csv", with_header=True, content=b"a\x00b,1\n\x00,0\n")
@example(extension=".jsonl", with_header=False, content=b'{"sentence": "a\x00", "label": 1}\n\x00\n')
def test_random_bytes_and_nul_bytes_are_read_or_refused_in_one_paragraph(
    reader, extension, with_header, content
):
    outcome(reader, f"data{extension}", (HEADERS[extension] if with_header else b"") + content)


def delimited(rows: list[list[str]], delimiter: str) -> str:
    text = io.StringIO()
    csv.writer(text, delimiter=delimiter, lineterminator="\n").writerows(rows)
    return text.getvalue()


TEXTS = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@pytest.mark.parametrize("reader", READERS)
@FUZZ
@given(
    extension=st.sampled_from(EXTENSIONS),
    texts=st.lists(TEXTS, min_size=1, max_size=6),
    encoding=st.sampled_from(["utf-16", "latin-1", "cp1252", "utf-8-sig"]),
)
def test_files_in_other_encodings_are_named_with_the_line_or_read(reader, extension, texts, encoding):
    rows = [{"sentence": text, "label": index % 2} for index, text in enumerate(texts)]
    if extension in (".csv", ".tsv"):
        delimiter = "," if extension == ".csv" else "\t"
        text = delimited(
            [["sentence", "label"]] + [[r["sentence"], str(r["label"])] for r in rows], delimiter
        )
    elif extension == ".json":
        text = json.dumps(rows, ensure_ascii=False)
    else:
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    try:
        content = text.encode(encoding)
    except UnicodeEncodeError:
        content = text.encode(encoding, errors="replace")
    said = outcome(reader, f"data{extension}", content)
    if encoding == "utf-16":  # always a byte order mark first
        assert "UTF-16" in said
    elif said != "read" and "not UTF-8" in said:
        assert " line " in said


# Labels of every type, nested too: a class, a score, a list of classes, or a clear refusal.
LABELS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=6,
)


@FUZZ
@given(
    extension=st.sampled_from(EXTENSIONS),
    labels=st.lists(LABELS, min_size=1, max_size=8),
)
def test_labels_of_every_type_are_mapped_or_refused_naming_the_file(extension, labels):
    rows = [{"sentence": f"text {index}", "label": label} for index, label in enumerate(labels)]
    if extension == ".jsonl":
        content = "".join(json.dumps(row) + "\n" for row in rows)
    elif extension == ".json":
        content = json.dumps(rows)
    else:  # a delimited file holds each label as its text
        shown = [[row["sentence"], row["label"] if isinstance(row["label"], str) else json.dumps(row["label"])]
                 for row in rows]  # fmt: skip
        content = delimited([["sentence", "label"], *shown], "," if extension == ".csv" else "\t")
    outcome("training", f"train{extension}", content.encode())


def test_a_utf16_file_and_a_latin1_file_are_named_with_what_to_do():
    utf16 = outcome("training", "train.csv", "sentence,label\nhello,1\nbye,0\n".encode("utf-16"))
    assert "train.csv is UTF-16 (little-endian) text" in utf16 and "Save it as UTF-8" in utf16
    latin1 = outcome("predict", "texts.tsv", "sentence\tlabel\nfine\t1\ncaf\u00e9\t0\n".encode("latin-1"))
    assert "texts.tsv line 3 is not UTF-8 text (byte 25 is 0xe9" in latin1 and "Latin-1" in latin1


def test_a_10_mb_line_is_read_as_one_text():
    long_text = "x" * (10 << 20)
    for name, content in {
        "train.csv": f"sentence,label\n{long_text},1\nshort,0\n",
        "train.tsv": f'sentence\tlabel\n"{long_text}"\t1\nshort\t0\n',
        "train.jsonl": json.dumps({"sentence": long_text, "label": 1})
        + '\n{"sentence": "short", "label": 0}\n',
    }.items():
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / name
            path.write_text(content)
            # Over the default --max_text_chars (test_values_checked): raised here, the line is read whole.
            arguments = DataArguments(
                train_file=str(path), validation_file=str(path), max_text_chars=11 << 20
            )
            data = load_classification_data(arguments, str(Path(directory) / "cache"))
            assert [len(text) for text in data.raw["train"]["sentence"]] == [len(long_text), 5], name


@pytest.mark.parametrize("extension", EXTENSIONS)
def test_a_header_alone_says_the_file_holds_no_rows(extension):
    content = {".csv": b"sentence,label\n", ".tsv": b"sentence\tlabel\n", ".json": b"[]", ".jsonl": b"\n"}[
        extension
    ]
    for reader in READERS:
        assert "holds no" in outcome(reader, f"train{extension}", content)


def wide_file(extension: str, columns: int) -> bytes:
    names = [f"c{i}" for i in range(columns)] + ["sentence", "label"]
    rows = [[*range(columns), f"text {row}", row % 2] for row in range(4)]
    if extension == ".jsonl":
        return "".join(json.dumps(dict(zip(names, row, strict=True))) + "\n" for row in rows).encode()
    return delimited([names, *rows], ",").encode()


def test_an_error_about_ten_thousand_columns_stays_one_readable_paragraph():
    names = [f"c{i}" for i in range(10_000)]
    said = outcome("training", "train.jsonl", (json.dumps(dict.fromkeys(names, "text")) + "\n").encode())
    assert "c0, c1" in said and "and 9980 more" in said and len(said) < 1_500


@pytest.mark.parametrize("extension", [".csv", ".jsonl"])
def test_a_thousand_columns_are_read(extension):
    data = read_for_training_file(f"train{extension}", wide_file(extension, 1_000))
    assert len(data.raw["train"].column_names) == 1_002 and data.text_columns == ("sentence",)


@pytest.mark.slow
@pytest.mark.parametrize("extension", [".csv", ".jsonl"])
def test_ten_thousand_columns_are_read(extension):
    data = read_for_training_file(f"train{extension}", wide_file(extension, 10_000))
    assert len(data.raw["train"].column_names) == 10_002 and data.text_columns == ("sentence",)


def read_for_training_file(name: str, content: bytes):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / name
        path.write_bytes(content)
        return read_for_training(path, str(Path(directory) / "cache"))
