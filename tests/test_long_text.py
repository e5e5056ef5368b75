"""--long_text (issue #22): the truncation report, head_tail, sliding windows, and documents counted once.

The tiny documents here are the colour task stretched: 40 to 60 noise words, then the colour word
that decides the label, then a few more noise words. At max_seq_length 32 truncation never sees the
colour; head_tail's tail and the last windows do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset, DatasetDict

from recipes_lib.config.arguments import DataArguments
from recipes_lib.data.labels import LabelMapping
from recipes_lib.data.loading import ClassificationData
from recipes_lib.data.long_text import (
    DOCUMENT_COLUMN,
    SpecialTokens,
    cut_document,
    truncation_report,
)
from recipes_lib.data.tokenize import tokenize
from recipes_lib.errors import ConfigError
from recipes_lib.evaluation.metrics import TaskMetrics
from recipes_lib.evaluation.windows import combine_windows
from tests.helpers.data import COLOURS, NOISE, read_jsonl, write_csv, write_jsonl
from tests.helpers.models import build_tiny_bert, word_tokenizer, word_vocabulary
from tests.helpers.repo import REPO_ROOT
from tests.helpers.runs import run_args, run_in_process, run_recording_results_writes

MAX_LENGTH, STRIDE = 32, 8


def long_rows(count: int, seed: int) -> list[tuple[str, str, list[str], float]]:
    """(text, class, classes, score) rows: noise, the colour word(s) near the end, a little more noise."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        colours = rng.sample(sorted(COLOURS), rng.randint(1, 2))
        words = [rng.choice(NOISE) for _ in range(rng.randint(40, 60))]
        words += colours + [rng.choice(NOISE) for _ in range(rng.randint(0, 4))]
        warm = sum(COLOURS[colour] == "warm" for colour in colours)
        rows.append((" ".join(words), COLOURS[colours[0]], sorted({COLOURS[c] for c in colours}), warm / 2))
    return rows


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer(word_vocabulary())


