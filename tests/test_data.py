"""Data: every local format, string and integer labels, text pairs, and the errors users hit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from recipes_lib.config.arguments import DataArguments
from recipes_lib.data.loading import load_classification_data
from recipes_lib.data.tokenize import tokenize
from recipes_lib.errors import DataError
from tests.helpers.data import write_csv
from tests.helpers.models import build_tiny_bert
from tests.helpers.runs import QUICK, run_args, run_in_process

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


def test_a_json_lines_error_names_the_line_past_blank_lines(tmp_path):
    # Blank lines hold no record: the fourth record (an unseen class) is on line 6 of the file.
    train = write_json_lines(tmp_path / "train.jsonl", ROWS)
    records = [
        json.dumps({"text": text, "label": label}) for text, label in [*ROWS[:3], ("a red bird", "bird")]
    ]
    validation = tmp_path / "validation.jsonl"
    validation.write_text(f"{records[0]}\n\n{records[1]}\n{records[2]}\n\n{records[3]}\n")
    with pytest.raises(DataError, match=r"never uses: 'bird' \(first at validation.jsonl line 6\)"):
        load_classification_data(DataArguments(train_file=str(train), validation_file=str(validation)))


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


# --- how a delimited file was written, read back as its writer meant (datafiles.py) ----------------------


def write_quoted_tsv(path: Path, rows) -> Path:
    """As Python's csv module (and pandas.to_csv(sep="\\t")) write it: fields with tabs or newlines quoted."""
    import csv

    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t")
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return path


def tricky_rows(count: int):
    """Every 7th text holds a tab and a newline, as pasted support tickets do."""
    rows = []
    for i in range(count):
        text, label = ROWS[i % len(ROWS)]
        rows.append((f"{text}\tfirst line\nsecond line {i}" if i % 7 == 0 else f"{text} {i}", label))
    return rows


def test_a_quoted_tsv_with_tabs_and_newlines_inside_texts_reads_one_row_per_record(tmp_path):
    train = write_quoted_tsv(tmp_path / "train.tsv", tricky_rows(300))
    validation = write_quoted_tsv(tmp_path / "validation.tsv", tricky_rows(21))
    data = load_classification_data(DataArguments(train_file=str(train), validation_file=str(validation)))
    assert len(data.raw["train"]) == 300 and len(data.raw["validation"]) == 21
    assert data.labels.names == ["cool", "warm"]  # no fragment of a text became a class
    assert data.raw["train"][0]["text"] == "a red cat\tfirst line\nsecond line 0"


def test_a_glue_style_tsv_with_stray_quotes_is_read_unquoted(tmp_path):
    lines = [
        "sentence\tlabel",
        '"the cat sat\t1',
        'a "quoted" word and a lone " here\t0',
        "it's \"fine\t1",
        "plain\t0",
    ]
    train = tmp_path / "train.tsv"
    train.write_text("\n".join(lines) + "\n")
    data = load_classification_data(DataArguments(train_file=str(train), validation_split_percentage=50))
    texts = sorted(list(data.raw["train"]["sentence"]) + list(data.raw["validation"]["sentence"]))
    assert texts == sorted(['"the cat sat', 'a "quoted" word and a lone " here', "it's \"fine", "plain"])


