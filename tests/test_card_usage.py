"""The model card's "How to use", run as a reader would run it: its code, taken from the generated README.md
and executed on the run's own validation rows, gives the run's eval_predictions.jsonl row for row.

Every form a run can have: a sentence pair, a score, a truncating run whose texts are longer than
max_seq_length and than the model's limit (the tiny BERT takes 128 tokens), and the head_tail and
sliding_window runs, whose card gives `predict(text)`. The runs are two optimizer steps of the lively
tiny BERT (each input gets its own probabilities, so a wrong call cannot agree by chance).
"""

from __future__ import annotations

import csv
import random
import re
from pathlib import Path

import pytest

from recipes_lib.results import RunResults
from recipes_lib.tracking.card_usage import pipeline_code
from tests.helpers.data import COLOURS, NOISE, learnable_rows, read_jsonl, regression_files, write_csv
from tests.helpers.runs import QUICK, run_args, run_in_process

TOLERANCE = 1e-4  # eval_predictions.jsonl rounds to 6 decimals; the run batches (and pads) differently


def pair_rows(count: int, seed: int) -> list[tuple[str, str, str]]:
    """(sentence1, sentence2, label): 'same' when both name a colour of one kind."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        first, second = rng.choice(sorted(COLOURS)), rng.choice(sorted(COLOURS))
        same = "same" if COLOURS[first] == COLOURS[second] else "other"
        words = [" ".join([*rng.sample(NOISE, rng.randint(1, 6)), colour]) for colour in (first, second)]
        rows.append((words[0], words[1], same))
    return rows


def long_rows(count: int, seed: int) -> list[tuple[str, str]]:
    """The colour task with texts of 20 to 300 words: many over max_seq_length 32, some over the model's 128."""
    rng = random.Random(seed)
    rows = []
    for text, label in learnable_rows(count, seed):
        rows.append((" ".join([text, *rng.choices(NOISE, k=rng.randint(20, 300))]), label))
    return rows


def files(directory: Path, rows, header) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return {
        split: write_csv(directory / f"{split}.csv", rows(n, seed), header=header)
        for split, n, seed in (("train", 24, 1), ("validation", 12, 2))
    }


def run(model: Path, data: dict[str, Path], output_dir: Path, *extra: str) -> Path:
    run_in_process("full_ft", run_args(model, data, output_dir, *extra, **QUICK))
    return output_dir


