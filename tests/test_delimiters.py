"""Delimited files read as they are: the delimiter from the content, whatever the extension says (issue #42)."""

from __future__ import annotations

import csv
import logging
import tracemalloc

import pytest

from recipes_lib.config.arguments import DataArguments
from recipes_lib.data.files import decide_delimiter, parse_delimiter
from recipes_lib.data.loading import load_classification_data
from recipes_lib.errors import DataError

QUESTIONS = [
    "what is the capital of france, and why",
    "who wrote hamlet",
    "how many legs, roughly, has a spider",
]
LABELS = ["LOC", "HUM", "NUM"]


def write_rows(path, delimiter: str, rows: int = 60, header=("id", "question", "label")):
    """Rows as csv.writer writes them with this delimiter (a field holding it is quoted)."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(header)
        for i in range(rows):
            writer.writerow([i, f"{QUESTIONS[i % 3]} {i}", LABELS[i % 3]])
    return path


def load(train, validation=None, **options):
    return load_classification_data(
        DataArguments(
            train_file=str(train),
            validation_file=str(validation or train),
            text_column_names="question",
            **options,
        )
    )


def test_a_tab_separated_file_named_csv_is_read_by_its_tabs_and_says_so(tmp_path, caplog):
    train = write_rows(tmp_path / "train.csv", "\t")  # texts hold commas: read as commas, rows are ragged
    with caplog.at_level(logging.INFO, logger="recipes_lib.data.files"):
        data = load(train)
    assert data.raw["train"].column_names == ["id", "question", "label"]
    assert data.raw["train"][0]["question"] == "what is the capital of france, and why 0"
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Read ")]
    assert said and "tab-separated (from its content; its .csv extension says comma)" in said[0]


def test_a_semicolon_separated_csv_with_quoted_semicolons_trains_without_a_flag(tmp_path):
    train = tmp_path / "train.csv"
    with open(train, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter=";")
        writer.writerow(["question", "label"])
        for i in range(40):
            writer.writerow([f"one; two, three {i}" if i % 4 == 0 else f"plain text {i}", LABELS[i % 3]])
    data = load(train)
    assert data.raw["train"].column_names == ["question", "label"]
    assert data.raw["train"][0]["question"] == "one; two, three 0"
    assert decide_delimiter(str(train)).delimiter == ";"


def test_a_broken_file_is_one_paragraph_naming_the_delimiter_the_header_and_the_line(tmp_path):
    train = tmp_path / "train.csv"
    lines = ["text,label"] + [
        f"a red cat, sat {i},warm" if i % 5 == 0 else f"a blue dog {i},cool" for i in range(30)
    ]
    train.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as caught:
        load_classification_data(DataArguments(train_file=str(train), validation_file=str(train)))
    message = str(caught.value)
    assert "\n" not in message
    assert "first at line 2" in message
    assert "read as comma-separated" in message and "its header as 2 fields, 'text', 'label'" in message
    assert "--delimiter" in message


def test_a_column_error_says_how_the_header_was_read_and_which_delimiter_it_holds(tmp_path):
    train = tmp_path / "train.csv"  # tabs and no comma: read as commas, every row is one field
    train.write_text(
        "id\tquestion\tlabel\n" + "".join(f"{i}\twho wrote hamlet {i}\tHUM\n" for i in range(20))
    )
    with pytest.raises(DataError) as caught:
        load(train, delimiter="comma")
    message = str(caught.value)
    assert "Text column 'question' is not in the training data" in message
    assert "read as comma-separated (from --delimiter): its header as 1 field" in message
    assert "The header holds 2 tab(s): --delimiter tab reads it so." in message


def test_delimiter_overrides_the_content(tmp_path):
    train = write_rows(tmp_path / "train.txt.csv", "|")
    assert decide_delimiter(str(train)).delimiter == ","  # no candidate fits: the extension's
    data = load(train, delimiter="pipe")
    assert data.raw["train"].column_names == ["id", "question", "label"]
    assert parse_delimiter("\\t") == "\t" and parse_delimiter(";") == ";" and parse_delimiter("auto") is None
    with pytest.raises(DataError, match="--delimiter is 'tabs'; give one character"):
        parse_delimiter("tabs")


def test_training_and_validation_files_of_different_extensions_load_when_their_columns_agree(tmp_path):
    train = write_rows(tmp_path / "train.csv", ",")
    validation = write_rows(tmp_path / "dev.tsv", "\t", rows=12)
    semicolons = write_rows(tmp_path / "dev_semicolons.csv", ";", rows=12)
    data = load(train, validation)
    assert len(data.raw["validation"]) == 12 and data.raw["validation"].column_names == [
        "id",
        "question",
        "label",
    ]
    assert len(load(validation, semicolons).raw["train"]) == 12
    other = write_rows(tmp_path / "other.tsv", "\t", rows=12, header=("id", "text", "label"))
    with pytest.raises(
        DataError, match="Text column 'question' is in train but not in validation.*other.tsv was read"
    ):
        load(train, other)


def test_the_delimiter_is_decided_on_the_first_lines_only(tmp_path):
    path = write_rows(tmp_path / "big.csv", "\t", rows=200_000)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        layout = decide_delimiter(str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert layout.delimiter == "\t" and layout.header == ("id", "question", "label")
    assert peak < size / 20, f"peak {peak / 1e6:.2f} MB for a {size / 1e6:.1f} MB file"
