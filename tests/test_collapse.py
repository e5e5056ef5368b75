"""A model whose outputs do not depend on its input (issue #50): measured at every evaluation, said at the
first evaluation and at the end, recorded, never tuned, never passed by the export gate, warned of by
predict; and every remedy said is an option the recipe takes."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest

from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from recipes_lib.evaluation.collapse import end_of_run_notes, is_collapsed, output_variation
from recipes_lib.evaluation.collapse_note import collapse_note, results_collapse_note
from recipes_lib.results import RunResults
from tests.helpers.data import multi_label_files, regression_files
from tests.helpers.runs import QUICK, run_args, run_in_process


def constant_model(source: Path, directory: Path, bias: list[float]) -> Path:
    """`source` with its classifier's weights zeroed and its bias set: every input gets the same logits."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(source)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor(bias))
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(source).save_pretrained(directory)
    return directory


# A learning rate of 1e-12 leaves the constant model as it is for the two steps of QUICK.
FROZEN = ("--learning_rate", "1e-12", "--warmup_steps", "0")


def test_output_variation_tells_a_constant_model_from_one_that_reads_its_input():
    rng = np.random.default_rng(0)
    constant = np.tile([2.0, -1.0, 0.5], (40, 1))
    varying = rng.normal(size=(40, 3))
    for problem_type in (SINGLE_LABEL, MULTI_LABEL):
        flat = output_variation(constant, problem_type)
        assert flat == {"output_std": 0.0, "distinct_predictions": 1, "rows": 40} and is_collapsed(flat)
        assert not is_collapsed(output_variation(varying, problem_type))
    # Every row the same decision, but the probabilities move with the row: still learning, not collapsed.
    leaning = np.column_stack([np.full(40, 3.0), rng.normal(scale=0.5, size=40)])
    variation = output_variation(leaning, SINGLE_LABEL)
    assert variation["distinct_predictions"] == 1 and variation["output_std"] > 0.005
    assert not is_collapsed(variation)
    # Tiny differences (the collapsed MiniLM's kind): under FLAT_STD, collapsed.
    assert is_collapsed(output_variation(constant + rng.normal(scale=1e-4, size=(40, 3)), MULTI_LABEL))
    # Regression: the score's spread against the true scores'.
    truth = rng.normal(size=40)
    assert is_collapsed(output_variation(np.full((40, 1), 0.3), REGRESSION, truth))
    assert not is_collapsed(output_variation(truth[:, None] + 0.1, REGRESSION, truth))
    assert not is_collapsed(output_variation(constant[:1], SINGLE_LABEL))  # one row cannot vary


def test_the_collapse_note_never_advises_a_higher_rate_and_names_this_runs_values():
    variation = {"output_std": 0.0003, "distinct_predictions": 1, "rows": 500}
    note = collapse_note(variation, learning_rate=1e-4, warmup_steps=0.1, epochs=2.0)
    assert "gives all 500 validation rows the same prediction" in note and "0.0003" in note
    assert "--learning_rate 2e-05 (this run: 0.0001)" in note
    assert "--warmup_steps 0.2 (this run: 0.1)" in note
    assert "--num_train_epochs 4 (this run: 2)" in note
    assert "higher --learning_rate" not in note
    # --max_steps given: more steps are asked of it (epochs would not change a step-bounded run).
    assert "--max_steps 200 (this run: 100)" in collapse_note(variation, learning_rate=1e-4, max_steps=100)
    # The end of a collapsed run says the collapse only: the neglect and loss notes would ask for a higher rate.
    results = {
        "model_collapsed": True,
        "output_variation": variation,
        "neglected_classes": [{"name": "a", "support": 9, "recall": 0.0, "predicted": 0}],
        "train_loss_high": True,
        "train_loss_end": 0.69,
        "num_labels": 2,
        "problem_type": SINGLE_LABEL,
        "config": {"learning_rate": 1e-4, "warmup_steps": 0.1, "num_train_epochs": 2.0, "max_steps": -1},
    }
    record = RunResults.from_dict(results)
    assert end_of_run_notes(record) == [results_collapse_note(record)]
    assert len(end_of_run_notes(RunResults.from_dict({**results, "model_collapsed": False}))) == 2


def remedy_options(note: str) -> list[list[str]]:
    """Each `--option value` a note prints, as arguments."""
    return [[f"--{name}", value] for name, value in re.findall(r"--(\w+) ([^\s;,()]+)", note)]


