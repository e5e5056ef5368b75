"""The recipes' `run.final_metrics(trainer)` reuses the last epoch's evaluation when the weights are unchanged.

Under eval_strategy "epoch" (the default) the last epoch ends with an evaluation, and a final
`trainer.evaluate()` right after training would run the same pass on the same weights.
`final_metrics` returns that evaluation's metrics instead; the predictions the run's
compute_metrics keeps are that pass's too. These tests check that the reused figures are exactly
those of a second pass, that anything that changes the weights, or another pass in between, makes
it evaluate again, and that `trainer.evaluate()` itself always evaluates, as in transformers.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import (
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

from recipes_lib.training import callbacks
from recipes_lib.training.callbacks import LastEpochEvaluation, final_metrics
from recipes_lib.training.trainer import RecipeTrainer
from tests.helpers.models import token_rows, word_tokenizer, word_vocabulary
from tests.helpers.runs import run_args, run_in_process

TIMINGS = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second")


class KeepsPredictions:
    """A compute_metrics that keeps the logits of the last pass it saw, as the run's does."""

    def __init__(self):
        self.passes, self.logits = 0, None

    def __call__(self, prediction):
        self.passes += 1
        self.logits = np.array(prediction.predictions)
        return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


@pytest.fixture
def trained(tiny_bert, tmp_path):
    """A RecipeTrainer that trained 2 epochs, evaluating after each."""
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        num_train_epochs=2,
        learning_rate=1e-3,
        train_sampling_strategy="group_by_length",
        eval_strategy="epoch",
        save_strategy="no",
        report_to="none",
        use_cpu=True,
    )
    trainer = RecipeTrainer(
        model=AutoModelForSequenceClassification.from_pretrained(tiny_bert),
        args=args,
        train_dataset=token_rows(24),
        eval_dataset=token_rows(18),
        data_collator=DataCollatorWithPadding(word_tokenizer(word_vocabulary())),
        compute_metrics=KeepsPredictions(),
        callbacks=[LastEpochEvaluation()],
    )
    trainer.train()
    assert trainer.compute_metrics.passes == 2  # one evaluation per epoch
    return trainer


def without_timings(metrics: dict) -> dict:
    return {key: value for key, value in metrics.items() if key not in TIMINGS}


def final(trainer) -> dict:
    (last,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, LastEpochEvaluation)]
    return final_metrics(trainer, last)


def test_the_final_evaluation_reuses_the_last_epochs_and_matches_a_second_pass_exactly(trained):
    kept = trained.compute_metrics
    reused = final(trained)
    assert kept.passes == 2, "final_metrics ran the pass again on unchanged weights"
    reused_logits = kept.logits.copy()
    second = trained.evaluate()  # evaluates, every time, as in transformers
    assert kept.passes == 3
    assert without_timings(reused) == without_timings(second)
    assert np.array_equal(reused_logits, kept.logits)


def test_changed_weights_or_another_pass_in_between_evaluate_again(trained):
    kept = trained.compute_metrics
    with torch.no_grad():
        next(trained.model.parameters()).add_(0)  # an in-place write, even of nothing, counts
    final(trained)
    assert kept.passes == 3
    final(trained)
    assert kept.passes == 4  # an evaluation after training is never reused
    trained.evaluate()
    trained.evaluate()
    assert kept.passes == 6  # trainer.evaluate() always evaluates


def test_a_prediction_or_the_best_model_at_end_evaluates_again(trained):
    kept = trained.compute_metrics
    trained.args.load_best_model_at_end = True  # the weights may be another checkpoint's
    final(trained)
    assert kept.passes == 3
    trained.args.load_best_model_at_end = False
    trained.train()  # ends with an evaluation (passes 4 and 5), reusable now
    trained.predict(trained.eval_dataset)  # compute_metrics now holds another pass's predictions
    final(trained)
    assert kept.passes == 7


def test_a_recipe_run_writes_the_same_results_and_predictions_as_with_a_second_pass(
    tiny_bert, learnable_data, tmp_path, monkeypatch
):
    """full_ft with eval_strategy epoch: results.json, the predictions and the card, with the final
    evaluation reused and with it forced to run again, differ only in timings and paths."""
    outputs, passes = {}, []
    evaluation_loop = Trainer.evaluation_loop

    def counted(self, *args, **kwargs):
        passes.append(kwargs.get("metric_key_prefix"))
        return evaluation_loop(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "evaluation_loop", counted)
    for way in ("reused", "second_pass"):
        if way == "second_pass":  # every evaluation sees "new" weights: the pass always runs
            monkeypatch.setattr(callbacks, "weights_version", lambda model, step: object())
        passes.clear()
        output_dir = tmp_path / way
        run_in_process(
            "full_ft",
            run_args(tiny_bert, learnable_data, output_dir, epochs=2, batch_size=32, eval_strategy="epoch"),
        )
        assert passes == ["eval"] * (2 if way == "reused" else 3)  # one per epoch (and the final one)
        outputs[way] = output_dir

    def results(directory):
        data = json.loads((directory / "results.json").read_text())
        # Paths, times and the process's resident memory (its peak is the process's, and these runs
        # share one process) are all that may differ.
        varying = ("created_at", "output_dir", "config", "memory_phases", "peak_memory_gib")
        varying += ("train_runtime_s", "train_samples_per_s", "train_tokens_per_s")
        return {key: value for key, value in data.items() if key not in varying}

    def card(directory):
        text = (directory / "README.md").read_text().replace(directory.name, "RUN")
        return [line for line in text.splitlines() if not line.startswith(("- Peak memory:", "Created "))]

    reused, second = outputs["reused"], outputs["second_pass"]
    assert results(reused) == results(second)
    assert card(reused) == card(second)
    predictions = "eval_predictions.jsonl"
    assert (reused / predictions).read_bytes() == (second / predictions).read_bytes()


def test_a_trainer_without_the_runs_callbacks_is_told_what_to_hand_it():
    """final_metrics and write_results find the run's callbacks in the Trainer's list, or say how to put them there."""
    from types import SimpleNamespace

    from recipes_lib.run.recipe_run import run_callback

    trainer = SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[object()]))
    with pytest.raises(
        RuntimeError, match=r"no LastEpochEvaluation: hand it callbacks=run\.callbacks\(model\)"
    ):
        run_callback(trainer, LastEpochEvaluation)
    found = LastEpochEvaluation()
    trainer.callback_handler.callbacks.append(found)
    assert run_callback(trainer, LastEpochEvaluation) is found
