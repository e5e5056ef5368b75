"""--auto_batch_size: the whole effective batch first, out-of-memory back-off to its divisors, the effective
batch unchanged; the planner is not loaded (it is the workbench's)."""

from __future__ import annotations

import functools

import pytest
import torch
from transformers import BertForSequenceClassification

from tests.helpers.runs import QUICK, run_args, run_in_process


@pytest.fixture
def out_of_memory_above(monkeypatch):
    """Make training forwards of more than `rows` examples fail as CUDA does when memory runs out."""
    attempts = []

    def install(rows: int):
        original = BertForSequenceClassification.forward

        @functools.wraps(original)  # the Trainer reads forward's signature to pick the input columns
        def forward(self, *args, **kwargs):
            batch_rows = kwargs["input_ids"].shape[0]
            if self.training:
                attempts.append(batch_rows)
                if batch_rows > rows:
                    raise torch.OutOfMemoryError(
                        f"CUDA out of memory. Tried to allocate 2.00 GiB (simulated above {rows} rows)"
                    )
            return original(self, *args, **kwargs)

        monkeypatch.setattr(BertForSequenceClassification, "forward", forward)
        return attempts

    return install


def test_out_of_memory_backs_off_and_keeps_the_effective_batch(
    tiny_bert, learnable_data, tmp_path, out_of_memory_above
):
    attempts = out_of_memory_above(4)
    args = run_args(tiny_bert, learnable_data, tmp_path / "run", "--auto_batch_size", "true", **QUICK)
    args[args.index("--per_device_train_batch_size") + 1] = "16"
    results = run_in_process("full_ft", args)
    chosen = results["auto_batch_size"]
    assert chosen["requested_per_device_train_batch_size"] == 16
    assert chosen["out_of_memory_at_batch_sizes"] == [16, 8]
    assert (chosen["per_device_train_batch_size"], chosen["gradient_accumulation_steps"]) == (4, 4)
    assert (
        results["config"]["per_device_train_batch_size"] * results["config"]["gradient_accumulation_steps"]
        == 16
    )
    assert attempts[:2] == [16, 8] and set(attempts[2:]) == {4}
    assert results["train_steps"] == 2  # two optimizer steps of 4 x 4 examples, as asked
    assert results["train_samples"] > 0 and results["eval_accuracy"] is not None


def test_it_starts_with_the_whole_effective_batch_per_device(
    tiny_bert, learnable_data, tmp_path, out_of_memory_above
):
    attempts = out_of_memory_above(1000)  # never fails
    args = run_args(tiny_bert, learnable_data, tmp_path / "run", "--auto_batch_size", "true", **QUICK)
    args[args.index("--per_device_train_batch_size") + 1] = "4"
    results = run_in_process("full_ft", [*args, "--gradient_accumulation_steps", "4"])
    chosen = results["auto_batch_size"]
    assert (
        chosen["requested_per_device_train_batch_size"],
        chosen["requested_gradient_accumulation_steps"],
    ) == (4, 4)
    assert (chosen["per_device_train_batch_size"], chosen["gradient_accumulation_steps"]) == (16, 1)
    assert chosen["out_of_memory_at_batch_sizes"] == [] and set(attempts) == {16}
    assert "planner_largest_batch" not in chosen
