"""What RecipeTrainer needs from the installed transformers' Trainer, named one by one.

Most of what RecipeTrainer adds goes through the Trainer's public extension points: callbacks
(the sampler's epoch, the signal stop), the public dataloader getters (evaluation in input order),
`compute_loss_func`, `training_step`, `save_model`; the run's evaluation loss goes through
`compute_metrics`, with any Trainer. These tests check that those points still do what the library
relies on. Two private methods have no public stand-in and are
still overridden (training/trainer.py, PRIVATE_TRAINER_HOOKS): each is checked here by name and
parameters, so a transformers release that changes one fails here, with the feature it breaks and
what to do, before any recipe trains differently.
"""

from __future__ import annotations

import pytest
from transformers import AutoModelForSequenceClassification, Trainer, TrainerState, TrainingArguments

from recipes_lib.training.trainer import (
    RecipeTrainer,
    SamplerEpoch,
    ShuffledLengthGroupedSampler,
    check_private_hooks,
)
from tests.helpers.models import token_rows, word_tokenizer, word_vocabulary

FIX = (
    "install a transformers release inside setup.cfg's range (make test-latest, make test-oldest), or "
    "port RecipeTrainer's override in src/recipes_lib/training/trainer.py to the new Trainer and update "
    "its entry in PRIVATE_TRAINER_HOOKS"
)


def test_each_private_trainer_method_the_library_overrides_is_still_there():
    assert check_private_hooks(Trainer) is None, f"RecipeTrainer's private Trainer methods changed: {FIX}."


def test_the_trainer_still_builds_its_batches_from_the_size_auto_batch_size_changes(tiny_trainer):
    tiny_trainer._train_batch_size = 3  # what autofit's back-off sets (the arguments say 4)
    batches = list(tiny_trainer.get_train_dataloader())  # one pass: a second would be the next epoch
    assert [len(batch["input_ids"]) for batch in batches] == [3] * 8, (
        "--auto_batch_size sets the private Trainer._train_batch_size (training/autofit.py), which the "
        f"installed transformers no longer builds its training batches from: {FIX}."
    )
    # The length grouping follows the backed-off batch too: the rows come in the order of a sampler
    # grouping steps of 3 rows (one process, no accumulation), not the arguments' 4.
    rows = [
        (int(mask.sum()), int(label))
        for batch in batches
        for mask, label in zip(batch["attention_mask"], batch["labels"], strict=True)
    ]
    dataset = tiny_trainer.train_dataset
    grouped_by_3 = ShuffledLengthGroupedSampler(dataset["length"], step_size=3, seed=tiny_trainer.args.seed)
    assert rows == [(dataset[i]["length"], dataset[i]["labels"]) for i in grouped_by_3]


def test_a_changed_private_method_stops_the_import_with_one_paragraph_naming_the_fix():
    import transformers

    class Renamed:  # a release that renamed _get_train_sampler and changed _save_checkpoint
        def _save_checkpoint(self, model, trial, metrics=None): ...

        def _get_output_dir(self, trial): ...

    with pytest.raises(ImportError) as error:
        check_private_hooks(Renamed)
    message = str(error.value)
    assert "\n" not in message
    assert "Renamed._get_train_sampler(self, train_dataset)" in message and "has no such method" in message
    assert f"transformers {transformers.__version__}" in message
    assert 'pip install "transformers' in message

    Renamed._get_train_sampler = lambda self, train_dataset=None: None
    with pytest.raises(ImportError, match=r"defines _save_checkpoint\(model, trial, metrics\)"):
        check_private_hooks(Renamed)


def test_importing_the_trainer_module_checks_the_private_methods():
    import subprocess
    import sys

    probe = (
        "import transformers; del transformers.Trainer._get_output_dir; import recipes_lib.training.trainer"
    )
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert ran.returncode != 0 and "Trainer._get_output_dir(self, trial)" in ran.stderr, ran.stderr[-2000:]


# --- The public extension points, doing what RecipeTrainer relies on --------------------------------


@pytest.fixture
def tiny_trainer(tiny_bert, tmp_path):
    from transformers import DataCollatorWithPadding

    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        num_train_epochs=3,
        train_sampling_strategy="group_by_length",
        save_strategy="no",
        eval_strategy="no",
        report_to="none",
        use_cpu=True,
    )
    return RecipeTrainer(
        model=AutoModelForSequenceClassification.from_pretrained(tiny_bert),
        args=args,
        train_dataset=token_rows(24),
        eval_dataset=token_rows(18),
        data_collator=DataCollatorWithPadding(word_tokenizer(word_vocabulary())),
    )