@pytest.fixture(scope="module")
def runs(lively_bert, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("card-usage")
    pairs = files(root / "pairs", pair_rows, ("sentence1", "sentence2", "label"))
    scores = regression_files(root / "scores", 24, 12)
    long = files(root / "long", long_rows, ("text", "label"))
    return {
        "pair": run(lively_bert, pairs, root / "pair"),
        "regression": run(lively_bert, scores, root / "regression"),
        "truncate": run(lively_bert, long, root / "truncate"),
        "head_tail": run(lively_bert, long, root / "head_tail", "--long_text", "head_tail"),
        "sliding_window": run(
            lively_bert, long, root / "sliding_window", "--long_text", "sliding_window", "--stride", "8"
        ),
    }


def card_code(output_dir: Path) -> str:
    """The card's first python block, as a reader would run it from the folder above the run's."""
    text = (output_dir / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)[0]


def run_card(output_dir: Path, monkeypatch) -> dict:
    monkeypatch.chdir(output_dir.parent)
    namespace: dict = {}
    exec(card_code(output_dir), namespace)  # noqa: S102 - the card's own example, on the local output_dir
    return namespace


def validation_rows(output_dir: Path) -> list[dict]:
    config = RunResults.from_dict(__import__("json").loads((output_dir / "results.json").read_text())).config
    with open(config["validation_file"], newline="") as handle:
        return list(csv.DictReader(handle))


def assert_same(answers: list[dict[str, float]], output_dir: Path) -> None:
    expected = read_jsonl(output_dir / "eval_predictions.jsonl")
    assert len(answers) == len(expected)
    for answer, row in zip(answers, expected, strict=True):
        assert answer == pytest.approx(row["probabilities"], abs=TOLERANCE), (answer, row)


def test_a_pair_models_card_passes_text_and_text_pair_and_gives_the_runs_answers(runs, monkeypatch):
    code = card_code(runs["pair"])
    assert '{"text": "the sentence1", "text_pair": "the sentence2"}' in code
    classifier = run_card(runs["pair"], monkeypatch)["classifier"]
    rows = validation_rows(runs["pair"])
    outputs = classifier([{"text": row["sentence1"], "text_pair": row["sentence2"]} for row in rows])
    assert_same([{item["label"]: item["score"] for item in output} for output in outputs], runs["pair"])
    # What the card said before: one string per input, here the pair joined, is another answer.
    joined = classifier([f"{row['sentence1']} {row['sentence2']}" for row in rows])
    expected = read_jsonl(runs["pair"] / "eval_predictions.jsonl")
    assert any(
        abs(output[0]["score"] - row["probabilities"][output[0]["label"]]) > TOLERANCE
        for output, row in zip(joined, expected, strict=True)
    )


def test_a_regression_models_card_reads_the_score_unsquashed(runs, monkeypatch):
    namespace = run_card(runs["regression"], monkeypatch)
    assert 'function_to_apply="none"' in card_code(runs["regression"])
    rows = validation_rows(runs["regression"])
    scores = [output[0]["score"] for output in namespace["classifier"]([row["text"] for row in rows])]
    expected = [row["prediction"] for row in read_jsonl(runs["regression"] / "eval_predictions.jsonl")]
    assert scores == pytest.approx(expected, abs=TOLERANCE)
    assert isinstance(namespace["outputs"][0][0]["score"], float)  # the card's own example call ran


def test_a_truncating_runs_card_cuts_at_its_max_seq_length_even_past_the_models_limit(runs, monkeypatch):
    rows = validation_rows(runs["truncate"])
    lengths = [len(row["text"].split()) for row in rows]
    assert max(lengths) > 128 and min(lengths) > 32  # past the model's limit, and all past max_seq_length
    assert "truncation=True, max_length=32" in card_code(runs["truncate"])
    classifier = run_card(runs["truncate"], monkeypatch)["classifier"]
    outputs = classifier([row["text"] for row in rows])
    assert_same([{item["label"]: item["score"] for item in output} for output in outputs], runs["truncate"])


@pytest.mark.parametrize("mode", ["head_tail", "sliding_window"])
def test_a_windowed_runs_card_gives_predict_which_cuts_and_pools_as_the_run_did(mode, runs, monkeypatch):
    code = card_code(runs[mode])
    assert "def predict(text)" in code and f"--long_text {mode}" in code
    predict = run_card(runs[mode], monkeypatch)["predict"]
    assert_same([predict(row["text"]) for row in validation_rows(runs[mode])], runs[mode])


@pytest.mark.parametrize(
    ("problem_type", "columns", "expected"),
    [
        ("single_label_classification", ["text"], '["an example text"]'),
        ("regression", ["text"], 'outputs[0][0]["score"]'),
        ("single_label_classification", ["question", "answer"], '"text_pair": "the answer"'),
    ],
)
def test_the_call_is_written_for_the_task_and_its_inputs(problem_type, columns, expected):
    results = RunResults.from_dict(
        {"problem_type": problem_type, "text_columns": columns, "config": {"max_seq_length": 64}}
    )
    code = pipeline_code(results, 'model="run"')
    assert expected in code and "truncation=True, max_length=64" in code


# head_tail's predict counts the tokenizer's special tokens as training does (SpecialTokens.of), not 1 and 1.
@pytest.mark.parametrize("template", [None, "[CLS] $A [SEP] [SEP]", "$A [SEP]"])
def test_the_head_tail_predict_cuts_as_the_run_did_whatever_the_special_tokens(tiny_bert, template):
    import torch
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    from recipes_lib.data.long_text import HEAD_TAIL, SpecialTokens, cut_document
    from recipes_lib.tracking.card_windowed import windowed_code

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    if template is not None:  # a tokenizer with another count of special tokens on a side
        tokens = [("[CLS]", tokenizer.cls_token_id), ("[SEP]", tokenizer.sep_token_id)]
        tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
            single=template, special_tokens=tokens
        )
    special = SpecialTokens.of(tokenizer)
    assert template is None or (special.before, special.after) != (1, 1)
    seen = []

    class Model:
        config = type("Config", (), {"id2label": {0: "cool", 1: "warm"}})()

        def __call__(self, input_ids, **_):
            seen.append(input_ids[0].tolist())
            return type("Output", (), {"logits": torch.zeros(1, 2)})()

    results = RunResults.from_dict({"problem_type": "single_label_classification", "text_columns": ["text"],
                                    "config": {"max_seq_length": 18, "long_text": "head_tail"}})  # fmt: skip
    namespace = {"torch": torch, "model": Model(), "tokenizer": tokenizer}
    exec(windowed_code(results), namespace)
    for text in (" ".join(NOISE * 3), "a red cat"):  # cut, and short enough to stay whole
        seen.clear()
        namespace["predict"](text)
        ids = tokenizer(text)["input_ids"]
        assert seen == cut_document(ids, special, special.room(18), HEAD_TAIL, 0), text
