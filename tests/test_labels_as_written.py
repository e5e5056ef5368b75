"""Labels as published (issue #50 item 5): a GoEmotions-like TSV with no header, labels as comma-joined
class ids ("2,5"), a third column of unique comment ids, and a labels.txt of the class names.

Each case is what a new user hit: the first row taken for the header with no word; "2,5" read as one
class among hundreds; ids sorted as strings; no way to name them; an id column trained on as a second text.
"""

from __future__ import annotations

import csv
import logging
import random
from pathlib import Path

import pytest

from recipes_lib.config.arguments import DataArguments
from recipes_lib.config.tasks import MULTI_LABEL, SINGLE_LABEL
from recipes_lib.data.loading import load_classification_data
from recipes_lib.errors import ConfigError, DataError
from tests.helpers.data import NOISE, write_csv, write_jsonl

# Twelve classes, so that string order ("0, 1, 10, 11, 2") and number order differ.
NAMES = ["admiration", "amusement", "anger", "annoyance", "approval", "caring",
         "confusion", "curiosity", "desire", "disappointment", "disapproval", "disgust"]  # fmt: skip


def comment_rows(count: int, seed: int) -> list[tuple[str, str, str]]:
    """(comment, its class ids joined by ',', a unique comment id): one class in 3 of 4 rows, two in the rest."""
    rng = random.Random(seed)
    rows = []
    for number in range(count):
        ids = rng.sample(range(len(NAMES)), 1 if rng.random() < 0.75 else 2)
        words = rng.sample(NOISE, rng.randint(4, 8)) + [NAMES[i] for i in ids]
        rows.append((" ".join(words), ",".join(map(str, sorted(ids))), f"e{seed}x{number:05x}"))
    return rows


def write_tsv(path: Path, rows) -> Path:
    """Tab-separated, no header: as the files were published."""
    with open(path, "w", newline="") as handle:
        csv.writer(handle, delimiter="\t").writerows(rows)
    return path


@pytest.fixture
def published(tmp_path):
    """train.tsv and dev.tsv with no header, and labels.txt: one class name per line, id 0 first."""
    train = comment_rows(120, seed=1)
    for i in range(len(NAMES)):  # every class also alone in some row (and so in the training data)
        train[i] = (train[i][0], str(i), train[i][2])
    files = {
        "train": write_tsv(tmp_path / "train.tsv", train),
        "validation": write_tsv(tmp_path / "dev.tsv", comment_rows(40, seed=2)),
    }
    (tmp_path / "labels.txt").write_text("\n".join(NAMES) + "\n")
    return files, tmp_path / "labels.txt", train


def load(files: dict[str, Path], **options):
    return load_classification_data(
        DataArguments(train_file=str(files["train"]), validation_file=str(files["validation"]), **options)
    )


def test_a_header_less_file_is_said_and_named_with_column_names(published, caplog):
    files, _, train = published
    with caplog.at_level(logging.WARNING, logger="recipes_lib"), pytest.raises(DataError) as error:
        load(files, label_column_name="labels")
    message = str(error.value)  # the columns are named by the first row: none is 'labels' or a clear text
    assert "Cannot tell which columns of" in message and "hold the text" in message
    assert "Its first line reads as a data row, not a header of column names" in message
    assert f"'{train[0][1]}' (a number)" in message and "(a sentence)" in message
    assert "--column_names text,labels,id" in message
    assert (
        "first line as the header" in caplog.text and "--column_names" in caplog.text
    )  # said at reading too

    data = load(files, column_names="text,labels,id", label_column_name="labels")
    assert len(data.raw["train"]) == len(train)  # the first line is a row, not lost as a header
    assert data.raw["train"][0]["text"] == train[0][0]
    with pytest.raises(DataError, match="--column_names gives 2 name"):
        load(files, column_names="text,labels", label_column_name="labels")