def test_the_trainer_builds_its_training_dataloader_with_our_sampler(tiny_trainer):
    """The stock get_train_dataloader still takes its sampler from `_get_train_sampler`."""
    loader = tiny_trainer.get_train_dataloader()
    rows = [
        (int(mask.sum()), int(label))
        for batch in loader
        for mask, label in zip(batch["attention_mask"], batch["labels"], strict=True)
    ]
    sampler = tiny_trainer.sampler_epoch.sampler
    assert isinstance(sampler, ShuffledLengthGroupedSampler)
    dataset = tiny_trainer.train_dataset
    assert rows == [(dataset[i]["length"], dataset[i]["labels"]) for i in sampler], (
        "Trainer.get_train_dataloader no longer draws its rows from _get_train_sampler: RecipeTrainer's "
        f"length-grouped, resumable training order is not used: {FIX}."
    )


def test_each_epoch_draws_its_own_order_through_the_epoch_callback(tiny_trainer, monkeypatch):
    """on_epoch_begin comes before the epoch's batches are drawn, on every epoch of a real run.

    (In this single-process run accelerate's set_epoch reaches the sampler too; in a multi-process
    run resumed mid-epoch only the callback does, so its place before the draw is what counts.)
    """
    events = []
    draw, begin = ShuffledLengthGroupedSampler.__iter__, SamplerEpoch.on_epoch_begin

    def recording_draw(self):
        events.append(("draw", self.epoch))
        return draw(self)

    def recording_begin(self, *args, **kwargs):
        begin(self, *args, **kwargs)
        events.append(("begin", self.epoch))

    monkeypatch.setattr(ShuffledLengthGroupedSampler, "__iter__", recording_draw)
    monkeypatch.setattr(SamplerEpoch, "on_epoch_begin", recording_begin)
    tiny_trainer.train()
    expected = [(event, epoch) for epoch in range(3) for event in ("begin", "draw")]
    assert events == expected, (
        "the Trainer no longer calls on_epoch_begin before each epoch draws its batches, so the "
        f"training sampler may replay another epoch's order on resume (events: {events}): {FIX}."
    )


def test_the_epoch_callback_counts_epochs_from_the_state_a_run_resumes_with():
    callback, state = SamplerEpoch(), TrainerState()
    callback.sampler = ShuffledLengthGroupedSampler([3, 1, 2, 5], step_size=2, seed=0)
    seen = []
    for start in (None, 1.5, 2.0):  # a fresh run; resumed half-way through epoch 1; at the end of epoch 1
        state.epoch = start
        callback.on_train_begin(None, state, None)
        for _ in range(2):
            callback.on_epoch_begin(None, state, None)
            seen.append(callback.sampler.epoch)
    assert seen == [0, 1, 1, 2, 2, 3]


@pytest.mark.parametrize("getter", ["get_eval_dataloader", "get_test_dataloader"])
def test_evaluation_and_prediction_follow_the_input_rows_under_length_grouping(tiny_trainer, getter):
    eval_dataset = tiny_trainer.eval_dataset
    loader = getattr(tiny_trainer, getter)(eval_dataset)
    assert [int(n) for batch in loader for n in batch["attention_mask"].sum(dim=1)] == eval_dataset["length"]
    assert tiny_trainer.args.train_sampling_strategy == "group_by_length"  # lifted only while building


def test_a_loss_from_compute_metrics_is_the_eval_loss_the_trainer_reports(tiny_trainer):
    """The run's compute_metrics returns the loss over the gathered predictions (run/metrics.py); the
    Trainer files a `loss` key from compute_metrics under eval_loss in place of its own average."""
    tiny_trainer.compute_metrics = lambda prediction: {"loss": 123.5, "rows": len(prediction.label_ids)}
    metrics = tiny_trainer.evaluate()
    assert metrics["eval_loss"] == 123.5
    assert metrics["eval_rows"] == len(tiny_trainer.eval_dataset)


def test_the_recipes_length_grouping_reaches_the_sampler(tiny_bert, tmp_path):
    """--length_grouping is a recipe argument; RecipeTrainer hands it to the sampler (a plain
    TrainingArguments, without it, gets the library's default)."""
    from transformers import DataCollatorWithPadding

    from recipes_lib.config.arguments import DEFAULT_LENGTH_GROUPING

    for grouping in ("stock", None):
        args = TrainingArguments(
            output_dir=str(tmp_path),
            train_sampling_strategy="group_by_length",
            report_to="none",
            use_cpu=True,
        )
        if grouping is not None:
            args.length_grouping = grouping
        trainer = RecipeTrainer(
            model=AutoModelForSequenceClassification.from_pretrained(tiny_bert),
            args=args,
            train_dataset=token_rows(24),
            data_collator=DataCollatorWithPadding(word_tokenizer(word_vocabulary())),
        )
        trainer.get_train_dataloader()
        assert trainer.sampler_epoch.sampler.grouping == (grouping or DEFAULT_LENGTH_GROUPING)