@pytest.fixture(scope="module")
def long_data(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("long-data")
    return {
        split: write_csv(
            directory / f"{split}.csv", [(text, label) for text, label, _, _ in long_rows(n, seed)]
        )
        for split, n, seed in (("train", 64, 1), ("validation", 21, 2))  # 21: odd, for two processes
    }


# --- cutting and windows ---------------------------------------------------------------------------


def test_truncate_cuts_exactly_as_the_tokenizer_does(tokenizer):
    texts = [text for text, *_ in long_rows(8, 3)] + ["red", ""]
    data = _classification_data(texts)
    ours = tokenize(data, tokenizer, _data_args(), _no_wait)["test"]
    theirs = tokenizer(texts, truncation=True, max_length=MAX_LENGTH)
    for column in ("input_ids", "attention_mask", "token_type_ids"):
        assert ours[column] == theirs[column], column


def test_head_tail_keeps_a_quarter_from_the_start_and_the_rest_from_the_end():
    special = SpecialTokens(before=1, after=1)
    ids = [101, *range(100), 102]
    (kept,) = cut_document(ids, special, room=20, mode="head_tail", stride=0)
    assert kept == [101, *range(5), *range(85, 100), 102]
    assert cut_document([101, 1, 2, 102], special, room=20, mode="head_tail", stride=0) == [[101, 1, 2, 102]]


@pytest.mark.parametrize("length", [21, 30, 37, 100])
def test_windows_cover_every_token_and_overlap_by_the_stride(length):
    special = SpecialTokens(before=1, after=1)
    room, stride = 12, 4
    windows = cut_document([101, *range(length), 102], special, room, "sliding_window", stride)
    texts = [window[1:-1] for window in windows]
    assert all(window[0] == 101 and window[-1] == 102 and len(window) <= room + 2 for window in windows)
    assert texts[0][0] == 0 and texts[-1][-1] == length - 1  # from the first token to the last
    for before, after in zip(texts, texts[1:], strict=False):
        assert before[-stride:] == after[:stride]  # each window repeats the stride's tokens
    assert len(texts[-2]) == room and texts[-2][-1] < length - 1  # no window past the one reaching the end


def test_sliding_window_rows_name_their_document_and_carry_its_label(tokenizer):
    rows = long_rows(5, 4)
    data = _classification_data(
        [text for text, *_ in rows], [label for _, label, _, _ in rows], split="train"
    )
    args = _data_args(long_text="sliding_window", stride=STRIDE)
    windows = tokenize(data, tokenizer, args, _no_wait)["train"]
    documents = windows[DOCUMENT_COLUMN]
    assert sorted(set(documents)) == [0, 1, 2, 3, 4] and documents == sorted(documents)
    assert len(windows) > 10 and max(windows["length"]) == MAX_LENGTH
    for document, label in zip(documents, windows["labels"], strict=True):
        assert label == data.labels.encode(rows[document][1])
    # --max_windows_per_document: training keeps each document's first N windows.
    args.max_windows_per_document = 2
    first_two = tokenize(data, tokenizer, args, _no_wait)["train"]
    assert len(first_two) == 10 and first_two[DOCUMENT_COLUMN] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def test_combining_windows_takes_their_mean_or_max_in_document_order():
    logits = np.array([[1.0, 0.0], [3.0, 2.0], [0.0, 5.0], [2.0, 2.0], [4.0, 0.0]])
    ids = np.array([7, 7, 3, 3, 3])  # documents in row order, whatever their ids
    mean, first = combine_windows(logits, ids, "mean")
    np.testing.assert_allclose(mean, [[2.0, 1.0], [2.0, 7 / 3]])
    assert first.tolist() == [0, 2]
    maximum, _ = combine_windows(logits, ids, "max")
    np.testing.assert_allclose(maximum, [[3.0, 2.0], [4.0, 5.0]])
    # Three documents whose order of appearance is no swap of their sorted ids (9, 2, 5: a cycle).
    mean, first = combine_windows(np.array([[1.0, 0], [0, 1], [0, 3], [2, 2], [3, 0]]), [9, 2, 2, 5, 9])
    np.testing.assert_allclose(mean, [[2.0, 0.0], [0.0, 2.0], [2.0, 2.0]])
    assert first.tolist() == [0, 1, 3]
    with pytest.raises(ValueError, match="4 predictions for 5 windows"):
        combine_windows(logits[:4], ids)


def test_metrics_count_documents_not_windows():
    metrics = TaskMetrics("single_label_classification", 2)
    metrics.document_ids = np.array([0, 0, 0, 1, 2, 2])
    # Document 0: one confident window for class 1 outweighs two unsure ones for class 0 (mean).
    logits = np.array([[0.1, 0.0], [0.1, 0.0], [0.0, 3.0], [2.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    labels = np.array([1, 1, 1, 0, 1, 1])

    class Prediction:
        predictions, label_ids = logits, labels

    scores = metrics(Prediction())
    assert scores["samples"] == 3 and scores["accuracy"] == 1.0


# --- the truncation report -------------------------------------------------------------------------


def test_the_report_says_how_many_are_cut_the_percentiles_and_what_each_limit_keeps():
    lengths = np.arange(1, 201)  # 1 to 200 tokens
    report = truncation_report(lengths, rows=200, max_seq_length=150, model_limit=512)
    assert report["longer_than_max_seq_length"] == 50 and report["longer_share"] == 0.25
    assert report["length_keeping_95pct"] == 190 and report["length_keeping_99pct"] == 198
    assert report["longest"] == 200 and report["median_length"] == 100
    assert report["max_seq_length_keeps_share"] == 0.75 and report["model_max_length_keeps_share"] == 1.0
    # A model that takes fewer tokens than the data needs: the percentiles stay the data's (issue 58),
    # and what the model's limit keeps whole is its own figure.
    short_model = truncation_report(lengths, rows=200, max_seq_length=150, model_limit=180)
    assert short_model["length_keeping_95pct"] == 190 and short_model["model_max_length"] == 180
    assert short_model["model_max_length_keeps_share"] == 0.9


def test_a_run_warns_when_many_training_examples_are_cut(tokenizer, caplog):
    rows = long_rows(6, 5)
    data = _classification_data(
        [text for text, *_ in rows], [label for _, label, _, _ in rows], split="train"
    )
    with caplog.at_level("WARNING", logger="recipes_lib"):
        tokenized = tokenize(data, tokenizer, _data_args(), _no_wait, model_limit=128)
    assert tokenized.truncation["train"]["longer_share"] == 1.0
    warning = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert warning and "--long_text head_tail" in warning[0] and "--long_text sliding_window" in warning[0]


# --- what is refused -------------------------------------------------------------------------------


def test_head_tail_and_windows_on_a_sentence_pair_are_a_clear_error(tokenizer):
    pair = DatasetDict({"test": Dataset.from_dict({"a": ["red cat"], "b": ["blue dog"]})})
    data = dataclasses.replace(
        _classification_data(["red cat", "blue dog"]), raw=pair, text_columns=("a", "b")
    )
    for mode in ("head_tail", "sliding_window"):
        with pytest.raises(ConfigError, match=f"--long_text {mode} cuts one text, but this data is a pair"):
            tokenize(data, tokenizer, _data_args(long_text=mode), _no_wait)


def test_window_options_are_checked_before_anything_loads(long_data, tmp_path):
    from recipes_lib.config.parsing import parse_arguments
    from recipes_workbench.recipes import RECIPES

    base = run_args("model", long_data, tmp_path)
    with pytest.raises(ConfigError, match="stride is 16 with max_seq_length 32"):
        parse_arguments(RECIPES["full_ft"], [*base, "--long_text", "sliding_window", "--stride", "16"])
    with pytest.raises(ConfigError, match="max_windows_per_document is set but long_text is 'truncate'"):
        parse_arguments(RECIPES["full_ft"], [*base, "--max_windows_per_document", "2"])


# --- whole runs: evaluation, test predictions and predict count each document once -------------------


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("long-bert"))


WINDOWED = ("--long_text", "sliding_window", "--stride", str(STRIDE), "--text_column_names", "text")


# Short documents, one window each: their figure is the same whichever way windows are pooled.
SHORT_DOCUMENTS = [("red", "warm"), ("blue", "cool"), ("green leaf", "cool")]


def test_window_pooling_changes_each_documents_figure_and_predict_pools_as_the_run_did(
    tiny_bert, long_data, tmp_path
):
    from recipes_workbench.tools.predict import predict

    documents = [(text, label) for text, label, _, _ in long_rows(21, 2)] + SHORT_DOCUMENTS
    validation = write_csv(tmp_path / "validation.csv", documents)
    data = {"train": long_data["train"], "validation": validation, "test": validation}
    evaluated = {}
    for pooling in ("mean", "max"):
        output_dir = tmp_path / pooling
        extra = (*WINDOWED, "--window_pooling", pooling, "--test_file", str(validation))
        results = run_in_process(
            "full_ft", run_args(tiny_bert, data, output_dir, *extra, steps=2, eval_strategy="no")
        )
        assert results["eval_samples"] == len(documents) and results["truncation"]["validation"]["rows"] > 24
        evaluated[pooling] = read_jsonl(output_dir / "eval_predictions.jsonl")
        assert len(evaluated[pooling]) == len(documents)
        assert len(read_jsonl(output_dir / "test_predictions.jsonl")) == len(documents)
        assert results["test_accuracy"] == pytest.approx(results["eval_accuracy"])
        predicted = predict(output_dir, validation, batch_size=5, progress=False)
        assert [row["prediction"] for row in predicted] == [row["prediction"] for row in evaluated[pooling]]
        for got, want in zip(predicted, evaluated[pooling], strict=True):
            for name, probability in want["probabilities"].items():
                assert got["probabilities"][name] == pytest.approx(probability, abs=1e-5)
        saved = json.loads((output_dir / "results.json").read_text())
        assert saved["config"]["window_pooling"] == pooling and saved["truncation"]["train"]["examples"] == 64

    def probabilities(pooling: str, index: int) -> list[float]:
        return list(evaluated[pooling][index]["probabilities"].values())

    # The same seed trains the same model: one window, one figure, whatever the pooling ...
    for index in range(21, len(documents)):
        assert probabilities("mean", index) == pytest.approx(probabilities("max", index), abs=1e-6)
    # ... and for documents of several windows the pooling changes the figure (a tiny model two steps
    # in gives windows close logits: the figures differ in their last decimals, above the 6 kept).
    differences = [max(abs(a - b) for a, b in zip(probabilities("mean", i), probabilities("max", i), strict=True))
                   for i in range(21)]  # fmt: skip
    assert sum(difference > 2e-6 for difference in differences) >= 5, differences


@pytest.mark.parametrize("task", ["multi_label", "regression"])
def test_windows_combine_for_multi_label_and_regression(tiny_bert, tmp_path, task):
    from recipes_workbench.tools.predict import predict

    rows = {"train": long_rows(32, 1), "validation": long_rows(9, 2)}
    if task == "multi_label":
        data = {
            s: write_jsonl(tmp_path / f"{s}.jsonl", [{"text": r[0], "label": r[2]} for r in v])
            for s, v in rows.items()
        }
    else:
        data = {s: write_csv(tmp_path / f"{s}.csv", [(r[0], r[3]) for r in v]) for s, v in rows.items()}
    output_dir = tmp_path / "run"
    results = run_in_process(
        "full_ft", run_args(tiny_bert, data, output_dir, *WINDOWED, steps=2, eval_strategy="no")
    )
    assert results["eval_samples"] == 9
    evaluated = read_jsonl(output_dir / "eval_predictions.jsonl")
    predicted = predict(output_dir, data["validation"], progress=False)
    assert len(evaluated) == len(predicted) == 9
    if task == "regression":
        assert [row["prediction"] for row in predicted] == pytest.approx(
            [row["prediction"] for row in evaluated], abs=1e-5
        )
    else:
        assert [row["prediction"] for row in predicted] == [row["prediction"] for row in evaluated]


def test_head_tail_reads_the_end_of_each_document(tiny_bert, long_data, tmp_path, tokenizer):
    """The colour that decides each label is planted after 40 to 60 noise words: past the first
    MAX_LENGTH tokens, inside head_tail's tail. What the model is given holds it only with head_tail."""
    rows = long_rows(21, 2)
    data = _classification_data(
        [text for text, *_ in rows], [label for _, label, _, _ in rows], split="train"
    )
    planted = [
        {tokenizer.convert_tokens_to_ids(word) for word in text.split() if word in COLOURS}
        for text, *_ in rows
    ]
    assert all(planted)

    def given_to_the_model(mode: str) -> list[set[int]]:
        return [
            set(ids)
            for ids in tokenize(data, tokenizer, _data_args(long_text=mode), _no_wait)["train"]["input_ids"]
        ]

    assert all(
        not colours & ids for colours, ids in zip(planted, given_to_the_model("truncate"), strict=True)
    )
    assert all(colours <= ids for colours, ids in zip(planted, given_to_the_model("head_tail"), strict=True))
    results = run_in_process(
        "full_ft",
        run_args(tiny_bert, long_data, tmp_path, "--long_text", "head_tail", steps=2, eval_strategy="no"),
    )
    assert results["config"]["long_text"] == "head_tail"
    assert results["eval_samples"] == 21 and results["truncation"]["train"]["longer_share"] == 1.0


# Slow: a 2-process launch (~30 s on 2 cores); test_multi_process.py checks the gathered evaluation by default.
@pytest.mark.slow
def test_two_processes_count_each_document_once(tiny_bert, long_data, tmp_path):
    """21 documents, about 90 windows, split over two processes: the gathered windows, less accelerate's
    repeats, combine into 21 documents, scored as one process scores the saved model."""
    from recipes_workbench.tools.predict import predict

    args = run_args(
        tiny_bert, long_data, tmp_path / "run", *WINDOWED, steps=2, eval_strategy="no", batch_size=4
    )
    launch = ("--num_processes", "2", "--main_process_port", "0")
    run_recording_results_writes(
        "full_ft",
        [*args, "--per_device_eval_batch_size", "4"],
        tmp_path / "ledger",
        "multi_cpu.yaml",
        *launch,
    )
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["num_processes"] == 2 and results["eval_samples"] == 21
    predicted = predict(tmp_path / "run", long_data["validation"], progress=False)
    truth = [label for _, label, _, _ in long_rows(21, 2)]
    accuracy = np.mean([row["prediction"] == label for row, label in zip(predicted, truth, strict=True)])
    assert results["eval_accuracy"] == pytest.approx(accuracy)
    assert [row["prediction"] for row in read_jsonl(tmp_path / "run" / "eval_predictions.jsonl")] == [
        row["prediction"] for row in predicted
    ]


# --- the shipped long-document task ---------------------------------------------------------------


def test_the_shipped_long_documents_hide_their_request_from_the_first_128_tokens(tmp_path, minilm_dir):
    """The committed files are what data/make_long_documents.py writes; in every document the passage that
    decides the label lies past the first 128 tokens and inside head_tail's tail."""
    import csv
    import importlib.util

    from transformers import AutoTokenizer

    shipped = REPO_ROOT / "data" / "long_documents"
    spec = importlib.util.spec_from_file_location(
        "make_long_documents", REPO_ROOT / "data" / "make_long_documents.py"
    )
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generator.main(tmp_path)
    for name in ("train.csv", "validation.csv"):
        assert (tmp_path / name).read_bytes() == (shipped / name).read_bytes(), name
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    special = SpecialTokens.of(tokenizer)
    with open(shipped / "validation.csv", newline="") as handle:
        texts = [row["text"] for row in csv.DictReader(handle)]
    markers = [phrase.split(",")[-1].split(":")[0].strip().lower() for phrase in generator.TODAY]
    for ids in tokenizer(texts, verbose=False)["input_ids"]:
        (head,) = cut_document(ids, special, 126, "truncate", 0)
        (head_tail,) = cut_document(ids, special, 126, "head_tail", 0)
        assert not any(marker in tokenizer.decode(head) for marker in markers)
        assert any(marker in tokenizer.decode(head_tail[32:]) for marker in markers)


# --- helpers ---------------------------------------------------------------------------------------


def _no_wait(desc):
    return contextlib.nullcontext()


def _data_args(**overrides) -> DataArguments:
    return DataArguments(
        train_file="unused.csv", max_seq_length=MAX_LENGTH, overwrite_cache=True, **overrides
    )


def _classification_data(texts, labels=None, split="test") -> ClassificationData:
    columns = {"text": texts, **({"label": labels} if labels is not None else {})}
    names = sorted(set(COLOURS.values()))
    return ClassificationData(
        raw=DatasetDict({split: Dataset.from_dict(columns)}),
        text_columns=("text",),
        label_column="label",
        labels=LabelMapping(names=names, to_id={name: i for i, name in enumerate(names)}),
        description="long documents",
    )