def test_comma_joined_ids_are_multi_label_in_number_order_and_named_by_the_names_file(published, caplog):
    files, names_file, train = published
    options = {"column_names": "text,labels,id", "label_column_name": "labels"}
    with caplog.at_level(logging.WARNING, logger="recipes_lib"):
        data = load(files, **options)
    assert data.labels.problem_type == MULTI_LABEL and data.labels.delimiter == ","
    assert "read as lists of classes joined by ','" in caplog.text  # said, with the option that says it
    assert "--label_delimiter ','" in caplog.text
    assert data.labels.names == [str(i) for i in range(len(NAMES))]  # 2 before 10, not "0, 1, 10, 11, 2"
    two = next(labels for _, labels, _ in train if "," in labels)
    row = data.labels.encode(two)
    assert [i for i, flag in enumerate(row) if flag] == [int(i) for i in two.split(",")]

    named = load(files, **options, label_names_file=str(names_file))
    assert named.labels.names == NAMES
    assert named.labels.id2label[10] == "disapproval"
    assert named.labels.encode("2,10") == named.labels.encode("10, 2")
    assert [NAMES[i] for i, flag in enumerate(named.labels.encode("2,10")) if flag] == [
        "anger",
        "disapproval",
    ]

    given = load(files, **options, label_delimiter=",")  # as the option names it: the same classes
    assert given.labels.names == data.labels.names and given.labels.to_id == data.labels.to_id


def test_a_names_file_gives_ids_the_training_rows_never_use_a_class_too(tmp_path):
    names_file = tmp_path / "labels.txt"
    names_file.write_text("negative\nneutral\npositive\n")
    rows = [(f"text {i}", (0, 2)[i % 2]) for i in range(12)]  # ids 0 and 2 only
    files = {
        "train": write_csv(tmp_path / "train.csv", rows),
        "validation": write_csv(tmp_path / "dev.csv", rows),
    }
    data = load(files, label_names_file=str(names_file))
    assert data.labels.problem_type == SINGLE_LABEL
    assert data.labels.names == ["negative", "neutral", "positive"]
    assert data.labels.encode(2) == 2  # the line number is the id, whether or not training uses id 1


@pytest.mark.parametrize(
    "names, labels, error, message",
    [
        ("a\nb\n", ["x", "y"], ConfigError, "names class ids by line, but the labels are names already"),
        ("a\nb\n", [0, 5], DataError, "use class id 5, but --label_names_file .* has 2 lines"),
        ("a\n\nb\n", [0, 1], ConfigError, "has a blank line 2"),
        ("a\nb\na\n", [0, 1], ConfigError, "names 'a' twice"),
    ],
)
def test_a_names_file_that_does_not_fit_is_refused(tmp_path, names, labels, error, message):
    names_file = tmp_path / "labels.txt"
    names_file.write_text(names)
    rows = [(f"text {i}", labels[i % 2]) for i in range(8)]
    files = {
        "train": write_csv(tmp_path / "train.csv", rows),
        "validation": write_csv(tmp_path / "dev.csv", rows),
    }
    with pytest.raises(error, match=message):
        load(files, label_names_file=str(names_file))


def test_class_names_that_hold_a_comma_stay_classes_and_the_error_names_label_delimiter(tmp_path, caplog):
    """'arts, crafts' is one class: its parts are never labels alone. Said; and a validation label that is a new
    combination gets an error naming --label_delimiter, listing at most 20 of the training classes."""
    classes = [f"topic{i}, topic{i + 30}" for i in range(25)]
    train = [(f"text {i}", classes[i % 25]) for i in range(50)]
    files = {
        "train": write_csv(tmp_path / "train.csv", train),
        "validation": write_csv(tmp_path / "dev.csv", [("text", "topic1, topic33")]),
    }
    with caplog.at_level(logging.WARNING, logger="recipes_lib"), pytest.raises(DataError) as error:
        load(files)
    assert "read as 25 single classes" in caplog.text and "--label_delimiter ','" in caplog.text
    message = str(error.value)
    assert "'topic1, topic33'" in message and "... (25 in all)" in message
    assert sum(name in message for name in classes) == 20  # of the 25 training classes
    assert "if such a label lists several classes, give --label_delimiter ','" in message