def test_a_file_quoted_in_full_is_read_quoted_and_an_ambiguous_one_is_an_error_naming_the_option(tmp_path):
    import csv

    quoted_in_full = tmp_path / "full.tsv"
    with open(quoted_in_full, "w", newline="") as handle:  # unquoted, the quotes would stay in the text
        writer = csv.writer(handle, delimiter="\t", quoting=csv.QUOTE_ALL)
        writer.writerow(["text", "label"])
        writer.writerows(ROWS)
    data = load_classification_data(
        DataArguments(train_file=str(quoted_in_full), validation_split_percentage=50)
    )
    assert sorted(list(data.raw["train"]["text"]) + list(data.raw["validation"]["text"])) == sorted(
        t for t, _ in ROWS
    )
    # A field quoted as only a quoting writer writes it (a doubled quote inside), and a bare '"' that
    # no quoting writer leaves: both readings fit the header and the quotes disagree; the run asks.
    # (More shapes, from pandas and GLUE, in tests/test_tsv_quoting.py.)
    ambiguous = tmp_path / "ambiguous.tsv"
    ambiguous.write_text('text\tlabel\n"red ""cat"""\twarm\nblue "dog"\tcool\ngreen\tcool\nred\twarm\n')
    with pytest.raises(DataError, match="--csv_quoting quoted or --csv_quoting none"):
        load_classification_data(DataArguments(train_file=str(ambiguous), validation_split_percentage=50))
    data = load_classification_data(
        DataArguments(train_file=str(ambiguous), validation_split_percentage=50, csv_quoting="none")
    )
    assert '"red ""cat"""' in list(data.raw["train"]["text"]) + list(data.raw["validation"]["text"])
    # A stray quote inside a text (GLUE style): the quoted reading fails, so the file is unquoted.
    stray = tmp_path / "stray.tsv"
    stray.write_text('text\tlabel\n"a" red cat\twarm\nblue dog\tcool\ngreen\tcool\nred\twarm\n')
    data = load_classification_data(DataArguments(train_file=str(stray), validation_split_percentage=50))
    assert '"a" red cat' in list(data.raw["train"]["text"]) + list(data.raw["validation"]["text"])


def test_a_row_error_names_the_file_and_the_line_an_editor_shows(tmp_path):
    train = write_quoted_tsv(tmp_path / "train.tsv", [*tricky_rows(8), ("no label here", "")])
    # Line numbers count the newlines inside quoted texts: rows 0 and 7 span two lines each.
    with pytest.raises(DataError, match=r"train.tsv line 12 has no label"):
        load_classification_data(DataArguments(train_file=str(train), validation_split_percentage=50))


@pytest.mark.parametrize(
    "values, names",
    [
        ([True, False, True, False], ["False", "True"]),  # JSON booleans
        ([1.0, 0.0, 1.0, 0.0], ["0", "1"]),  # integers written as floats
        (["billing ", "billing", " shipping", "shipping"], ["billing", "shipping"]),  # stray whitespace
    ],
)
def test_labels_are_normalised_to_classes(tmp_path, values, names):
    records = [{"text": text, "label": value} for (text, _), value in zip(ROWS, values, strict=True)]
    train = tmp_path / "train.jsonl"
    train.write_text("\n".join(json.dumps(record) for record in records) + "\n")
    data = load_classification_data(DataArguments(train_file=str(train), validation_file=str(train)))
    assert data.labels.names == names
    tokenizer = AutoTokenizer.from_pretrained(_tokenizer_dir(tmp_path))
    tokenized = tokenize(data, tokenizer, DataArguments(train_file=str(train)), _NoBarrier())
    assert set(tokenized["train"]["labels"]) == {0, 1}
    assert all(type(label) is int for label in tokenized["train"]["labels"])


def _tokenizer_dir(tmp_path: Path) -> Path:

    return build_tiny_bert(tmp_path / "tokenizer-model")


def test_a_csv_with_true_false_labels_trains(tmp_path, tiny_bert):

    train = write_csv(tmp_path / "train.csv", [(text, str(label == "warm")) for text, label in ROWS * 8])
    results = run_in_process(
        "full_ft", run_args(tiny_bert, {"train": train, "validation": train}, tmp_path / "run", **QUICK)
    )
    assert results["num_labels"] == 2 and set(results["per_class"]) == {"False", "True"}


def test_a_hub_dataset_without_the_chosen_evaluation_split_is_an_error_listing_its_splits():
    from datasets import Dataset, DatasetDict

    from recipes_lib.data.hub_dataset import choose_hub_splits

    rows = Dataset.from_dict({"premise": ["a"], "hypothesis": ["b"], "label": [0]})
    mnli = DatasetDict(
        {"train": rows, "validation_matched": rows, "validation_mismatched": rows, "test_matched": rows}
    )
    with pytest.raises(
        DataError, match="other splits are: validation_matched, validation_mismatched, test_matched"
    ):
        choose_hub_splits(mnli, DataArguments(dataset_name="glue", dataset_config_name="mnli"))
    chosen = choose_hub_splits(
        mnli,
        DataArguments(
            dataset_name="glue", validation_split_name="validation_matched", test_split_name="test_matched"
        ),
    )
    assert set(chosen) == {"train", "validation", "test"}
    # Only a train split: holding out part of it is the one way to evaluate, and it is said.
    assert set(choose_hub_splits(DatasetDict({"train": rows}), DataArguments(dataset_name="x"))) == {"train"}


