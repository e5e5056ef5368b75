"""Data: every local format, string and integer labels, text pairs, and the errors users hit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from recipes_lib.arguments import DataArguments
from recipes_lib.data import load_classification_data, tokenize
from recipes_lib.errors import DataError
from tests.conftest import write_csv

ROWS = [("a red cat", "warm"), ("a blue dog", "cool"), ("the green chair", "cool"), ("yellow table", "warm")]


class _NoBarrier:
    def __call__(self, desc=None):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def write_json_lines(path: Path, rows, one_array: bool = False) -> Path:
    records = [{"text": text, "label": label} for text, label in rows]
    path.write_text(json.dumps(records) if one_array else "\n".join(json.dumps(r) for r in records) + "\n")
    return path


@pytest.mark.parametrize("extension", [".csv", ".tsv", ".json", ".jsonl"])
def test_every_local_format_loads_with_string_labels_mapped_in_sorted_order(tmp_path, extension):
    paths = {}
    for split in ("train", "validation"):
        path = tmp_path / f"{split}{extension}"
        if extension in (".csv", ".tsv"):
            write_csv(path, ROWS, delimiter="\t" if extension == ".tsv" else ",")
        else:
            write_json_lines(path, ROWS, one_array=extension == ".json")
        paths[split] = str(path)
    data = load_classification_data(
        DataArguments(train_file=paths["train"], validation_file=paths["validation"])
    )
    assert data.text_columns == ("text",)
    assert data.labels.names == ["cool", "warm"]
    assert data.labels.label2id == {"cool": 0, "warm": 1}
    assert len(data.raw["train"]) == 4 and len(data.raw["validation"]) == 4


def test_tsv_keeps_quote_characters_as_text(tmp_path):
    rows = [('he said "great', "warm"), ("it 's fine", "cool")]
    train = tmp_path / "train.tsv"
    train.write_text("text\tlabel\n" + "".join(f"{text}\t{label}\n" for text, label in rows))
    data = load_classification_data(DataArguments(train_file=str(train), validation_file=str(train)))
    assert data.raw["train"][0]["text"] == 'he said "great'


def test_text_pairs_and_integer_labels_tokenize_into_one_sequence(tmp_path, tiny_bert):
    rows = [("red cat", "blue dog", 0), ("green chair", "green chair", 1), ("a table", "the table", 1)]
    train = write_csv(tmp_path / "pairs.csv", rows, header=("sentence1", "sentence2", "label"))
    data_args = DataArguments(train_file=str(train), validation_file=str(train), max_seq_length=16)
    data = load_classification_data(data_args)
    assert data.text_columns == ("sentence1", "sentence2")
    assert data.labels.names == ["0", "1"]
    tokenized = tokenize(data, AutoTokenizer.from_pretrained(tiny_bert), data_args, _NoBarrier())
    first = tokenized["train"][0]
    assert first["labels"] == 0
    assert first["token_type_ids"].count(1) > 0  # the second sentence is segment B
    assert first["length"] == len(first["input_ids"]) <= 16
    assert set(tokenized["train"].column_names) >= {"input_ids", "attention_mask", "labels", "length"}


def test_integer_labels_that_are_not_0_to_k_are_remapped_and_named(tmp_path):
    train = write_csv(tmp_path / "stars.csv", [("bad", 1), ("ok", 3), ("great", 5), ("fine", 3)])
    data = load_classification_data(DataArguments(train_file=str(train), validation_file=str(train)))
    assert data.labels.names == ["1", "3", "5"]
    assert data.labels.to_id == {1: 0, 3: 1, 5: 2}


def test_validation_label_never_seen_in_train_is_an_error_naming_it(tmp_path):
    train = write_csv(tmp_path / "train.csv", ROWS)
    validation = write_csv(tmp_path / "validation.csv", [*ROWS, ("purple", "lukewarm")])
    with pytest.raises(DataError, match="'lukewarm'.*Training labels are: cool, warm"):
        load_classification_data(DataArguments(train_file=str(train), validation_file=str(validation)))


def test_missing_label_column_names_the_columns_found(tmp_path):
    train = write_csv(tmp_path / "train.csv", ROWS, header=("text", "category"))
    with pytest.raises(
        DataError, match="Label column 'label' is not in the train data; its columns are: text, category"
    ):
        load_classification_data(DataArguments(train_file=str(train), validation_file=str(train)))


def test_missing_text_column_names_the_columns_found(tmp_path):
    train = write_csv(tmp_path / "train.csv", ROWS)
    with pytest.raises(DataError, match="Text column 'sentence' .* columns are: text, label"):
        load_classification_data(
            DataArguments(train_file=str(train), validation_file=str(train), text_column_names="sentence")
        )


def test_mixed_label_types_are_an_error(tmp_path):
    train = write_json_lines(tmp_path / "train.jsonl", [("a", "warm"), ("b", 1)])
    with pytest.raises(DataError):
        load_classification_data(DataArguments(train_file=str(train), validation_file=str(train)))


def test_empty_training_file_is_an_error(tmp_path):
    train = write_csv(tmp_path / "train.csv", [])
    validation = write_csv(tmp_path / "validation.csv", ROWS)
    with pytest.raises(DataError, match="empty"):
        load_classification_data(DataArguments(train_file=str(train), validation_file=str(validation)))


def test_ragged_csv_rows_are_an_error_naming_the_file(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("text,label\na red cat,warm\na blue dog,cool,extra,fields\n")
    with pytest.raises(DataError, match="train.csv"):
        load_classification_data(DataArguments(train_file=str(train), validation_file=str(train)))


def test_without_validation_data_part_of_train_is_held_out(tmp_path):
    rows = [(f"row {i}", "warm" if i % 2 else "cool") for i in range(50)]
    train = write_csv(tmp_path / "train.csv", rows)
    data = load_classification_data(DataArguments(train_file=str(train), validation_split_percentage=20))
    assert len(data.raw["validation"]) == 10 and len(data.raw["train"]) == 40


def test_max_samples_take_the_first_examples(tmp_path):
    rows = [(f"row {i}", "warm" if i % 2 else "cool") for i in range(50)]
    train = write_csv(tmp_path / "train.csv", rows)
    data_args = DataArguments(
        train_file=str(train), validation_file=str(train), max_train_samples=6, max_eval_samples=4
    )
    data = load_classification_data(data_args)
    assert data.raw["train"]["text"] == [f"row {i}" for i in range(6)]
    assert len(data.raw["validation"]) == 4


def test_shipped_demo_data_has_four_balanced_classes_and_unseen_validation_requests():
    root = Path(__file__).resolve().parent.parent / "data" / "support_tickets"
    data = load_classification_data(
        DataArguments(train_file=str(root / "train.csv"), validation_file=str(root / "validation.csv"))
    )
    assert data.labels.names == ["account", "billing", "shipping", "technical"]
    assert len(data.raw["train"]) == 1200 and len(data.raw["validation"]) == 400
    assert not set(data.raw["train"]["text"]) & set(data.raw["validation"]["text"])