@pytest.mark.parametrize("joiner", [";", "|"])
def test_semicolon_and_pipe_joined_names_are_lists_when_their_parts_are_labels_too(tmp_path, joiner):
    rows = [(f"text {i}", ("billing", "shipping", f"billing{joiner}shipping")[i % 3]) for i in range(9)]
    files = {
        "train": write_csv(tmp_path / "train.csv", rows),
        "validation": write_csv(tmp_path / "dev.csv", rows),
    }
    data = load(files)
    assert data.labels.problem_type == MULTI_LABEL and data.labels.delimiter == joiner
    assert data.labels.names == ["billing", "shipping"]
    assert load(files, problem_type=SINGLE_LABEL).labels.num_labels == 3  # asked for: read whole


def test_an_id_column_is_never_a_second_text(tmp_path, caplog):
    rows = [{"text": " ".join(r[0].split()[:5]), "labels": [NAMES[int(i)] for i in r[1].split(",")], "id": r[2]}
            for r in comment_rows(30, seed=3)]  # fmt: skip
    files = {
        "train": write_jsonl(tmp_path / "train.jsonl", rows),
        "validation": write_jsonl(tmp_path / "dev.jsonl", rows),
    }
    with caplog.at_level(logging.WARNING, logger="recipes_lib"):
        data = load(files, label_column_name="labels")
    assert data.text_columns == ("text",)
    assert "Column 'id' is not used as text" in caplog.text and "--text_column_names text,id" in caplog.text
    assert load(files, label_column_name="labels", text_column_names="text,id").text_columns == ("text", "id")

    pairs = [{"premise": r["text"], "hypothesis": r["text"][::-1], "labels": r["labels"]} for r in rows]
    files = {
        "train": write_jsonl(tmp_path / "pairs.jsonl", pairs),
        "validation": write_jsonl(tmp_path / "dev2.jsonl", pairs),
    }
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="recipes_lib"):
        assert load(files, label_column_name="labels").text_columns == ("premise", "hypothesis")
    assert (
        "Training on sentence pairs: 'premise' and 'hypothesis'" in caplog.text
    )  # two texts: said, not at INFO


def test_the_rare_labels_benchmark_data_is_many_rare_learnable_labels_the_same_each_time(tmp_path):
    """Issue #50 item 8's data (benchmarks/rare_labels.py): at least 20 labels, most under 5% of the rows,
    short texts, each label's own cue words in nearly all of its rows; and the figures it records beside
    the model's: the best constant predictor's macro-F1, and how much the outputs vary."""
    from tests.helpers.repo import load_benchmark

    rare = load_benchmark("rare_labels")
    files = rare.write_data(tmp_path / "a", 1200)
    again = rare.write_data(tmp_path / "b", 1200)
    assert all(files[split].read_text() == again[split].read_text() for split in files)  # seeded
    train = rare.read_jsonl(files["train"])
    rates = rare.prevalence(train)
    assert len(rates) >= 20 and sum(rate < 0.05 for rate in rates.values()) >= 0.75 * len(rates)
    assert max(len(row["text"].split()) for row in train) <= 16
    for name, cues in rare.LABELS.items():
        rows = [row for row in train if name in row["labels"]]
        with_cue = [row for row in rows if any(cue in row["text"] for cue in cues)]
        assert len(with_cue) >= 0.8 * len(rows), name

    validation = rare.read_jsonl(files["validation"])
    p = rare.prevalence(validation)
    assert rare.constant_macro_f1(validation) == pytest.approx(
        sum(2 * v / (1 + v) for v in p.values()) / len(p)
    )
    constant = [{"prediction": ["refund"], "probabilities": {"refund": 0.6, "pet": 0.1}}] * 5
    varied = [{"prediction": [], "probabilities": {"refund": 0.1 * i, "pet": 0.1}} for i in range(5)]
    for rows, spread, sets in ((constant, 0.0, 1), (varied, 0.0707, 1)):
        path = write_jsonl(tmp_path / "predictions.jsonl", rows)
        figures = rare.output_spread(path)
        assert figures["probability_std_mean"] == spread and figures["distinct_predicted_sets"] == sets


