"""A resumed run's results.json equals an uninterrupted run's (issue 54): the whole run's training loss
(results.json and the card), its pad ratio and its metrics, whichever checkpoint it resumed from, the
last one included (0 steps left); the speed figures say the steps they cover; no false "arguments do
not match" warning. The runs are in-process on the tiny BERT: 13 steps, a checkpoint every 4 steps,
the loss logged every 5 (so the logged steps and the checkpoints fall apart) and at the default fraction.
"""

from __future__ import annotations

import logging
import shutil

import pytest

from recipes_lib.results import read_results
from recipes_lib.training.checkpoints import checkpoints_in
from recipes_lib.training.resume import FractionStepsWarningFilter
from recipes_lib.training.run_totals import whole_run_loss
from tests.helpers.runs import run_args, run_in_process

STEPS = 13
RUN = ("--max_steps", str(STEPS), "--save_strategy", "steps", "--save_steps", "4", "--save_total_limit", "10",
       "--eval_strategy", "no", "--per_device_train_batch_size", "8")  # fmt: skip
SAME = ("eval_accuracy", "eval_f1", "eval_loss", "train_loss", "pad_ratio", "train_steps", "train_loss_end")


@pytest.fixture(scope="module", params=["5", "0.02"], ids=["logging_steps-5", "logging_steps-fraction"])
def uninterrupted(request, tiny_bert, learnable_data, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("uninterrupted")
    args = run_args(tiny_bert, learnable_data, output_dir, *RUN, "--logging_steps", request.param)
    return output_dir, args, run_in_process("full_ft", args)


@pytest.mark.parametrize("resume_at", [4, 8, 12, STEPS])
def test_a_resumed_run_records_what_the_uninterrupted_run_records(uninterrupted, resume_at, tmp_path, caplog):
    reference_dir, args, reference = uninterrupted
    assert [int(path.name.split("-")[1]) for path in checkpoints_in(reference_dir)] == [4, 8, 12, STEPS]
    output_dir = tmp_path / "resumed"
    output_dir.mkdir()
    shutil.copytree(reference_dir / f"checkpoint-{resume_at}", output_dir / f"checkpoint-{resume_at}")
    resumed_args = [*args, "--output_dir", str(output_dir), "--resume_from_checkpoint", "last"]
    caplog.set_level(logging.WARNING)
    resumed = run_in_process("full_ft", resumed_args)

    assert {key: resumed[key] for key in SAME} == {key: reference[key] for key in SAME}
    assert reference["train_loss"] is not None and reference["pad_ratio"] is not None
    assert read_results(output_dir).train_loss == reference["train_loss"]
    assert f"final training loss | {reference['train_loss']:.4g}" in (output_dir / "README.md").read_text()
    assert (resumed["resumed_from_step"], reference["resumed_from_step"]) == (resume_at, None)
    if resume_at == STEPS:  # nothing ran here: no speed to report
        assert resumed["train_tokens_per_s"] is None and resumed["train_samples_per_s"] is None
    else:
        assert resumed["train_tokens_per_s"] > 0 and reference["train_tokens_per_s"] > 0
    assert "do not match" not in caplog.text
    assert not logging.getLogger(FractionStepsWarningFilter.LOGGER).filters  # the run took its filter off


def test_the_whole_run_loss_weighs_each_logged_loss_by_the_steps_it_covers():
    history = [{"loss": 1.0, "step": 5}, {"eval_loss": 9.0, "step": 5}, {"loss": 0.5, "step": 8},
               {"loss": 0.2, "step": 13}, {"train_loss": 7.0, "step": 13}]  # fmt: skip
    assert whole_run_loss(history) == pytest.approx((5 * 1.0 + 3 * 0.5 + 5 * 0.2) / 13)
    assert whole_run_loss([]) is None


def _warning(*lines: str) -> logging.LogRecord:
    heading = "Warning: The following arguments do not match the ones in the `trainer_state.json` within the checkpoint directory: "
    return logging.LogRecord(
        "transformers.trainer_utils", logging.WARNING, "", 0, heading + "".join(lines), (), None
    )


def test_the_resume_warning_drops_a_fraction_that_came_to_the_stored_steps_and_keeps_a_real_change(tmp_path):
    (tmp_path / "trainer_state.json").write_text('{"max_steps": 40}')
    quiet = FractionStepsWarningFilter(tmp_path)
    same = "\n\tlogging_steps: 0.02 (from args) != 1 (from trainer_state.json)"
    changed = "\n\tsave_steps: 0.5 (from args) != 4 (from trainer_state.json)"
    assert not quiet.filter(_warning(same))
    kept = _warning(same, changed)
    assert (
        quiet.filter(kept)
        and kept.getMessage().endswith(changed)
        and "logging_steps" not in kept.getMessage()
    )
    assert quiet.filter(_warning("\n\tlogging_steps: 5 (from args) != 1 (from trainer_state.json)"))
    assert quiet.filter(logging.LogRecord("x", logging.WARNING, "", 0, "other", (), None))


def test_under_early_stopping_a_resumed_run_counts_the_whole_runs_tokens(tiny_bert, learnable_data, tmp_path):
    """--early_stopping_patience restores the checkpoint's stateful callbacks as new objects in the Trainer's
    list; the token counter the run keeps (and reads) still continues the checkpoint's counts."""
    early = ("--eval_strategy", "steps", "--eval_steps", "4", "--early_stopping_patience", "100")
    args = run_args(tiny_bert, learnable_data, tmp_path / "whole", *RUN, *early, "--max_eval_samples", "16")
    reference = run_in_process("full_ft", args)
    output_dir = tmp_path / "resumed"
    output_dir.mkdir()
    shutil.copytree(tmp_path / "whole" / "checkpoint-8", output_dir / "checkpoint-8")
    resumed_args = [*args, "--output_dir", str(output_dir), "--resume_from_checkpoint", "last"]
    resumed = run_in_process("full_ft", resumed_args)
    assert resumed["resumed_from_step"] == 8 and reference["pad_ratio"] is not None
    assert resumed["pad_ratio"] == reference["pad_ratio"]