@pytest.mark.parametrize("task", ["single", "multi"])
def test_a_forced_constant_model_is_said_at_the_first_evaluation_and_the_end_and_never_tuned(
    task, tiny_bert, skewed_data, tmp_path, caplog
):
    """A model whose head ignores the encoder (weights 0, bias set): collapsed, said twice, recorded, no tuned
    figure; each printed remedy is then run: the recipe accepts it."""
    data = skewed_data if task == "single" else multi_label_files(tmp_path / "data", 64, 32)
    model = constant_model(tiny_bert, tmp_path / "constant", [1.5, -0.5])
    options = ("--decision_threshold", "tune") if task == "single" else ()
    args = run_args(
        model, data, tmp_path / "run", *FROZEN, "--eval_strategy", "steps", "--eval_steps", "1", *options,
        **{**QUICK, "eval_strategy": None},
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="recipes_lib"):
        results = run_in_process("full_ft", args)
    said = [r.getMessage() for r in caplog.records if "The model collapsed" in r.getMessage()]
    assert len(said) == 2, said
    assert said[0].startswith("The model collapsed at step 1 ")  # the first evaluation
    assert said[1].startswith("The model collapsed at the end of the run")
    assert results["model_collapsed"] is True
    assert results["output_variation"]["distinct_predictions"] == 1
    assert results["output_variation"]["output_std"] < 1e-4
    written = json.loads((tmp_path / "run" / "results.json").read_text())
    assert written["model_collapsed"] is True and written["output_variation"] == results["output_variation"]
    if task == "multi":
        assert all(
            results[key] is None for key in results if key.startswith("eval_tuned_")
        )  # no tuned figure
        assert set(results["label_thresholds"].values()) == {0.5}
        assert not any(entry["tuned"] for entry in results["threshold_tuning"].values())
    else:
        assert results["decision_threshold"] == 0.5 and results["decision_threshold_tuned_on"] is None
    # Each remedy printed, run: accepted (two quick steps each).
    remedies = remedy_options(said[1])
    # Multi-label without class weights is told of per-label positive weights, during training and at the end.
    weights = {"--class_weights"} if task == "multi" else set()
    assert {option[0] for option in remedies} == {
        "--learning_rate",
        "--warmup_steps",
        "--max_steps",
        *weights,
    }
    assert {option[0] for option in remedy_options(said[0])} == {option[0] for option in remedies}
    for option in remedies:
        run_in_process("full_ft", run_args(model, data, tmp_path / "remedy", *option, **QUICK))


def test_regression_and_single_label_remedies_of_every_note_are_accepted(tiny_bert, skewed_data, tmp_path):
    """The neglect, training-loss and collapse notes' options, printed for a run and run with the recipe."""
    from recipes_lib.evaluation.neglected import results_neglect_note
    from recipes_lib.evaluation.training_loss import high_loss_note

    base = {
        "problem_type": SINGLE_LABEL,
        "num_labels": 2,
        "recipe": "full_ft",
        "epochs": 1.0,
        "neglected_classes": [{"name": "cool", "support": 9, "recall": 0.0, "predicted": 0}],
        "train_loss_end": 0.69,
        "train_loss_high": True,
        "config": {"learning_rate": 2e-5, "max_steps": -1, "warmup_steps": 0.1, "num_train_epochs": 1.0},
    }
    record = RunResults.from_dict
    notes = [
        results_neglect_note(record({**base, "train_loss_high": False})),
        high_loss_note(record(base)),
        high_loss_note(
            record({**base, "config": {**base["config"], "learning_rate": 1e-3}})
        ),  # above the default
        results_collapse_note(
            record(
                {
                    **base,
                    "model_collapsed": True,
                    "output_variation": {"output_std": 0.0, "distinct_predictions": 1, "rows": 9},
                }
            )
        ),
    ]
    options = {tuple(option) for note in notes for option in remedy_options(note)}
    assert ("--class_weights", "balanced") in options and ("--learning_rate", "5e-05") in options
    for option in sorted(options):
        run_in_process("full_ft", run_args(tiny_bert, skewed_data, tmp_path / "remedy", *option, **QUICK))
    scores = regression_files(tmp_path / "scores", 40, 16)
    collapsed = results_collapse_note(
        record({**base, "problem_type": REGRESSION, "model_collapsed": True,
                "output_variation": {"output_std": 0.001, "distinct_predictions": 1, "rows": 16}})
    )  # fmt: skip
    assert "its score varies by 0.0010 of the true scores' standard deviation" in collapsed
    for option in remedy_options(collapsed):
        run_in_process("full_ft", run_args(tiny_bert, scores, tmp_path / "remedy", *option, **QUICK))


@pytest.mark.workbench  # the export gate: the export extra (onnx)
def test_a_run_at_a_rate_too_high_collapses_and_is_said_untuned_refused_by_the_gate_and_warned_by_predict(
    seeded_bert, learnable_data, tmp_path, caplog
):
    """A real collapse: the tiny BERT that learns this task at 2e-3 (accuracy 1.0 in 48 steps) trained at 0.05
    ends with one output for every row (measured: output_std 1.3e-05, accuracy 0.45). A fifth of it (0.01, the
    rate the note prints) still collapses in 48 steps; 2e-3 learns (docs/troubleshooting.md)."""
    from recipes_workbench.cli.main import main
    from recipes_workbench.tools.predict import predict

    args = run_args(
        seeded_bert, learnable_data, tmp_path / "run", "--max_steps", "48", "--learning_rate", "0.05",
        "--warmup_steps", "0", "--decision_threshold", "tune", "--text_column_names", "text",
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="recipes_lib"):
        results = run_in_process("full_ft", args)
    said = [r.getMessage() for r in caplog.records if "The model collapsed" in r.getMessage()]
    assert re.match(r"The model collapsed at step (16|32|48) ", said[0])  # at an evaluation during training
    assert said[-1].startswith("The model collapsed at the end of the run")
    assert results["model_collapsed"] and results["output_variation"]["output_std"] < 1e-3
    assert results["decision_threshold"] == 0.5 and results["decision_threshold_tuned_on"] is None
    code = main(["export", str(tmp_path / "run")])
    report = json.loads((tmp_path / "run" / "export.failed" / "export_report.json").read_text())
    assert code == 1 and report["reason"].startswith("the gate cannot judge this export")
    assert report["models"]["fp32"]["agreement"] == 1.0  # what the gate alone would have passed
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="recipes_lib"):
        predict(tmp_path / "run", learnable_data["validation"], progress=False)
    assert any("same prediction" in r.getMessage() for r in caplog.records)
    # The lower rate printed is an option the recipe takes (test_a_forced_constant_model... runs them all).
    [rate] = [option for option in remedy_options(said[-1]) if option[0] == "--learning_rate"]
    assert rate == ["--learning_rate", "0.01"]
