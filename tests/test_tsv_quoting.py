"""How a TSV was quoted, decided from the file as real writers make it (pandas, GLUE), without a flag.

The files are written by pandas itself (`DataFrame.to_csv(sep="\\t")`), by hand the way GLUE's are
(unquoted, a '"' is text), or by hand where no single writer explains them (the run must ask).
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pandas as pd
import pytest

from recipes_lib.config.arguments import DataArguments
from recipes_lib.data.files import decide_quoting
from recipes_lib.data.loading import load_classification_data
from recipes_lib.errors import DataError

# The shape of a held-out support ticket: the only field that needs quotes holds quoted words.
PENDING = 'Can you help me? The order page says "Pending", since Monday, and "Shipped" never came.'
TICKETS = [
    (PENDING, "shipping"),
    ("Reset my password please", "account"),
    ("I was charged twice for order 7", "billing"),
    ("Where is my parcel", "shipping"),
    ("Change the e-mail on my account", "account"),
    ("Refund the second charge", "billing"),
]


def texts_read(path: Path, column: str = "text") -> list[str]:
    """Every text the recipes would train on, both splits, in file order."""
    data = load_classification_data(DataArguments(train_file=str(path), validation_file=str(path)))
    return list(data.raw["train"][column])


def pandas_tsv(path: Path, rows, **to_csv) -> Path:
    pd.DataFrame(rows, columns=["text", "label"]).to_csv(path, sep="\t", index=False, **to_csv)
    return path


def test_pandas_quotes_only_the_field_with_doubled_quotes_and_it_is_read_quoted_without_a_flag(
    tmp_path, caplog
):
    train = pandas_tsv(tmp_path / "train.tsv", TICKETS)
    line = train.read_text().splitlines()[1]
    assert (
        line
        == '"Can you help me? The order page says ""Pending"", since Monday, and ""Shipped"" never came."\tshipping'
    )
    # Read unquoted the file has the header's width too: only the way the quotes are written decides.
    assert all(len(row.split("\t")) == 2 for row in train.read_text().splitlines())
    with caplog.at_level(logging.INFO, logger="recipes_lib"):
        assert texts_read(train) == [text for text, _ in TICKETS]
    decisions = [r.getMessage() for r in caplog.records if ": read " in r.getMessage()]
    assert decisions and all("read quoted (as csv and pandas write it)" in message for message in decisions)
    assert "fields enclosed in '\"': 1 (the first at line 2)" in decisions[0]


PANDAS_WRITERS = pytest.mark.parametrize(
    "to_csv",
    [
        {},
        {"quoting": csv.QUOTE_MINIMAL},
        {"quoting": csv.QUOTE_ALL},  # every field quoted, needed or not
        {"quoting": csv.QUOTE_NONNUMERIC},  # strings quoted, numbers bare
        {"lineterminator": "\r\n"},  # as pandas writes on Windows
    ],
    ids=["default", "quote_minimal", "quote_all", "quote_nonnumeric", "crlf"],
)


@PANDAS_WRITERS
def test_pandas_tsvs_whose_only_quoting_is_doubled_quotes_read_back_exactly(tmp_path, to_csv):
    # No tab or newline in any text: read unquoted, every row still has the header's width.
    texts = [PENDING, "plain words", '"Urgent": the whole "title" in quotes', "more plain words"]
    rows = [
        (text, index % 2) for index, text in enumerate(texts)
    ]  # numeric labels: NONNUMERIC leaves them bare
    train = pandas_tsv(tmp_path / "train.tsv", rows, **to_csv)
    assert decide_quoting(str(train))[0] is True
    assert texts_read(train) == texts


@PANDAS_WRITERS
def test_pandas_tsvs_with_doubled_quotes_tabs_and_newlines_inside_texts_read_back_exactly(tmp_path, to_csv):
    texts = [
        PENDING,
        'two "quoted" words\tafter a tab',
        "a ticket pasted\nover two lines",
        "a ticket pasted on Windows\r\nover two lines",
        "plain words",
        'tab\tnewline\nand "quotes" together',
    ]
    rows = [(text, index % 2) for index, text in enumerate(texts)]
    train = pandas_tsv(tmp_path / "train.tsv", rows, **to_csv)
    assert decide_quoting(str(train))[0] is True
    assert texts_read(train) == texts


def test_a_pandas_tsv_that_quotes_needless_fields_only_is_read_quoted(tmp_path, caplog):
    # QUOTE_ALL with texts that hold no quote: read unquoted, every text would keep its quotes.
    train = pandas_tsv(tmp_path / "train.tsv", TICKETS[1:], quoting=csv.QUOTE_ALL)
    with caplog.at_level(logging.INFO, logger="recipes_lib"):
        assert texts_read(train) == [text for text, _ in TICKETS[1:]]
    assert any("read quoted" in r.getMessage() for r in caplog.records)


def glue_tsv(path: Path, sentences: list[str]) -> Path:
    """As GLUE's files are: no quoting, a '"' is part of the sentence."""
    lines = ["sentence\tlabel", *(f"{sentence}\t{index % 2}" for index, sentence in enumerate(sentences))]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_glue_style_stray_quotes_are_text(tmp_path, caplog):
    sentences = [
        '" the film opens with a quote that never closes',  # starts with '"', not closed
        'the actor says " ok " and leaves',
        'it \'s a " small " film',
        "a plain sentence",
    ]
    train = glue_tsv(tmp_path / "train.tsv", sentences)
    with caplog.at_level(logging.INFO, logger="recipes_lib"):
        assert texts_read(train, "sentence") == sentences
    assert any("read unquoted" in r.getMessage() for r in caplog.records)


