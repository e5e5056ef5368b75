"""A class the model never (or almost never) predicts is named, with what helps (issue #42)."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from recipes_lib.evaluation.neglected import neglected_classes, results_neglect_note
from recipes_lib.evaluation.predictions import per_class_report
from recipes_lib.evaluation.training_loss import high_loss_note, train_loss_check
from recipes_lib.results import RunResults
from recipes_workbench.crossval.label_issues import neglected_from_label_sets
from tests.helpers.runs import QUICK, run_args, run_in_process

NAMES = ["DESC", "ENTY", "ABBR"]


def neglected_from_predictions(predictions, references, names):
    """Single-label class ids as the one-class sets label-issues reads them."""
    return neglected_from_label_sets([{p} for p in predictions], [{r} for r in references], names)


def predictions_ignoring_abbr():
    """500 rows, 9 of them ABBR, which the model never predicts; DESC and ENTY mostly right."""
    references = np.array([0] * 250 + [1] * 241 + [2] * 9)
    predictions = references.copy()
    predictions[:20] = 1  # some DESC called ENTY
    predictions[-9:] = 0  # every ABBR called DESC
    return predictions, references


def test_a_class_never_predicted_is_named_with_its_support_and_recall():
    predictions, references = predictions_ignoring_abbr()
    report = per_class_report(predictions, references, NAMES)
    found = neglected_classes(report["per_class"], report["confusion_matrix"])
    assert found == [{"name": "ABBR", "support": 9, "recall": 0.0, "predicted": 0}]
    assert neglected_from_predictions(predictions, references, NAMES) == found


def test_a_class_almost_never_predicted_counts_and_one_found_often_enough_does_not():
    references = np.array([0] * 80 + [1] * 20)
    predictions = np.zeros(100, dtype=int)
    predictions[80] = 1  # 1 of 20: recall 0.05
    assert [c["name"] for c in neglected_from_predictions(predictions, references, ["a", "b"])] == ["b"]
    report = per_class_report(predictions, references, ["a", "b"])
    assert neglected_classes(report["per_class"], report["confusion_matrix"]) == [
        {"name": "b", "support": 20, "recall": 0.05, "predicted": 1}
    ]
    predictions[81:83] = 1  # 3 of 20: recall 0.15
    assert neglected_from_predictions(predictions, references, ["a", "b"]) == []
    report = per_class_report(predictions, references, ["a", "b"])
    assert neglected_classes(report["per_class"], report["confusion_matrix"]) == []
    assert neglected_classes(None) == []  # regression: no per-class scores


def test_the_note_names_the_class_and_the_remedies_the_run_did_not_use():
    entry = {"name": "ABBR", "support": 9, "recall": 0.0, "predicted": 0}
    run = {
        "neglected_classes": [entry],
        "config": {"learning_rate": 2e-5},
        "epochs": 2.0,
        "train_loss_end": 1.234,
    }
    note = results_neglect_note(RunResults.from_dict(run))
    assert (
        "never predicts the class on validation: 'ABBR' (9 rows, recall 0.00, predicted for 0 rows)" in note
    )
    assert (
        "--class_weights balanced" in note
        and "--learning_rate, e.g. --learning_rate 5e-05 (this run: 2e-05; up to 0.0001)" in note
    )
    assert (
        "more epochs: --num_train_epochs 4 (this run: 2)" in note
        and "Training loss at the end: 1.234." in note
    )
    weighted = results_neglect_note(
        RunResults.from_dict({"neglected_classes": [entry], "class_weights": {"ABBR": 20.0, "DESC": 0.5}})
    )
    assert "--class_weights" not in weighted  # already weighted: not offered again
    assert results_neglect_note(RunResults.from_dict({"neglected_classes": []})) is None
    results = RunResults.from_dict(
        {
            "neglected_classes": [entry],
            "config": {"learning_rate": 1e-4},
            "epochs": 3.0,
            "eval_split": "dev.tsv",
        }
    )
    note = results_neglect_note(results)
    assert (
        "on dev.tsv" in note and "this run: 0.0001" in note and "--num_train_epochs 6 (this run: 3)" in note
    )


def test_a_run_records_its_neglected_classes_and_high_loss_and_a_collapse_is_said_instead(
    tiny_bert, skewed_data, tmp_path, caplog
):  # noqa: F811
    """A 2-step run on data with 12% 'cool' at 1e-6: the tiny BERT is still its random weights, whose outputs
    barely depend on the input (output_std about 1e-5). results.json keeps its neglected class and its high
    loss; the end of the run says the collapse alone, not the notes that would ask for a higher rate
    (evaluation/collapse.py end_of_run_notes; each note alone: the tests above and below)."""
    args = run_args(tiny_bert, skewed_data, tmp_path / "run", "--learning_rate", "1e-6", **QUICK)
    with caplog.at_level(logging.WARNING, logger="recipes_lib.run.record"):
        results = run_in_process("full_ft", args)
    expected = [name for name, scores in results["per_class"].items() if scores["recall"] < 0.1]
    assert expected  # at 1e-6 for 2 steps the model is its random head: one class takes every row
    assert [entry["name"] for entry in results["neglected_classes"]] == expected
    # 2 steps at 1e-6: the loss is still where the random head started, near chance (log 2).
    assert results["train_loss_high"] is True and results["train_loss_end"] > 0.75 * math.log(2)
    assert results["model_collapsed"] is True
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    end = [message for message in said if message.startswith("The model collapsed at the end of the run")]
    assert len(end) == 1 and not [
        message for message in said if "predicts" in message or "Training loss" in message
    ]
    assert "higher --learning_rate" not in end[0] and "--learning_rate 2e-07 (this run: 1e-06)" in end[0]


def test_the_neglect_note_leaves_the_rate_to_a_loss_note_that_follows():
    entry = {"name": "cool", "support": 9, "recall": 0.0, "predicted": 0}
    run = {
        "neglected_classes": [entry],
        "config": {"learning_rate": 1e-6},
        "epochs": 1.0,
        "train_loss_end": 0.69,
    }
    follows = results_neglect_note(RunResults.from_dict({**run, "train_loss_high": True}))
    assert "Training loss at the end" not in follows and "--learning_rate" not in follows
    assert "a higher learning rate or more training (the training-loss note below)" in follows


def losses(values, every: int = 10) -> list[dict]:
    """A Trainer's log_history: a loss every `every` steps, then the end-of-training entry."""
    logged = [{"loss": v, "step": every * (i + 1), "learning_rate": 2e-5} for i, v in enumerate(values)]
    return [*logged, {"train_loss": sum(values) / len(values), "step": every * len(values)}]