# issue 54: a byte-order mark is the file's, never class 0's name; any other invisible character is refused.
INVISIBLE = {"nul": "\x00", "escape": "\x1b", "bell": "\x07", "bom-inside": "\ufeff", "zero-width-space": "\u200b",
             "delete": "\x7f", "left-to-right-mark": "\u200e"}  # fmt: skip


def _names_run(tmp_path, names_bytes: bytes):
    names_file = tmp_path / "labels.txt"
    names_file.write_bytes(names_bytes)
    rows = [(f"text {i}", i % 2) for i in range(8)]
    files = {
        "train": write_csv(tmp_path / "train.csv", rows),
        "validation": write_csv(tmp_path / "dev.csv", rows),
    }
    return load(files, label_names_file=str(names_file))


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-8"])
def test_a_names_file_saved_with_a_byte_order_mark_names_class_0_without_it(tmp_path, encoding):
    assert _names_run(tmp_path, "neg\npos\n".encode(encoding)).labels.names == ["neg", "pos"]


@pytest.mark.parametrize("character", INVISIBLE.values(), ids=list(INVISIBLE))
@pytest.mark.parametrize("line", [0, 1])
def test_a_class_name_holding_an_invisible_character_is_refused_naming_the_line(tmp_path, character, line):
    names = ["neg", "pos"]
    names[line] = names[line][:1] + character + names[line][1:]
    with pytest.raises(
        ConfigError, match=rf"line {line + 1} .* holds the invisible character U\+{ord(character):04X}"
    ):
        _names_run(tmp_path, "\n".join(names).encode("utf-8"))


# issue 54: a text field over --max_text_chars is refused before tokenizing, naming the row, the bound and the flag.
@pytest.mark.parametrize("split", ["train", "validation"])
def test_a_text_field_over_the_bound_is_refused_before_tokenizing(tmp_path, split):
    rows = {name: [(f"text {i}", i % 2) for i in range(8)] for name in ("train", "validation")}
    rows[split][3] = ("x" * 1001, 1)
    files = {name: write_csv(tmp_path / f"{name}.csv", rows[name]) for name in rows}
    with pytest.raises(
        DataError,
        match=rf"{split}.csv line 5 has a 'text' of 1,001 characters, over the bound of 1,000 \(--max_text_chars\).*raise --max_text_chars",
    ):
        load(files, max_text_chars=1000)
    assert load(files, max_text_chars=1001).raw[split][3]["text"] == "x" * 1001


# A split taken from another's rows shares its table: the row named is the split's own, and its file line.
def test_an_oversized_row_of_a_split_column_split_is_named_by_its_line(tmp_path):
    splits = ["train", "train", "test", "train", "test", "dev", "test", "train"]
    rows = [(f"text {i}", i % 2, split) for i, split in enumerate(splits)]
    rows[6] = ("x" * 1001, 0, "test")  # the test split's third row, the file's line 8
    path = write_csv(tmp_path / "all.csv", rows, header=("text", "label", "split"))
    with pytest.raises(DataError, match=r"^all.csv line 8 has a 'text' of 1,001 characters"):
        load_classification_data(
            DataArguments(train_file=str(path), split_column="split", max_text_chars=1000)
        )


def test_an_oversized_row_of_a_held_out_validation_is_named_in_that_split(tmp_path):
    rows = [(f"text {i}", i % 2) for i in range(20)]
    options = {"train_file": str(tmp_path / "train.csv"), "validation_split_percentage": 50}
    write_csv(tmp_path / "train.csv", rows)
    held_out = load_classification_data(DataArguments(**options)).raw["validation"]["text"]
    rows[int(held_out[1].split()[1])] = ("x" * 1001, 1)  # the held-out split's second row (rows go by seed)
    write_csv(tmp_path / "train.csv", rows)
    with pytest.raises(DataError, match=r"^Row 2 of 50% of train held out has a 'text' of 1,001 characters"):
        load_classification_data(DataArguments(**options, max_text_chars=1000))