def test_glue_style_a_sentence_in_quotes_stays_text_when_another_has_a_bare_quote(tmp_path, caplog):
    # '"Yes"' alone could be quoting; the bare '"' on line 3 shows the writer did not quote, and
    # nothing in '"Yes"' (no doubled quote, tab or newline) needs quoting to explain it.
    sentences = ['"Yes"', 'he said "no" twice', "a plain sentence", "another one"]
    train = glue_tsv(tmp_path / "train.tsv", sentences)
    with caplog.at_level(logging.INFO, logger="recipes_lib"):
        assert decide_quoting(str(train))[0] is False
        assert texts_read(train, "sentence") == sentences
    message = next(r.getMessage() for r in caplog.records if "read unquoted" in r.getMessage())
    assert "line 3 has a '\"' inside a text" in message and "the first at line 2" in message


def test_a_file_no_single_writer_explains_stops_and_asks_naming_both_lines(tmp_path):
    # Line 2 is quoted as pandas writes (doubled quotes inside); line 4 has a bare '"', which pandas
    # never writes. Each reading fits the header; the evidence conflicts, so the run asks.
    train = tmp_path / "train.tsv"
    train.write_text('text\tlabel\n"a ""b"" c"\t0\nplain\t1\nx "y" z\t0\nmore\t1\n')
    with pytest.raises(
        DataError, match=r"Line 2 has a field in quotes.*line 4 has a '\"' inside a text"
    ) as error:
        decide_quoting(str(train))
    assert "--csv_quoting quoted or --csv_quoting none" in str(error.value)
    assert decide_quoting(str(train), "quoted")[0] is True
    assert decide_quoting(str(train), "none")[0] is False


@pytest.mark.parametrize("quoted", [True, False], ids=["quoted", "unquoted"])
def test_a_copy_without_some_rows_keeps_the_other_records_as_written(tmp_path, quoted):
    """distill's labelled copy of --train_file: multi-line fields, blank lines and a line separator
    inside a text (which str.splitlines would split, the csv module not) stay as written."""
    from recipes_lib.data.files import copy_delimited_rows

    if quoted:
        records = [
            "text\tlabel\n",
            '"one\ntwo"\twarm\n',
            "\n",
            "b\u2028c\tcool\n",
            '"say ""hi"""\twarm\n',
            "last\tcool\n",
        ]
    else:
        records = [
            "text\tlabel\n",
            'a "quote\twarm\n',
            "\n",
            "b\u2028c\tcool\n",
            'say "hi\twarm\n',
            "last\tcool\n",
        ]
    source, copy = tmp_path / "train.tsv", tmp_path / "copy" / "train.tsv"
    source.write_text("".join(records), encoding="utf-8")
    copy.parent.mkdir()
    copy_delimited_rows(str(source), str(copy), {0, 3}, quoted)
    # rows 0..3 are records 1, 3, 4, 5 (the blank line goes with row 0)
    assert copy.read_text(encoding="utf-8") == records[0] + records[3] + records[4]
    assert len(decide_quoting(str(copy), "quoted" if quoted else "none")[1]) == 2


def test_each_file_decides_its_own_quoting_whatever_the_file_before_it_had(tmp_path):
    """A quote-free training file must not force its reading on a validation file that quotes fields."""
    train, validation = tmp_path / "train.csv", tmp_path / "validation.csv"
    train.write_text("text,label\nhello there,a\nbye now,b\n")
    validation.write_text('text,label\n"hi, you",a\n"so long, friend",b\n')
    data = load_classification_data(DataArguments(train_file=str(train), validation_file=str(validation)))
    assert list(data.raw["validation"]["text"]) == ["hi, you", "so long, friend"]