def test_a_training_loss_still_above_three_quarters_of_chance_at_the_end_is_high_and_a_lower_one_is_not():
    four = {"problem_type": "single_label_classification", "num_labels": 4, "recipe": "full_ft",
            "config": {"learning_rate": 2e-5}}  # fmt: skip
    # 50 logged losses from 1.40 down to 1.106; the last tenth (steps 450-500) averages 1.121 > 1.040 (3/4 log 4).
    slow = [1.40 - 0.006 * i for i in range(50)]
    check = train_loss_check(losses(slow), SINGLE_LABEL, 4)
    assert check == {"train_loss_end": pytest.approx(1.121, abs=1e-4), "train_loss_high": True}
    # The recipe's default rate comes from the run's SPEC (full_ft: 2e-5; lora: 1e-3).
    note = high_loss_note(RunResults.from_dict({**four, **check, "epochs": 1.0}), 2e-5)
    assert note.startswith("Training loss at the end: 1.121, above three quarters of chance (1.386, log 4)")
    assert "own classes 0.33 of probability" in note
    assert "--learning_rate 5e-05 (this run: 2e-05, the recipe's default; up to 0.0001)" in note
    assert "more epochs: --num_train_epochs 2 (this run: 1)" in note
    # Above the recipe's default (1e-3 for full_ft, whose default is 2e-5) a loss this high may be a divergence: no higher rate offered.
    diverged = high_loss_note(
        RunResults.from_dict({**four, **check, "config": {"learning_rate": 1e-3}, "epochs": 1.0}), 2e-5
    )
    assert (
        "--learning_rate 0.001 is above the recipe's default 2e-05" in diverged and "higher" not in diverged
    )
    assert (
        "try the default, --learning_rate 2e-05, or more epochs: --num_train_epochs 2 (this run: 1)"
        in diverged
    )
    lora = high_loss_note(
        RunResults.from_dict({**four, **check, "recipe": "lora", "config": {"learning_rate": 1e-3}}), 1e-3
    )
    assert (
        "--learning_rate 0.0025 (this run: 0.001, the recipe's default; up to 0.005)" in lora
    )  # LoRA's default is 1e-3
    # Down to 0.91: the end (0.935, 0.67 of chance, where `make demo`'s full_ft ends) is under the bar: not said.
    demo_like = [1.40 - 0.01 * i for i in range(50)]
    check = train_loss_check(losses(demo_like), SINGLE_LABEL, 4)
    assert check == {"train_loss_end": pytest.approx(0.935, abs=1e-4), "train_loss_high": False}
    assert high_loss_note(RunResults.from_dict({**four, **check})) is None
    # The end is the last tenth: a run that was high early and low at the end is not high.
    assert train_loss_check(losses([1.4] * 45 + [0.3] * 5), SINGLE_LABEL, 4)["train_loss_high"] is False
    # Judged on a single-label task's own loss only (a distilled student's is the teacher's).
    for other in ((MULTI_LABEL, 4, None), (REGRESSION, 1, None), (SINGLE_LABEL, 4, "outputs/teacher")):
        assert train_loss_check(losses(slow), *other)["train_loss_high"] is None
    assert train_loss_check([], SINGLE_LABEL, 4) == {"train_loss_end": None, "train_loss_high": None}


def test_the_notes_ask_for_more_epochs_where_max_steps_was_not_given():
    """results.json keeps the Trainer's max_steps of -1 for 'not given': the remedy is then more epochs."""
    entry = {"name": "cool", "support": 9, "recall": 0.0, "predicted": 0}
    run = {"neglected_classes": [entry], "config": {"learning_rate": 2e-5, "max_steps": -1}, "epochs": 3.0}
    assert "more epochs: --num_train_epochs 6 (this run: 3)" in results_neglect_note(
        RunResults.from_dict(run)
    )
    high = {
        **run,
        "problem_type": SINGLE_LABEL,
        "num_labels": 2,
        "train_loss_end": 0.69,
        "train_loss_high": True,
    }
    assert "more epochs: --num_train_epochs 6 (this run: 3)" in high_loss_note(
        RunResults.from_dict(high), 2e-5
    )