def test_a_run_reports_per_class_scores_a_confusion_matrix_and_test_predictions(
    tmp_path, tiny_bert, learnable_data
):
    from recipes_lib.evaluation.predictions import (
        CONFUSION_MATRIX_PNG,
        EVAL_PREDICTIONS_FILE,
        TEST_PREDICTIONS_FILE,
    )

    unlabelled = tmp_path / "test.csv"
    unlabelled.write_text("text\nthe red cat\na blue dog\n")
    output_dir = tmp_path / "run"
    args = run_args(
        tiny_bert,
        learnable_data,
        output_dir,
        "--test_file",
        str(unlabelled),
        "--max_eval_samples",
        "64",
        **QUICK,
    )
    results = run_in_process("full_ft", args)
    assert results["eval_split"] == "validation.csv" and results["test_split"] == "test.csv"
    matrix = results["confusion_matrix"]
    assert matrix["labels"] == ["cool", "warm"] and sum(map(sum, matrix["matrix"])) == results["eval_samples"]
    assert sum(scores["support"] for scores in results["per_class"].values()) == results["eval_samples"]
    assert (output_dir / CONFUSION_MATRIX_PNG).stat().st_size > 0
    evaluated = (output_dir / EVAL_PREDICTIONS_FILE).read_text().splitlines()
    assert len(evaluated) == results["eval_samples"]
    test_rows = [json.loads(line) for line in (output_dir / TEST_PREDICTIONS_FILE).read_text().splitlines()]
    assert len(test_rows) == 2 and set(test_rows[0]["probabilities"]) == {"cool", "warm"}
    # unlabelled: predicted, not scored (the record holds every key; null where it does not apply)
    assert all(results[key] is None for key in results if key.startswith("test_") and key != "test_split")


def test_a_hub_test_split_whose_labels_are_minus_one_is_predicted_not_scored(monkeypatch):
    """GLUE's test splits hide their labels as -1 in a ClassLabel column."""
    import datasets as hf_datasets
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

    features = Features({"sentence": Value("string"), "label": ClassLabel(names=["negative", "positive"])})
    rows = {"sentence": ["good", "bad", "fine", "awful"], "label": [1, 0, 1, 0]}
    hidden = {"sentence": ["so so", "great"], "label": [-1, -1]}
    glue = DatasetDict(
        {
            "train": Dataset.from_dict(rows, features=features),
            "validation": Dataset.from_dict(rows, features=features),
            "test": Dataset.from_dict(hidden, features=features),
        }
    )
    monkeypatch.setattr(hf_datasets, "load_dataset", lambda *args, **kwargs: glue)
    data = load_classification_data(
        DataArguments(dataset_name="glue", dataset_config_name="sst2", test_split_name="test")
    )
    assert data.test_has_labels is False and len(data.raw["test"]) == 2


# -- label columns the checks refuse in one paragraph (before, a TypeError deep in the row-by-row reading)


def jsonl(path: Path, labels: list) -> Path:
    path.write_text(
        "".join(json.dumps({"text": f"row {i}", "label": v}) + "\n" for i, v in enumerate(labels))
    )
    return path


def test_validation_lists_against_single_label_training_labels_are_refused_in_one_paragraph(tmp_path):
    train = jsonl(tmp_path / "train.jsonl", ["warm", "cool"])
    validation = jsonl(tmp_path / "validation.jsonl", [["warm"], ["cool", "warm"]])
    with pytest.raises(
        DataError, match=r"The labels are lists \(\['warm'\] in row 1\).*one class per row"
    ) as error:
        load_classification_data(DataArguments(train_file=str(train), validation_file=str(validation)))
    assert "\n" not in str(error.value)


def test_a_label_column_of_structs_is_refused_naming_its_type(tmp_path):
    train = jsonl(tmp_path / "train.jsonl", [{"name": "warm"}, {"name": "cool"}])
    with pytest.raises(
        DataError,
        match=r"Label column 'label' \(from train.jsonl line 1\) holds struct<name: string> values; labels must be",
    ):
        load_classification_data(DataArguments(train_file=str(train), validation_file=str(train)))
