"""`folds:` in a sweep file: every trial a K-fold cross-validation (`recipes-lib crossval`), the learning rate
chosen on the folds' mean, the report with each setting's mean ± std over its folds.

The sweep's loop and crossval's loop run for real (Optuna on SQLite, both studies); each trial's crossval
command runs in this process through the CLI, and its folds are written by a stand-in that launches
nothing, as in test_crossval.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from recipes_lib.errors import ConfigError
from recipes_workbench.cli.main import main as cli_main
from recipes_workbench.crossval import runner as crossval_runner
from recipes_workbench.sweep.config import sweep_config_from_values, trial_command
from recipes_workbench.sweep.report import RESULTS_JSON
from recipes_workbench.sweep.runner import run_sweep
from recipes_workbench.sweep.trials import COMPLETE, Outcome, read_outcome
from tests.helpers.data import learnable_rows, write_csv
from tests.helpers.repo import ACCELERATE_CONFIGS, RECIPES_DIR

pytest.importorskip("optuna")

CPU = str(ACCELERATE_CONFIGS / "cpu.yaml")
BETTER_RATE = 1e-4


def sweep_values(tmp_path: Path, **changes) -> dict:
    train = write_csv(tmp_path / "train.csv", learnable_rows(30, seed=2))
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({"train_file": str(train), "num_train_epochs": 1}))
    values = {
        "base_config": str(base),
        "accelerate_config": CPU,
        "recipes_dir": str(RECIPES_DIR),
        "output_dir": str(tmp_path / "sweep"),
        "search_seed": 42,
        "seeds": [42],  # the search's trials only: no seeds phase
        "folds": 3,
        "args": {"max_steps": 2},
        "recipes": {"full_ft": {"learning_rate": [1e-5, BETTER_RATE]}},
    }
    values.update(changes)
    return values


def fold_stand_in(trial, config) -> Outcome:
    """One fold's run, written by hand: held-out predictions and results.json; at the better learning rate
    each fold scores 0.05 higher."""
    command = trial.command
    held_out = Path(command[command.index("--validation_file") + 1])
    rate = float(command[command.index("--learning_rate") + 1])
    trial.output_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for line in held_out.read_text().splitlines()[1:]:
        label = line.rsplit(",", 1)[1]
        other = {"cool": "warm", "warm": "cool"}[label]
        lines.append(json.dumps({"prediction": label, "probabilities": {label: 0.9, other: 0.1}}))
    (trial.output_dir / "eval_predictions.jsonl").write_text("\n".join(lines) + "\n")
    value = round(0.8 + 0.01 * trial.fold + (0.05 if rate == BETTER_RATE else 0), 4)
    (trial.output_dir / "results.json").write_text(json.dumps({config.metric: value, "peak_memory_gib": 1.5}))
    return Outcome(COMPLETE, value=value, exit_code=0, wall_s=1.0, results={config.metric: value})


@pytest.fixture
def folds_in_process(monkeypatch):
    """Each sweep trial's `python -m recipes_workbench.cli crossval ...` run here, its folds by fold_stand_in."""
    real = crossval_runner.run_crossval
    monkeypatch.setattr(
        crossval_runner,
        "run_crossval",
        lambda settings, **options: real(settings, launch=fold_stand_in, **options),
    )
    commands = []

    def launch(trial, config) -> Outcome:
        commands.append(trial.command)
        code = cli_main(trial.command[trial.command.index("crossval") :])
        return read_outcome(trial, config, code, 1.0)

    launch.commands = commands
    return launch


def test_with_folds_each_trial_is_a_crossval_and_the_report_shows_each_settings_mean_and_std(
    tmp_path, capsys, folds_in_process
):
    config = sweep_config_from_values(sweep_values(tmp_path), "the test's sweep")
    assert run_sweep(config, launch=folds_in_process, preflight=lambda config: {}, draw=False) == 0
    first = next(command for command in folds_in_process.commands if command[-1] == "1e-05")
    assert first[:5] == [sys.executable, "-m", "recipes_workbench.cli", "crossval", "full_ft"]
    joined = " ".join(first)
    for part in ("--folds 3", "--seed 42", f"--output_dir {tmp_path / 'sweep' / 'full_ft' / 'lr1e-5-seed42'}",
                 "--metric eval_accuracy", "--experiment sweep-sweep", "--max_steps 2",
                 "--learning_rate 1e-05"):  # fmt: skip
        assert part in joined, part
    summary = json.loads((tmp_path / "sweep" / RESULTS_JSON).read_text())
    search = {trial["learning_rate"]: trial for trial in summary["recipes"][0]["search"]}
    assert search[1e-5]["validation"] == pytest.approx(0.81)  # the mean of 0.80, 0.81, 0.82
    assert search[BETTER_RATE]["validation"] == pytest.approx(0.86)
    assert search[1e-5]["validation_std_over_folds"] == pytest.approx(0.01)
    assert summary["recipes"][0]["chosen_learning_rate"] == BETTER_RATE and summary["folds"] == 3
    assert summary["recipes"][0]["peak_memory_gib"] == 1.5  # the first fold's run
    out = capsys.readouterr().out
    assert "1e-5: 0.8100 ± 0.0100" in out and "Each trial is a 3-fold cross-validation" in out
    trial_dir = tmp_path / "sweep" / "full_ft" / "lr0.0001-seed42"
    assert (trial_dir / "crossval_results.json").is_file() and (trial_dir / "oof_predictions.jsonl").is_file()
    # Rerun: nothing is left to run, at either level.
    folds_in_process.commands.clear()
    assert run_sweep(config, launch=folds_in_process, preflight=lambda config: {}, draw=False) == 0
    assert folds_in_process.commands == []


def test_a_plain_sweep_still_launches_the_recipe(tmp_path):
    config = sweep_config_from_values(sweep_values(tmp_path, folds=None), "the test's sweep")
    assert trial_command(config, "full_ft", 1e-5, 42, sys.executable)[2] == "accelerate.commands.launch"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"folds": 1}, "'folds' is 1"),
        ({"args": {"validation_file": "dev.csv"}}, "'args' sets 'validation_file', but with 'folds'"),
        (
            {"recipes": {"full_ft": {"learning_rate": [1e-5], "args": {"max_eval_samples": 10}}}},
            "'recipes'.full_ft.args sets 'max_eval_samples'",
        ),
    ],
)
def test_bad_folds_settings_are_refused_before_anything_runs(tmp_path, changes, expected):
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(")):
        sweep_config_from_values(sweep_values(tmp_path, **changes), "the test's sweep")


def test_folds_and_a_wandb_sweep_file_do_not_go_together(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep_values(tmp_path)))
    assert cli_main(["sweep", str(path), "--wandb_sweep", str(tmp_path / "w.yaml")]) == 2
    assert "W&B's agent cannot run" in capsys.readouterr().err
    assert not (tmp_path / "w.yaml").exists()
