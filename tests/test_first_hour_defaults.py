"""Defaults a new user pays for (issue #42): one checkpoint kept, W&B's files in the run's output_dir, and
crossval's accelerate config chosen for the machine."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.recipe_spec import RecipeSpec
from tests.helpers.runs import QUICK, run_args, run_in_process
from tests.helpers.wandb_runs import offline_wandb_in_the_default_dir

FULL_FT = RecipeSpec(name="full_ft")


def test_a_run_that_checkpoints_keeps_only_the_last_checkpoint_unless_asked(
    tiny_bert, learnable_data, tmp_path
):
    saving = ("--max_steps", "3", "--save_strategy", "steps", "--save_steps", "1", "--eval_strategy", "no")
    run_in_process("full_ft", run_args(tiny_bert, learnable_data, tmp_path / "run", *saving, **QUICK))
    assert sorted(path.name for path in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-3"]
    more = (*saving, "--save_total_limit", "2")
    run_in_process("full_ft", run_args(tiny_bert, learnable_data, tmp_path / "more", *more, **QUICK))
    assert sorted(path.name for path in (tmp_path / "more").glob("checkpoint-*")) == [
        "checkpoint-2",
        "checkpoint-3",
    ]


def test_an_offline_wandb_run_is_written_under_the_runs_output_dir_not_where_the_command_runs(
    learnable_data, tmp_path, monkeypatch
):
    from recipes_lib.tracking.wandb_run import start_tracking

    offline_wandb_in_the_default_dir(monkeypatch, tmp_path / "wandb-home")
    monkeypatch.chdir(tmp_path)
    output_dir = tmp_path / "outputs" / "run"
    arguments = parse_arguments(
        FULL_FT,
        ["--train_file", str(learnable_data["train"]), "--validation_file", str(learnable_data["validation"]),
         "--output_dir", str(output_dir), "--report_to", "wandb"],
    )  # fmt: skip
    tracker = start_tracking(arguments, FULL_FT)
    try:
        assert tracker.active
        assert Path(tracker.run.settings.sync_dir).resolve().parent == (output_dir / "wandb").resolve()
        assert not (tmp_path / "wandb").exists()
    finally:
        tracker.run.finish()


@pytest.mark.workbench  # crossval: the sweep extra (optuna)
@pytest.mark.parametrize(("gpu", "expected"), [(False, "cpu.yaml"), (True, "single_gpu.yaml")])
def test_crossval_takes_the_accelerate_config_that_fits_the_machine(monkeypatch, tmp_path, gpu, expected):
    import torch

    import recipes_workbench.crossval.runner as runner
    from recipes_workbench.cli.crossval import crossval_command

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    seen = {}
    monkeypatch.setattr(
        runner, "run_crossval", lambda settings, workers: seen.setdefault("settings", settings) and 0
    )
    args = argparse.Namespace(
        recipe="full_ft", output_dir=str(tmp_path / "cv"), folds=3, seed=42, group_column=None, config=None,
        accelerate_config=None, metric=None, experiment=None, recipes_dir="recipes", retry_failed=False,
        keep_fold_models=False, workers=1, storage=None,
    )  # fmt: skip
    crossval_command(args, ["--train_file", "train.csv"])
    assert seen["settings"].accelerate_config == f"accelerate_configs/{expected}"
