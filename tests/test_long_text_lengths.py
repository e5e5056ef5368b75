"""Length figures that are the data's, and advice a command accepts (issue 58; pairs: issue 55).

The documents here have known whole lengths (special tokens counted): 5, 10, ..., 200 tokens, one each,
so the 95th and 99th percentiles (nearest rank, numpy's inverted_cdf) are 190 and 200, max_seq_length
32 keeps 6 of 40 whole (15%) and the tiny BERT's 128 positions keep 25 of 40 (62.5%). Every command
that reads them (the recipe's log and warning, results.json, predict, export) must say those figures,
uncapped, and advise only what that command accepts.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re

import numpy as np
import pytest
from datasets import Dataset, DatasetDict

from recipes_lib.config.arguments import DataArguments
from recipes_lib.data.labels import LabelMapping
from recipes_lib.data.loading import ClassificationData
from recipes_lib.data.long_text import LengthsRead, log_truncation, truncation_report
from recipes_lib.data.tokenize import tokenize
from tests.helpers.data import COLOURS, NOISE, write_csv
from tests.helpers.models import build_tiny_bert, word_tokenizer, word_vocabulary
from tests.helpers.runs import run_args, run_in_process

LENGTHS = list(range(5, 201, 5))  # whole lengths, [CLS] and [SEP] included
MAX_SEQ_LENGTH, MODEL_LIMIT = 32, 128  # the tiny BERT has 128 positions
P95, P99 = 190, 200
FIGURES = "95% are at most 190 tokens, 99% at most 200; max_seq_length keeps 15.0% whole, the model's limit of 128 keeps 62.5%"


def test_the_known_percentiles_are_numpys():
    assert np.percentile(LENGTHS, 95, method="inverted_cdf") == P95
    assert np.percentile(LENGTHS, 99, method="inverted_cdf") == P99
    assert np.mean(np.array(LENGTHS) <= MAX_SEQ_LENGTH) == 0.15
    assert np.mean(np.array(LENGTHS) <= MODEL_LIMIT) == 0.625


def documents(seed: int) -> list[tuple[str, str]]:
    """One document per length in LENGTHS (shuffled): a colour word, then noise; one token per word."""
    rng = random.Random(seed)
    rows = []
    for length in rng.sample(LENGTHS, len(LENGTHS)):
        colour = rng.choice(sorted(COLOURS))
        words = [colour] + [rng.choice(NOISE) for _ in range(length - 3)]
        rows.append((" ".join(words), COLOURS[colour]))
    return rows


@pytest.fixture
def messages(caplog, monkeypatch):
    """What recipes_lib and transformers log (their loggers do not propagate once set up)."""
    for name in ("transformers", "recipes_lib"):
        monkeypatch.setattr(logging.getLogger(name), "propagate", True)
    caplog.set_level(logging.INFO)
    return caplog


def lines(caplog, start: int = 0) -> list[str]:
    return [record.getMessage() for record in caplog.records[start:]]


def warnings_of(caplog, start: int = 0) -> list[str]:
    return [r.getMessage() for r in caplog.records[start:] if r.levelno == logging.WARNING]


def test_a_run_predict_and_export_say_the_datas_percentiles_and_advise_what_each_accepts(
    tmp_path, messages, monkeypatch
):
    data = {
        split: write_csv(tmp_path / f"{split}.csv", documents(seed))
        for split, seed in (("train", 1), ("validation", 2))
    }
    tokenizer = word_tokenizer(word_vocabulary())
    assert (
        sorted(len(ids) for ids in tokenizer([t for t, _ in documents(2)], verbose=False)["input_ids"])
        == LENGTHS
    )
    output_dir = tmp_path / "run"
    args = run_args(build_tiny_bert(tmp_path / "bert"), data, output_dir, "--max_seq_length", str(MAX_SEQ_LENGTH),
                    "--text_column_names", "text", steps=1, eval_strategy="no")  # fmt: skip
    results = run_in_process("full_ft", args)

    # The recipe: each split's line and results.json hold the data's figures; the warning names the
    # model's limit (not 190, which the model cannot take), then the two --long_text modes.
    for split in ("train", "validation"):
        assert any(line.startswith(f"Lengths of {split} ") and FIGURES in line for line in lines(messages))
        report = results["truncation"][split]
        assert (report["length_keeping_95pct"], report["length_keeping_99pct"]) == (P95, P99)
        assert (
            report["max_seq_length_keeps_share"] == 0.15 and report["model_max_length_keeps_share"] == 0.625
        )
        assert report["model_max_length"] == MODEL_LIMIT
    (warning,) = [w for w in warnings_of(messages) if "longer than max_seq_length" in w]
    assert "95% of the train fit in 190 tokens, 99% in 200, more than the model takes" in warning
    assert "--max_seq_length 128, its limit, keeps 62% whole" in warning
    assert "--long_text head_tail" in warning and "--long_text sliding_window" in warning
    assert not re.search(r"--max_seq_length (?!128\b)\d+", warning), warning

    # predict: the input file by its name (not "test"), the same figures, no option predict lacks.
    from recipes_workbench.tools.predict import predict

    start = len(messages.records)
    predict(output_dir, data["validation"], progress=False)
    assert any(
        line.startswith("Lengths of validation.csv ") and FIGURES in line for line in lines(messages, start)
    )
    assert not [
        line for line in lines(messages, start) if line.startswith("Lengths of test") or "of the test" in line
    ]
    (warning,) = [w for w in warnings_of(messages, start) if "longer than max_seq_length" in w]
    assert "as the run was trained (max_seq_length 32, --long_text truncate)" in warning
    assert "95% of the validation.csv fit in 190 tokens, 99% in 200; the model takes at most 128" in warning
    assert "--max_seq_length " not in warning and "--long_text head_tail" not in warning

    # export: the gate's rows are logged with the model's limit too (the export stops there).
    from recipes_workbench.export import command

    class Stop(Exception):
        pass

    def gate_rows_then_stop(*args):
        command_gate_rows(*args)
        raise Stop

    command_gate_rows = command.gate_rows
    monkeypatch.setattr(command, "gate_rows", gate_rows_then_stop)
    start = len(messages.records)
    with pytest.raises(Stop):
        command.export_run(output_dir, progress=False)
    assert any(
        line.startswith("Lengths of validation ") and FIGURES in line for line in lines(messages, start)
    )
    (warning,) = [w for w in warnings_of(messages, start) if "longer than max_seq_length" in w]
    assert "as the run was trained" in warning and "--max_seq_length " not in warning


def report(lengths, max_seq_length: int, model_limit: int | None) -> dict:
    return truncation_report(np.array(lengths), len(lengths), max_seq_length, model_limit)


@pytest.mark.parametrize(
    "max_seq_length, model_limit, advised, not_advised",
    [
        (32, 512, "--max_seq_length 190 keeps 95% of the train whole, 200 keeps 99%", None),
        (32, 195, "--max_seq_length 190 keeps 95% of the train whole (99% need 200, more than the model's 195)", None),
        (32, 128, "--max_seq_length 128, its limit, keeps 62% whole", "--max_seq_length 190"),
        (128, 128, "95% of the train fit in 190 tokens, 99% in 200; the model takes no more than 128 tokens",
         "--max_seq_length"),
        (32, None, "--max_seq_length 190 keeps 95% of the train whole, 200 keeps 99%", None),
    ],
)  # fmt: skip
def test_a_recipe_is_advised_a_max_seq_length_only_up_to_the_models_limit(
    max_seq_length, model_limit, advised, not_advised, messages
):
    data_args = DataArguments(train_file="unused.csv", max_seq_length=max_seq_length)
    log_truncation({"train": report(LENGTHS, max_seq_length, model_limit)}, data_args)
    (warning,) = warnings_of(messages)
    assert advised in warning and "--long_text head_tail" in warning, warning
    assert not_advised is None or not_advised not in warning


def test_a_pair_is_said_to_lose_its_longer_texts_end_and_is_advised_only_what_pairs_accept(messages):
    """truncation=True on a pair is the tokenizer's longest_first: the longer text is shortened first
    (shown below on the tokenizer itself). head_tail and sliding_window refuse pairs: never advised."""
    tokenizer = word_tokenizer(word_vocabulary())
    short, long = "red cat", " ".join(["the"] * 40)
    cut = tokenizer(short, long, truncation=True, max_length=MAX_SEQ_LENGTH)["input_ids"]
    assert tokenizer.decode(cut, skip_special_tokens=True).startswith("red cat the")  # the short one whole
    rows = {"a": [short] * 20, "b": [long] * 20, "label": ["warm"] * 20}
    data = ClassificationData(
        raw=DatasetDict({"train": Dataset.from_dict(rows)}),
        text_columns=("a", "b"),
        label_column="label",
        labels=LabelMapping(names=["cool", "warm"], to_id={"cool": 0, "warm": 1}),
        description="pairs",
    )
    data_args = DataArguments(train_file="unused.csv", max_seq_length=MAX_SEQ_LENGTH, overwrite_cache=True)
    tokenize(data, tokenizer, data_args, lambda desc: contextlib.nullcontext(), model_limit=MODEL_LIMIT)
    (warning,) = warnings_of(messages)
    assert "100% of the train pairs are longer than max_seq_length 32" in warning
    assert "the tokenizer shortens the longer text of each pair first (truncation longest_first)" in warning
    assert "--max_seq_length 45 keeps 95% of the train whole, 45 keeps 99%" in warning  # 1 + 2 + 1 + 40 + 1
    assert "--long_text" not in warning and "cut at the end" not in warning


def test_whole_texts_tokenized_on_purpose_raise_no_tokenizer_length_warning(messages):
    """Every text is tokenized whole to measure it before it is cut: transformers' "Token indices sequence
    length is longer than the specified maximum sequence length" (an indexing error that never follows)
    is not shown for that call, and the tokenizer still warns elsewhere."""
    tokenizer = word_tokenizer(word_vocabulary())  # model_max_length 128; the longest document has 200
    data = ClassificationData(
        raw=DatasetDict({"test": Dataset.from_dict({"text": [t for t, _ in documents(3)]})}),
        text_columns=("text",),
        label_column="label",
        labels=LabelMapping(names=["cool", "warm"], to_id={"cool": 0, "warm": 1}),
        description="long documents",
    )
    data_args = DataArguments(train_file="unused.csv", max_seq_length=MAX_SEQ_LENGTH, overwrite_cache=True)
    tokenize(data, tokenizer, data_args, lambda desc: contextlib.nullcontext(), model_limit=MODEL_LIMIT)
    assert not [line for line in lines(messages) if "Token indices sequence length" in line]
    tokenizer(" ".join(["the"] * 200))  # outside the project's call the warning is transformers' as ever
    assert [line for line in lines(messages) if "Token indices sequence length" in line]


def test_predict_names_its_input_and_a_windowed_log_counts_windows(messages):
    data_args = DataArguments(
        train_file="unused.csv", max_seq_length=MAX_SEQ_LENGTH, long_text="sliding_window"
    )
    read = LengthsRead(finished_run="the run", names={"test": "new.csv"})
    log_truncation({"test": report(LENGTHS, MAX_SEQ_LENGTH, MODEL_LIMIT)}, data_args, read)
    (line,) = lines(messages)
    assert line.startswith("Lengths of new.csv (max_seq_length 32, --long_text sliding_window)")
    assert FIGURES in line and line.endswith("; 40 windows")
    assert not warnings_of(messages)  # sliding_window reads every token
