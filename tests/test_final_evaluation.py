"""The recipes' `run.final_evaluation(trainer)` reuses the last epoch's evaluation when the weights are unchanged.

Under eval_strategy "epoch" (the default) the last epoch ends with an evaluation, and a final
`trainer.evaluate()` right after training would run the same pass on the same weights.
`final_metrics` returns that evaluation's metrics instead; the predictions the run's
compute_metrics keeps are that pass's too, and `final_evaluation` hands both on as one value. These tests check that the reused figures are exactly
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

from recipes_lib.run.recipe_run import RecipeRun
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
    evaluation reused and with it forced to run again, differ only in timings and paths.

    The second run's write_results gets a Trainer with none of the run's callbacks left in its list and
    a compute_metrics that keeps no predictions: the record is written from the values it is handed
    (`run.final_evaluation`'s metrics and predictions, the callbacks the run keeps), not fetched back."""
    outputs, passes = {}, []
    evaluation_loop, write_results = Trainer.evaluation_loop, RecipeRun.write_results

    def counted(self, *args, **kwargs):
        passes.append(kwargs.get("metric_key_prefix"))
        return evaluation_loop(self, *args, **kwargs)

    def from_values_only(run, trainer, *args):
        handler = trainer.callback_handler  # the Trainer's own callbacks only (printing, W&B's)
        handler.callbacks = [
            kept for kept in handler.callbacks if kept.__module__.startswith("transformers.")
        ]
        vars(trainer.compute_metrics).pop("last_predictions")
        return write_results(run, trainer, *args)

    monkeypatch.setattr(Trainer, "evaluation_loop", counted)
    for way in ("reused", "second_pass"):
        if way == "second_pass":  # every evaluation sees "new" weights: the pass always runs
            monkeypatch.setattr(callbacks, "weights_version", lambda model, step: object())
            monkeypatch.setattr(RecipeRun, "write_results", from_values_only)
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


def test_a_trainer_without_the_runs_callbacks_or_metrics_is_told_what_to_hand_it(tiny_bert, tmp_path):
    """run.final_evaluation reads the figures of the callbacks the run built, and the predictions of its
    compute_metrics: a Trainer built without either is told how to hand them over."""
    from recipes_lib.config.parsing import parse_arguments
    from recipes_lib.config.recipe_spec import RecipeSpec

    spec = RecipeSpec("full_ft")
    run = RecipeRun(parse_arguments(spec, ["--output_dir", str(tmp_path), "--use_cpu", "true"]), spec)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert)
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    fix = r"hand the Trainer callbacks=run\.callbacks\(model\) .* and compute_metrics=prepared\.metrics"

    def keeps_predictions(prediction):  # as the run's compute_metrics (run/metrics.py) does
        return {}

    keeps_predictions.last_predictions = None
    run.callbacks(model)  # built, but not handed to the Trainer
    for metric, built in ((keeps_predictions, []), (KeepsPredictions(), run.callbacks(model))):
        trainer = Trainer(model=model, args=args, compute_metrics=metric, callbacks=built)
        with pytest.raises(RuntimeError, match=fix):
            run.final_evaluation(trainer)
