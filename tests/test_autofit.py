"""--auto_batch_size: planner first, out-of-memory back-off second, effective batch unchanged."""

from __future__ import annotations

import functools

import pytest
import torch
from transformers import BertForSequenceClassification

import recipes_lib.training.autofit as autofit
from recipes_lib.config.recipe_spec import TrainingShape
from recipes_lib.memory.planner import Setup, load_config, plan_memory
from recipes_lib.training.autofit import batch_for
from tests.helpers.runs import QUICK, run_args, run_in_process


def test_the_batch_is_the_largest_divisor_of_the_effective_batch_that_fits():
    assert batch_for(32, 12) == 8  # 8 x 4 = 32 exactly; 12 does not divide 32
    assert batch_for(32, 32) == 32
    assert batch_for(32, 500) == 32  # never above what was asked for
    assert batch_for(24, 7) == 6
    assert batch_for(7, 6) == 1


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
    assert chosen["planner_largest_batch"] == 16  # plenty of RAM: the planner alone would keep 16
    assert chosen["out_of_memory_at_batch_sizes"] == [16, 8]
    assert (chosen["per_device_train_batch_size"], chosen["gradient_accumulation_steps"]) == (4, 4)
    assert (
        results["config"]["per_device_train_batch_size"] * results["config"]["gradient_accumulation_steps"]
        == 16
    )
    assert attempts[:2] == [16, 8] and set(attempts[2:]) == {4}
    assert results["train_steps"] == 2  # two optimizer steps of 4 x 4 examples, as asked
    assert results["train_samples"] > 0 and results["eval_accuracy"] is not None


def test_the_planner_picks_the_batch_before_anything_runs_out(
    tiny_bert, learnable_data, tmp_path, monkeypatch, out_of_memory_above
):
    attempts = out_of_memory_above(1000)  # never fails: only the planner decides
    # A budget that holds the batch of 4 (with the gradients kept through accumulation) and not the
    # batch of 8, by the planner's own arithmetic.
    config = load_config(str(tiny_bert))
    four = Setup(
        shape=TrainingShape(), batch_size=4, seq_length=32, device="cpu", gradient_accumulation_steps=4
    )
    fits_four = plan_memory(config, four).total
    monkeypatch.setattr(autofit, "device_budget_bytes", lambda device: fits_four)
    args = run_args(tiny_bert, learnable_data, tmp_path / "run", "--auto_batch_size", "true", **QUICK)
    args[args.index("--per_device_train_batch_size") + 1] = "16"
    results = run_in_process("full_ft", args)
    chosen = results["auto_batch_size"]
    assert chosen["planner_largest_batch"] in (4, 5, 6, 7)
    assert (chosen["per_device_train_batch_size"], chosen["gradient_accumulation_steps"]) == (4, 4)
    assert chosen["out_of_memory_at_batch_sizes"] == []
    assert set(attempts) == {4}


def _arguments(batch_size: int, seq_length: int):
    """The parts of a run's arguments the planner reads."""
    from types import SimpleNamespace

    training = SimpleNamespace(
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=1,
        bf16=False,
        fp16=False,
        activation_checkpointing=False,
        device=torch.device("cpu"),
    )
    return SimpleNamespace(
        training=training,
        data=SimpleNamespace(max_seq_length=seq_length),
        model=SimpleNamespace(attn_implementation=None),
    )


def test_the_batch_is_planned_for_the_shape_the_recipe_gives(tiny_bert):
    """choose_batch_size plans what it is handed: the same budget fits a larger batch under LoRA."""
    from recipes_lib.config.recipe_spec import LoraShape

    config = load_config(str(tiny_bert))
    lora = TrainingShape(adapters=LoraShape())
    setup = autofit.planner_setup(_arguments(4, 32), lora, torch.device("cpu"))
    assert (setup.shape, setup.batch_size, setup.seq_length, setup.device) == (lora, 4, 32, "cpu")
    # A budget that holds full fine-tuning's batch of 4 with the gradients kept through accumulation.
    budget = plan_memory(
        config, Setup(batch_size=4, seq_length=32, device="cpu", gradient_accumulation_steps=2)
    ).total
    full_choice = autofit.choose_batch_size(_arguments(64, 32), TrainingShape(), config, budget_bytes=budget)
    lora_choice = autofit.choose_batch_size(_arguments(64, 32), lora, config, budget_bytes=budget)
    assert full_choice.planner_largest_batch in (4, 5, 6, 7) and full_choice.batch_size == 4
    assert lora_choice.planner_largest_batch > full_choice.planner_largest_batch
    assert (
        lora_choice.batch_size * lora_choice.accumulation
        == full_choice.batch_size * full_choice.accumulation
        == 64
    )
