"""full_ft end to end through `accelerate launch`, as a user runs it: results, saved model, learning."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from tests.helpers.repo import REPO_ROOT
from tests.helpers.runs import run_args, run_recipe_process

REQUIRED_KEYS = {
    "recipe", "model_name_or_path", "dataset", "eval_accuracy", "eval_f1", "eval_samples", "train_runtime_s",
    "train_samples_per_s", "train_tokens_per_s", "pad_ratio", "params_total", "params_trainable",
    "peak_memory_gib", "peak_memory_reserved_gib", "device", "versions", "config",
}  # fmt: skip


@pytest.fixture(scope="module")
def full_ft_run(tiny_bert, learnable_data, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("full_ft")
    completed = run_recipe_process("full_ft", run_args(tiny_bert, learnable_data, output_dir))
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return output_dir, json.loads((output_dir / "results.json").read_text())


def test_results_json_has_every_required_key_with_values_in_range(full_ft_run, tiny_bert):
    _, results = full_ft_run
    assert results.keys() >= REQUIRED_KEYS
    assert results["recipe"] == "full_ft"
    assert results["model_name_or_path"] == str(tiny_bert)
    assert 0.0 <= results["eval_accuracy"] <= 1.0 and 0.0 <= results["eval_f1"] <= 1.0
    assert results["eval_samples"] == 64
    assert (
        results["train_runtime_s"] > 0
        and results["train_samples_per_s"] > 0
        and results["train_tokens_per_s"] > 0
    )
    assert 0.0 <= results["pad_ratio"] < 1.0
    assert results["params_trainable"] == results["params_total"] > 0
    assert 0 < results["peak_memory_gib"] < 24
    assert results["peak_memory_reserved_gib"] is None  # CPU run: no CUDA allocator
    assert results["device"].startswith("cpu")
    assert {"torch", "transformers", "accelerate", "peft", "bitsandbytes"} <= results["versions"].keys()
    assert results["config"]["learning_rate"] == pytest.approx(2e-3)
    assert results["config"]["max_seq_length"] == 32
    assert all(math.isfinite(results[key]) for key in ("eval_accuracy", "eval_f1", "train_tokens_per_s"))


def test_every_field_of_the_record_is_written_in_order_and_read_back_identically(full_ft_run):
    """results.json holds every RunResults field, in the record's order, and read_results gives the same."""
    from recipes_lib.results import RESULT_KEYS, RunResults, read_results

    output_dir, written = full_ft_run
    assert tuple(written) == RESULT_KEYS
    record = read_results(output_dir)
    assert record.to_dict() == written and RunResults.from_dict(written) == record
    # What finish_run must give for a single-label run without options or a test split (the rest is null).
    for name in ("recipe", "problem_type", "eval_loss", "eval_split", "per_class", "confusion_matrix",
                 "params_total", "optimizer_state_bytes", "train_steps", "peak_memory_gib", "memory_phases",
                 "tensor_peak_gib", "precision", "precision_reason", "versions", "created_at", "config",
                 "neglected_classes", "train_loss_end", "train_loss_high"):  # fmt: skip
        assert getattr(record, name) is not None, name


def test_training_learns_the_learnable_task(full_ft_run):
    """The label is one colour word among noise: a model that trains gets it; chance is 0.5."""
    _, results = full_ft_run
    assert results["eval_accuracy"] >= 0.9, results
    # Its training loss at the end is well under the high-loss bar (3/4 of log 2): no high-loss note (issue #42).
    assert results["train_loss_high"] is False and results["train_loss_end"] < 0.5 * math.log(2), results


def test_saved_model_reloads_in_safetensors_and_gives_the_same_logits(full_ft_run):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    output_dir, results = full_ft_run
    assert (output_dir / "model.safetensors").is_file()
    assert not list(output_dir.glob("*.bin")) or all(
        p.name == "training_args.bin" for p in output_dir.glob("*.bin")
    )
    model = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert model.config.id2label == {0: "cool", 1: "warm"}  # string labels, sorted
    batch = tokenizer(["the red cat sat", "a blue dog ran today"], padding=True, return_tensors="pt")
    with torch.no_grad():
        first = model(**batch).logits
        again = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()(**batch).logits
    torch.testing.assert_close(first, again)
    predicted = [model.config.id2label[i] for i in first.argmax(-1).tolist()]
    assert predicted == ["warm", "cool"]


def test_a_second_run_into_the_same_output_dir_is_refused_and_changes_nothing(
    full_ft_run, tiny_bert, learnable_data
):
    output_dir, _ = full_ft_run
    before = (output_dir / "results.json").read_bytes()
    completed = run_recipe_process(
        "full_ft", run_args(tiny_bert, learnable_data, output_dir, "--max_steps", "1")
    )
    # The recipe exits 2; `accelerate launch` reports any non-zero exit of its child as 1.
    assert completed.returncode != 0
    assert "already holds a run" in completed.stderr and "--overwrite_output_dir" in completed.stderr
    assert (output_dir / "results.json").read_bytes() == before


def test_unknown_argument_fails_fast_with_a_suggestion(tiny_bert, learnable_data, tmp_path):
    """Run without accelerate: the recipe's own exit code and stderr, no traceback."""
    command = [sys.executable, str(REPO_ROOT / "recipes" / "full_ft.py")]
    command += run_args(tiny_bert, learnable_data, tmp_path / "out", "--learning_rat", "1e-4")
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert completed.returncode == 2
    assert "'--learning_rat'" in completed.stderr and "Did you mean 'learning_rate'" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert not (tmp_path / "out").exists()
