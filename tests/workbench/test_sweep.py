"""`recipes-lib sweep`: the sweep file and its errors, the study loop (resume, skip, failure), the report and
its statistics, the W&B Sweeps file, `compare` grouping repeats, and the dashboard's sweep section.

Most tests drive the real study loop (Optuna on SQLite) with a stand-in launcher
(tests/helpers/sweep_stand_ins.py), which returns what a trial would: fast, and every path of the loop. One
module fixture runs a real sweep on the tiny BERT, each trial its own `accelerate launch`, with W&B offline,
including a trial that diverges; the real kill -9 of a running sweep is the slow test at the end.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from recipes_lib.errors import ConfigError, OutputDirError
from recipes_lib.locking import lock_directory
from recipes_lib.tracking import names
from recipes_workbench.cli.main import main as cli_main
from recipes_workbench.sweep import study
from recipes_workbench.sweep.config import (
    TOP_LEVEL_KEYS,
    SweepConfig,
    format_lr,
    load_sweep_file,
    sweep_config_from_values,
    trial_command,
    trial_dir,
    wandb_sweep_config,
    write_wandb_sweeps,
)
from recipes_workbench.sweep.report import (
    CHART_FILE,
    RESULTS_JSON,
    compare_pair,
    detectable_difference,
    format_report,
)
from recipes_workbench.sweep.runner import run_sweep
from recipes_workbench.sweep.trials import COMPLETE, Outcome, failure_reason, recipe_exit_code
from tests.helpers.output import project_lines
from tests.helpers.repo import RECIPES_DIR, REPO_ROOT
from tests.helpers.sweep_stand_ins import (
    CPU,
    SweepStandIn,
    comparable,
    config_values,
    figure,
    make_config,
    no_budget,
    sweep_results,
)
from tests.helpers.wandb_runs import isolated_wandb_env, offline_runs, read_run

# --- the sweep file -----------------------------------------------------------------------------------


def test_the_demo_sweep_file_parses_with_its_documented_values():
    config = sweep_config_from_values(
        load_sweep_file(str(REPO_ROOT / "recipes/sweeps/sweep_demo.yaml")), "demo"
    )
    assert [recipe.name for recipe in config.recipes] == ["full_ft", "lora"]
    assert config.recipe("full_ft").learning_rates.grid == (2e-5, 5e-5, 1e-4)
    assert config.recipe("lora").learning_rates.grid == (3e-4, 1e-3, 3e-3)
    assert (config.metric, config.direction, config.search_seed, config.seeds) == (
        "eval_accuracy",
        "maximize",
        42,
        (1, 2, 3),
    )
    assert config.seeds_to_run == (1, 2, 3)
    assert config.group == "sweep-sweep_demo" and config.base_config == "recipes/configs/demo.yaml"


def test_grids_ranges_and_yaml_numbers_without_a_dot(tmp_path):
    config = make_config(tmp_path, recipes={"full_ft": {"learning_rate": ["2e-5", 1e-4]},
                                            "lora": {"learning_rate": {"low": "1e-4", "high": 1e-2, "trials": 4}}})  # fmt: skip
    assert config.recipe("full_ft").learning_rates.grid == (2e-5, 1e-4)
    lora = config.recipe("lora").learning_rates
    assert (lora.is_grid, lora.low, lora.high, lora.trials) == (False, 1e-4, 1e-2, 4)
    assert "TPE" in lora.describe()
    assert make_config(tmp_path, metric="eval_loss").direction == "minimize"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"seed": [1]}, ["unknown key 'seed'", "Did you mean 'seeds'?"]),
        (
            {"recipes": {"full_fit": {"learning_rate": [1e-4]}}},
            ["recipe 'full_fit'", "Did you mean 'full_ft'?"],
        ),
        ({"recipes": {"lora": {"lr": [1e-3]}}}, ["'recipes'.lora has an unknown key 'lr'", "learning_rate"]),
        ({"recipes": {"lora": {"learning_rate": [1e-3, "fast"]}}}, ["'fast'", "positive number"]),
        ({"recipes": {"lora": {"learning_rate": [-1e-3]}}}, ["-0.001", "positive number"]),
        (
            {"recipes": {"lora": {"learning_rate": {"low": 1e-2, "high": 1e-4, "trials": 3}}}},
            ["not below high", "swap"],
        ),
        ({"recipes": {"lora": {"learning_rate": {"low": 1e-4, "high": 1e-2}}}}, ["without trials"]),
        ({"recipes": {"lora": {"learning_rate": []}}}, ["no learning rate"]),
        ({"recipes": {}}, ["map each recipe"]),
        ({"seeds": [1, 1]}, ["a seed twice"]),
        ({"seeds": [1.5]}, ["whole number"]),
        ({"metric": "test_accuracy"}, ["chosen on validation", "eval_accuracy"]),
        ({"metric": "accuracy"}, ["validation key: eval_accuracy, eval_f1,"]),
        ({"metric": "eval_acc"}, ["'metric' is eval_acc", "eval_accuracy", "eval_pearson"]),  # no such key
        ({"direction": "up"}, ["maximize or minimize"]),
        ({"args": {"learning_rate": 1e-3}}, ["sets 'learning_rate'", "each recipe's `learning_rate`"]),
        ({"args": {"output_dir": "x"}}, ["sets 'output_dir'", "drop it"]),
        ({"memory_budget": 0}, ["'memory_budget' (GiB) is 0"]),
        ({"base_config": "no/such.yaml"}, ["'base_config' no/such.yaml is not a file"]),
        ({"accelerate_config": "no/such.yaml"}, ["'accelerate_config'", "cpu.yaml"]),
        ({"recipes_dir": "/nowhere"}, ["recipe script /nowhere/full_ft.py", "recipes_dir"]),
    ],
)
def test_a_bad_sweep_file_is_refused_in_one_paragraph_naming_the_key_and_the_fix(tmp_path, changes, expected):
    with pytest.raises(ConfigError) as error:
        make_config(tmp_path, **changes)
    message = str(error.value)
    assert "\n" not in message
    for part in expected:
        assert part in message, message


def test_a_sweep_file_that_is_not_a_mapping_or_not_yaml(tmp_path):
    for text, expected in (
        ("- a\n- b\n", "must be a mapping"),
        ("recipes: [\n", "not valid YAML"),
        ("", "is empty"),
    ):
        path = tmp_path / "sweep.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=expected):
            load_sweep_file(str(path))


def test_flags_override_the_file_and_build_a_sweep_alone(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config_values(tmp_path)))
    out = tmp_path / "wandb-sweep.yaml"
    flags = ["sweep", str(path), "--recipe", "lora=1e-4:1e-2:5", "--seeds", "7", "8", "--arg", "num_train_epochs=1",
             "--output_dir", str(tmp_path / "other"), "--wandb_sweep", str(out)]  # fmt: skip
    assert cli_main(flags) == 0
    written = yaml.safe_load(out.read_text())  # one recipe: FILE itself
    assert written["method"] == "bayes" and written["run_cap"] == 5
    assert written["parameters"]["learning_rate"] == {
        "distribution": "log_uniform_values",
        "min": 1e-4,
        "max": 1e-2,
    }
    assert "--num_train_epochs" in written["command"] and str(tmp_path / "other") in " ".join(
        written["command"]
    )
    # Flags alone, no file.
    assert cli_main(["sweep", "--recipe", "full_ft=2e-5", "--accelerate_config", CPU, "--recipes_dir", str(RECIPES_DIR),
                     "--wandb_sweep", str(tmp_path / "alone.yaml")]) == 0  # fmt: skip
    assert yaml.safe_load((tmp_path / "alone.yaml").read_text())["parameters"]["learning_rate"] == {
        "values": [2e-5]
    }
    assert cli_main(["sweep", "--recipe", "full_ft"]) == 2
    assert "NAME=LEARNING_RATES" in capsys.readouterr().err


# --- a trial's command and the W&B Sweeps config ------------------------------------------------------


def test_every_trial_is_an_accelerate_launch_with_its_own_deterministic_directory(tmp_path):
    config = make_config(tmp_path, base_config=str(REPO_ROOT / "recipes/configs/demo.yaml"), args={"num_train_epochs": 1},
                         recipes={"lora": {"learning_rate": [1e-3], "args": {"lora_target_modules": ["query", "value"]}}})  # fmt: skip
    command = trial_command(config, "lora", 1e-3, 2, sys.executable)
    assert command[:5] == [sys.executable, "-m", "accelerate.commands.launch", "--config_file", CPU]
    assert command[5] == str(RECIPES_DIR / "lora.py")
    joined = " ".join(command)
    for part in ("--config " + str(REPO_ROOT / "recipes/configs/demo.yaml"), "--num_train_epochs 1",
                 "--lora_target_modules query value", "--learning_rate 0.001", "--seed 2",
                 f"--output_dir {tmp_path / 'sweep' / 'lora' / 'lr0.001-seed2'}", "--overwrite_output_dir true",
                 "--experiment sweep-sweep", "--run_name lora lr=0.001 seed=2"):  # fmt: skip
        assert part in joined, part
    # One rate reached two ways (a grid's product, a written number) is one trial, one directory.
    computed = sum([1e-4] * 10)  # 0.0010000000000000002
    assert computed != 1e-3
    assert trial_dir(config, "lora", computed, 2) == trial_dir(config, "lora", 1e-3, 2)
    assert trial_dir(config, "lora", computed, 2).name == "lr0.001-seed2"
    assert format_lr(2e-5) == "2e-5" and format_lr(1e12) == "1e+12"


def test_the_wandb_sweeps_file_runs_each_recipe_the_same_way(tmp_path):
    config = make_config(tmp_path, base_config=str(REPO_ROOT / "recipes/configs/demo.yaml"))
    paths = write_wandb_sweeps(config, str(tmp_path / "wandb.yaml"))
    assert [path.name for path in paths] == ["wandb-full_ft.yaml", "wandb-lora.yaml"]
    text = paths[0].read_text()
    assert text.startswith("# W&B Sweeps config for full_ft") and "wandb agent" in text
    sweep = yaml.safe_load(text)
    assert sweep == wandb_sweep_config(config, "full_ft")
    assert sweep["program"] == str(RECIPES_DIR / "full_ft.py") and sweep["method"] == "grid"
    assert sweep["metric"] == {"name": "eval_accuracy", "goal": "maximize"}
    assert sweep["parameters"] == {"learning_rate": {"values": [2e-5, 5e-5, 1e-4]}, "seed": {"values": [42]}}
    command = sweep["command"]
    assert command[:5] == ["${env}", "accelerate", "launch", "--config_file", CPU]
    assert command[5] == "${program}" and command[-1] == "${args}"
    assert command[6:8] == ["--config", str(REPO_ROOT / "recipes/configs/demo.yaml")]
    assert "--experiment" in command and "sweep-sweep" in command


# --- how a failed trial is told apart ------------------------------------------------------------------


def test_the_recipes_own_exit_code_is_read_from_the_launchers_log():
    launcher = "subprocess.CalledProcessError: Command '['python', 'recipes/full_ft.py']' returned non-zero exit status 3."
    assert recipe_exit_code(1, launcher) == 3
    assert recipe_exit_code(1, "  exitcode  : 2 (pid: 123)") == 2
    assert recipe_exit_code(1, "died with <Signals.SIGKILL: 9>.") == -9
    assert recipe_exit_code(1, "no launcher message") == 1
    diverged = "\nerror: The training loss became nan at step 3 (epoch 0.12); the run stopped.\n" + launcher
    assert failure_reason(3, diverged).startswith(
        "diverged (TrainingDiverged, exit code 3): The training loss became nan"
    )
    assert failure_reason(
        1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"
    ).startswith("out of memory")
    assert "out-of-memory killer" in failure_reason(-9, "")
    assert failure_reason(2, "\nerror: Config file has an unknown key 'x'.\n").startswith(
        "bad input (exit code 2)"
    )


# --- the study loop, with a stand-in launcher ---------------------------------------------------------


def test_a_sweep_searches_each_recipe_then_repeats_the_chosen_rate_over_fresh_seeds(tmp_path, capsys):
    config = make_config(tmp_path)
    launcher = SweepStandIn()
    assert run_sweep(config, launch=launcher, preflight=no_budget) == 0
    # Recipe by recipe: the search (in GridSampler's order), then the chosen rate at each seed.
    recipes = [recipe for recipe, *_ in launcher.launched]
    assert recipes == ["full_ft"] * 6 + ["lora"] * 5
    phases = [phase for _, phase, *_ in launcher.launched]
    assert phases == ["search"] * 3 + ["seeds"] * 3 + ["search"] * 2 + ["seeds"] * 3
    search = sorted((r, lr) for r, phase, lr, _ in launcher.launched if phase == "search")
    assert search == [("full_ft", 2e-5), ("full_ft", 5e-5), ("full_ft", 1e-4), ("lora", 3e-4), ("lora", 1e-3)]
    seeds = sorted((r, lr, seed) for r, phase, lr, seed in launcher.launched if phase == "seeds")
    assert seeds == [("full_ft", 5e-5, s) for s in (1, 2, 3)] + [("lora", 1e-3, s) for s in (1, 2, 3)]
    output = capsys.readouterr().out
    assert "To run: 11 trials; no estimate yet" in output  # printed before anything ran
    results = sweep_results(config)
    full_ft, lora = results["recipes"]
    assert (full_ft["chosen_learning_rate"], lora["chosen_learning_rate"]) == (5e-5, 1e-3)
    values = [figure("full_ft", 5e-5, seed) for seed in (1, 2, 3)]
    assert full_ft["validation"]["values"] == values
    assert full_ft["validation"]["mean"] == pytest.approx(sum(values) / 3)
    assert full_ft["validation"]["std"] == pytest.approx(__import__("statistics").stdev(values))
    assert [seed["seed"] for seed in full_ft["seeds"]] == [1, 2, 3]
    assert full_ft["time_per_epoch_s"] == 10.0 and full_ft["peak_memory_gib"] == pytest.approx(1.4)
    assert results["final_split"] == "validation" and not results["search_seed_reused"]
    assert (Path(config.output_dir) / CHART_FILE).stat().st_size > 10_000
    # Rerun: nothing left to run, the same report.
    again = SweepStandIn()
    assert run_sweep(config, launch=again, preflight=no_budget, draw=False) == 0
    assert again.launched == []
    assert "To run: nothing" in capsys.readouterr().out
    assert comparable(sweep_results(config)) == comparable(results)


class TiedStandIn(SweepStandIn):
    """Every search trial of a recipe scores the same above its lowest rate: the tie rule decides."""

    SCORES = {("full_ft", 2e-5): 0.80, ("full_ft", 5e-5): 0.86, ("full_ft", 1e-4): 0.86,
              ("lora", 3e-4): 0.83, ("lora", 1e-3): 0.83}  # fmt: skip

    def __call__(self, trial, config) -> Outcome:
        self.launched.append((trial.recipe, trial.phase, trial.learning_rate, trial.seed))
        value = self.SCORES[trial.recipe, trial.learning_rate]
        return Outcome(COMPLETE, value=value, exit_code=0, wall_s=1.0,
                       results={config.metric: value, "train_runtime_s": 3.0, "epochs": 1.0})  # fmt: skip


def test_a_tie_in_the_search_chooses_the_lowest_rate_and_the_seeds_run_at_it(tmp_path):
    config = make_config(tmp_path)
    launcher = TiedStandIn()
    assert run_sweep(config, launch=launcher, preflight=no_budget) == 0
    full_ft, lora = sweep_results(config)["recipes"]
    assert (full_ft["chosen_learning_rate"], lora["chosen_learning_rate"]) == (5e-5, 3e-4)
    seeds = sorted((r, lr) for r, phase, lr, _ in launcher.launched if phase == "seeds")
    assert seeds == [("full_ft", 5e-5)] * 3 + [("lora", 3e-4)] * 3


def test_the_pair_test_is_welchs_t_test_with_its_p_value_and_how_weak_three_seeds_are(tmp_path):
    from scipy import stats

    config = make_config(tmp_path)
    run_sweep(config, launch=SweepStandIn(), preflight=no_budget, draw=False)
    results = sweep_results(config)
    (pair,) = results["pairs"]
    a = results["recipes"][0]["validation"]["values"]
    b = results["recipes"][1]["validation"]["values"]
    expected = stats.ttest_ind(a, b, equal_var=False)
    assert pair["test"].startswith("Welch's t-test (scipy.stats.ttest_ind, equal_var=False)")
    assert pair["p_value"] == pytest.approx(expected.pvalue) and pair["t"] == pytest.approx(
        expected.statistic
    )
    assert pair["difference"] == pytest.approx(sum(a) / 3 - sum(b) / 3)
    assert pair["verdict"].startswith("larger than the seed-to-seed noise")
    assert "With 3 seeds per recipe the test is weak" in results["power_note"]
    assert detectable_difference(3, 3) == pytest.approx(3.07, abs=0.01)  # the textbook figure for n = 3
    report = format_report(results)
    for part in ("validation mean ± std", "Welch's t-test", f"p = {expected.pvalue:.3g}", "(the trials have no test split)",
                 "full_ft", "1.40 GiB", "1.0 MiB"):  # fmt: skip
        assert part in report, part


def test_noise_and_too_few_seeds_are_said_so():
    a = {"recipe": "a", "validation": {"values": [0.80, 0.82, 0.81]}}
    b = {"recipe": "b", "validation": {"values": [0.81, 0.80, 0.83]}}
    assert compare_pair(a, b, "validation", "eval_accuracy")["verdict"].startswith(
        "within the seed-to-seed noise"
    )
    same = {"recipe": "c", "validation": {"values": [0.8, 0.8]}}
    assert "no seed-to-seed noise" in compare_pair(same, same, "validation", "eval_accuracy")["verdict"]
    one = {"recipe": "d", "validation": {"values": [0.8]}}
    assert "at least 2 complete seeds" in compare_pair(one, a, "validation", "eval_accuracy")["verdict"]


def test_with_a_test_split_the_final_figures_are_the_test_splits(tmp_path):
    class WithTest(SweepStandIn):
        def __call__(self, trial, config):
            outcome = super().__call__(trial, config)
            outcome.results["test_accuracy"] = outcome.value - 0.01
            return outcome

    config = make_config(tmp_path)
    run_sweep(config, launch=WithTest(), preflight=no_budget, draw=False)
    results = sweep_results(config)
    assert (results["final_split"], results["final_metric"]) == ("test", "test_accuracy")
    full_ft = results["recipes"][0]
    assert full_ft["test"]["values"] == [pytest.approx(v - 0.01) for v in full_ft["validation"]["values"]]
    assert results["pairs"][0]["split"] == "test"
    assert "test_accuracy on the test split" in format_report(results)


def test_a_diverging_trial_is_recorded_as_failed_the_sweep_goes_on_and_a_rerun_keeps_it(tmp_path):
    config = make_config(tmp_path, recipes={"full_ft": {"learning_rate": [5e-5, 1e3]}}, seeds=[1, 2])
    assert run_sweep(config, launch=SweepStandIn(fail_above=1.0), preflight=no_budget, draw=False) == 0
    (full_ft,) = sweep_results(config)["recipes"]
    failed = next(trial for trial in full_ft["search"] if trial["learning_rate"] == 1e3)
    assert failed["status"] == "failed" and failed["reason"].startswith(
        "diverged (TrainingDiverged, exit code 3)"
    )
    assert full_ft["chosen_learning_rate"] == 5e-5 and full_ft["validation"]["n"] == 2
    again = SweepStandIn()
    run_sweep(config, launch=again, preflight=no_budget, draw=False)
    assert again.launched == []  # a failed trial is finished: not rerun ...
    retried = SweepStandIn(fail_above=1e6)
    run_sweep(
        SweepConfig(**{**config.__dict__, "retry_failed": True}),
        launch=retried,
        preflight=no_budget,
        draw=False,
    )
    assert retried.launched == [("full_ft", "search", 1e3, 42)]  # ... unless asked, and only once


def test_a_trial_the_planner_predicts_too_large_is_skipped_before_launch_with_its_reason(tmp_path, capsys):
    reason = (
        "the planner predicts a peak of 1.40 GiB, which does not fit the budget of 0.50 GiB (--memory_budget)"
    )

    def preflight(config):
        return {"full_ft": {"fits": False, "reason": reason}, "lora": {"fits": True, "reason": "fits"}}

    config = make_config(tmp_path)
    launcher = SweepStandIn()
    assert run_sweep(config, launch=launcher, preflight=preflight, draw=False) == 0
    assert {recipe for recipe, *_ in launcher.launched} == {"lora"}
    plan = capsys.readouterr().out.split("Sweep sweep: each recipe")[0]  # what it printed before running
    assert plan.count(f"skipped: {reason}") == 6  # 3 search + 3 seeds trials
    full_ft = sweep_results(config)["recipes"][0]
    assert full_ft["status"] == f"skipped: {reason}" and full_ft["chosen_learning_rate"] is None


def test_interrupted_then_resumed_runs_only_what_was_left_and_reports_as_if_never_stopped(tmp_path, capsys):
    uninterrupted = make_config(tmp_path / "a")
    run_sweep(uninterrupted, launch=SweepStandIn(), preflight=no_budget, draw=False)
    config = make_config(tmp_path / "b")
    first = SweepStandIn(interrupt_at=3)  # Ctrl-C during the 4th trial (full_ft seed 1)
    assert run_sweep(config, launch=first, preflight=no_budget, draw=False) == 130
    assert "run the same command to resume" in capsys.readouterr().out
    assert not (Path(config.output_dir) / RESULTS_JSON).exists()
    second = SweepStandIn()
    assert run_sweep(config, launch=second, preflight=no_budget, draw=False) == 0
    assert not set(first.launched) & set(second.launched)  # finished trials are not rerun
    assert (
        first.interrupted[:2] == ("full_ft", "seeds") and second.launched[0] == first.interrupted
    )  # it is, first
    assert len(first.launched) + len(second.launched) == 11
    assert comparable(sweep_results(config)) == comparable(sweep_results(uninterrupted))
    statuses = [trial["status"] for trial in sweep_results(config)["trials"]]
    assert statuses.count("interrupted") == 1 and statuses.count("complete") == 11


def leave_running(config: SweepConfig) -> None:
    """Put the database where kill -9 during a trial leaves it: the interrupted trial RUNNING, its status
    "running" (what it was while its process ran)."""
    with sqlite3.connect(Path(config.output_dir) / study.STUDY_FILE) as connection:
        (trial_id,) = connection.execute(
            "SELECT trial_id FROM trial_user_attributes WHERE key = 'status' AND value_json = '\"interrupted\"'"
        ).fetchone()
        connection.execute(
            "UPDATE trials SET state = 'RUNNING', datetime_complete = NULL WHERE trial_id = ?", (trial_id,)
        )
        connection.execute(
            "UPDATE trial_user_attributes SET value_json = '\"running\"' WHERE trial_id = ? AND key = 'status'",
            (trial_id,),
        )


def test_a_trial_left_running_by_a_killed_sweep_is_rerun_and_its_processes_stopped(tmp_path, capsys):
    """kill -9 leaves the trial RUNNING in the database and its processes alive: a rerun stops them,
    records the trial as interrupted and runs its parameters again."""
    config = make_config(tmp_path, recipes={"full_ft": {"learning_rate": [2e-5, 5e-5]}}, seeds=[1])
    first = SweepStandIn(interrupt_at=1)
    assert run_sweep(config, launch=first, preflight=no_budget, draw=False) == 130
    leave_running(config)
    _, _, lr, seed = first.interrupted
    running_dir = str(trial_dir(config, "full_ft", lr, seed))
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "--output_dir", running_dir]
    )
    second = SweepStandIn()
    try:
        assert run_sweep(config, launch=second, preflight=no_budget, draw=False) == 0
        assert orphan.wait(timeout=30) == -signal.SIGKILL
    finally:
        if orphan.poll() is None:
            orphan.kill()
    assert (
        f"Resuming: 1 trial(s) interrupted by the last run will be rerun: {running_dir}"
        in capsys.readouterr().out
    )
    assert second.launched == [first.interrupted, ("full_ft", "seeds", 5e-5, 1)]
    search = [
        t for t in sweep_results(config)["trials"] if t["phase"] == "search" and t["learning_rate"] == lr
    ]
    assert [t["status"] for t in search] == ["interrupted", "complete"]


def test_one_sweep_at_a_time_per_output_dir_and_a_changed_grid_needs_another(tmp_path):
    config = make_config(tmp_path)
    with (
        lock_directory(config.output_dir, "sweep"),
        pytest.raises(OutputDirError, match="is in use by a sweep"),
    ):
        run_sweep(config, launch=SweepStandIn(), preflight=no_budget, draw=False)
    assert run_sweep(config, launch=SweepStandIn(interrupt_at=1), preflight=no_budget, draw=False) == 130
    changed = make_config(tmp_path, recipes={"full_ft": {"learning_rate": [1e-5, 2e-5]}})
    with pytest.raises(ConfigError, match="was run with .* Give the changed sweep another output_dir"):
        run_sweep(changed, launch=SweepStandIn(), preflight=no_budget, draw=False)


# --- Optuna is an optional extra -------------------------------------------------------------------------


def test_without_optuna_the_sweep_says_in_one_line_which_extra_to_install(tmp_path, monkeypatch, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config_values(tmp_path)))
    monkeypatch.setitem(sys.modules, "optuna", None)  # `import optuna` fails as if it were not installed
    assert cli_main(["sweep", str(path), "--dry_run"]) == 2
    (line,) = project_lines(capsys.readouterr().err)
    assert line.startswith("error: recipes-lib sweep runs its study with Optuna, which is not installed")
    assert "pip install 'recipes-lib[sweep]'" in line
    assert not (tmp_path / "sweep").exists()  # nothing started
    # Writing W&B Sweeps files needs only the sweep file's checks.
    assert cli_main(["sweep", str(path), "--wandb_sweep", str(tmp_path / "wandb.yaml")]) == 0
    assert (tmp_path / "wandb-full_ft.yaml").is_file()


# What a recipe script imports (recipes/*.py), and the command's parser.
RECIPE_PATH_MODULES = (
    "recipes_lib.run", "recipes_lib.training.trainer", "recipes_lib.config.parsing", "recipes_workbench.recipes",
    "recipes_lib.data.tokenize", "recipes_lib.modeling.loading", "recipes_lib.modeling.adapters",
    "recipes_lib.modeling.optimizers", "recipes_lib.modeling.adamw_8bit", "recipes_workbench.cli.main",
)  # fmt: skip


def library_imports() -> dict[str, set[str]]:
    """{module of src/recipes_lib or src/recipes_workbench: the modules it imports}, read from the source (imports inside
    functions included); `from package import name` counts as importing package.name too."""
    library = REPO_ROOT / "src"
    imports: dict[str, set[str]] = {}
    for path in [*(library / "recipes_lib").rglob("*.py"), *(library / "recipes_workbench").rglob("*.py")]:
        parts = path.relative_to(library).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        names = imports.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return imports


def test_only_the_sweep_reaches_optuna_in_the_library():
    """Which modules of the library reach Optuna, directly or through others: the sweep's study, what
    builds on it, and the sweep command, which imports the runner only after checking for Optuna."""
    imports = library_imports()
    reaches = {module for module, names in imports.items() if any(n.split(".")[0] == "optuna" for n in names)}
    assert reaches == {"recipes_workbench.sweep.study"}
    while True:
        more = {module for module, names in imports.items() if names & reaches} - reaches
        if not more:
            break
        reaches |= more
    assert reaches == {
        "recipes_workbench.sweep.study", "recipes_workbench.sweep.report", "recipes_workbench.sweep.runner", "recipes_workbench.sweep.parallel",
        "recipes_workbench.cli.sweep", "recipes_workbench.cli.main", "recipes_workbench.cli.__main__",
        "recipes_workbench.crossval.runner", "recipes_workbench.cli.crossval",
    }  # fmt: skip


@pytest.mark.slow
def test_the_recipes_and_the_parser_import_nothing_of_optuna():
    """`pip install .` without the sweep extra gives working recipes: with optuna unimportable, the
    recipe path still imports, and nothing of optuna is loaded."""
    code = (
        "import importlib, sys\n"
        "sys.modules['optuna'] = None\n"
        f"for name in {RECIPE_PATH_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'optuna' and sys.modules[m] is not None)\n"
        "print('optuna modules loaded:', loaded)\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "optuna modules loaded: []" in completed.stdout


# --- compare: repeats of one setting, grouped -----------------------------------------------------------


def fake_results(directory: Path, recipe: str, lr: float, seed: int, accuracy: float, **config) -> str:
    directory.mkdir(parents=True)
    settings = {"learning_rate": lr, "seed": seed, "output_dir": str(directory), "run_name": f"{recipe} {seed}",
                "model_name_or_path": "tiny", "num_train_epochs": 3, **config}  # fmt: skip
    results = {"recipe": recipe, "model_name_or_path": "tiny", "eval_accuracy": accuracy, "eval_f1": accuracy - 0.01,
               "peak_memory_gib": 1.0, "train_runtime_s": 10.0, "config": settings}  # fmt: skip
    (directory / "results.json").write_text(json.dumps(results))
    return str(directory)


def test_compare_groups_repeats_of_one_setting_and_shows_mean_and_std(tmp_path, capsys):
    runs = [
        fake_results(tmp_path / "a1", "full_ft", 5e-5, 1, 0.85),
        fake_results(tmp_path / "a2", "full_ft", 5e-5, 2, 0.87),
        fake_results(tmp_path / "a3", "full_ft", 5e-5, 3, 0.86),
        fake_results(tmp_path / "b1", "full_ft", 1e-4, 1, 0.84),  # another learning rate: another setting
        fake_results(tmp_path / "c1", "full_ft", 5e-5, 4, 0.80, num_train_epochs=1),  # another option too
        fake_results(tmp_path / "d1", "lora", 5e-5, 1, 0.80),  # another recipe
    ]
    assert cli_main(["compare", "--no_chart", *runs]) == 0
    output = capsys.readouterr().out
    assert (
        "Repeats of the same setting (every option equal but the seed and output_dir): 4 settings" in output
    )
    repeats = output.split("Repeats of the same setting", 1)[1].splitlines()
    header, _rule, first, *others = repeats[1:]
    assert header.split()[:5] == ["recipe", "model", "lr", "runs", "seeds"]
    assert first.split()[:8] == ["full_ft", "tiny", "5e-05", "3", "1,", "2,", "3", "0.8600"]
    assert "± 0.0100" in first  # the sample standard deviation of 0.85, 0.87, 0.86
    assert len(others) == 3 and all(" ± " not in row.split("tiny", 1)[1].split()[3] for row in others)
    # Runs that repeat nothing: no grouped table.
    assert cli_main(["compare", "--no_chart", runs[0], runs[3]]) == 0
    assert "Repeats" not in capsys.readouterr().out


# --- a real sweep: each trial an accelerate launch on the tiny BERT, W&B offline -----------------------


def real_sweep_values(root: Path, tiny_bert: Path, data: dict, output_dir: Path) -> dict:
    return {
        "accelerate_config": CPU,
        "recipes_dir": str(RECIPES_DIR),
        "output_dir": str(output_dir),
        "search_seed": 1,
        "seeds": [1, 2],
        # 1e12 diverges: the loss is NaN by step 3 and the recipe exits with TrainingDiverged's code 3.
        "recipes": {"full_ft": {"learning_rate": [5e-3, 1e12]}},
        "args": {
            "model_name_or_path": str(tiny_bert),
            "train_file": str(data["train"]),
            "validation_file": str(data["validation"]),
            "max_seq_length": 32,
            "per_device_train_batch_size": 16,
            "max_steps": 4,
            "eval_strategy": "no",
            "max_eval_samples": 32,
            "save_strategy": "no",
            "logging_steps": 1,
            "disable_tqdm": True,
            "report_to": "wandb",
        },  # fmt: skip
    }


@pytest.fixture(scope="module")
def wandb_root(tmp_path_factory):
    """W&B offline, isolated from any key or setting, for this process and the trials it launches."""
    import wandb

    root = tmp_path_factory.mktemp("sweep-wandb")
    with pytest.MonkeyPatch.context() as patch:
        for key in [key for key in os.environ if key.startswith("WANDB_")]:
            patch.delenv(key)
        for key, value in isolated_wandb_env(root, WANDB_MODE="offline").items():
            if key.startswith("WANDB_") or key == "NETRC":
                patch.setenv(key, value)
        wandb.teardown()
        yield root
    wandb.teardown()


# Three real trials, each an `accelerate launch` (~60 s in all on 2 cores): the tests that read them are
# marked slow, and CI runs them; the fake-trial tests above check the sweep's logic by default.
@pytest.fixture(scope="module")
def real_sweep(tiny_bert, learnable_data, tmp_path_factory, one_thread, wandb_root):
    """Three real trials: the search (5e-3, and 1e12, which diverges) at seed 1, then 5e-3 at seed 2."""
    root = tmp_path_factory.mktemp("real-sweep")
    config = sweep_config_from_values(
        real_sweep_values(root, tiny_bert, learnable_data, root / "sweep"), "test"
    )
    started = time.monotonic()
    assert run_sweep(config) == 0
    return SimpleNamespace(config=config, results=sweep_results(config), seconds=time.monotonic() - started)


# Slow: reads the real sweep (see the fixture); the fake-trial tests above cover the logic by default.
@pytest.mark.slow
def test_a_real_sweep_records_the_diverging_trial_as_failed_and_finishes(real_sweep):
    config, results = real_sweep.config, real_sweep.results
    (full_ft,) = results["recipes"]
    by_lr = {trial["learning_rate"]: trial for trial in full_ft["search"]}
    assert by_lr[1e12]["status"] == "failed"
    assert by_lr[1e12]["reason"].startswith(
        "diverged (TrainingDiverged, exit code 3): The training loss became"
    )
    assert by_lr[5e-3]["status"] == "complete" and full_ft["chosen_learning_rate"] == 5e-3
    assert [seed["seed"] for seed in full_ft["seeds"]] == [1, 2] and full_ft["validation"]["n"] == 2
    for seed in (1, 2):
        results_json = json.loads((trial_dir(config, "full_ft", 5e-3, seed) / "results.json").read_text())
        assert results_json["config"]["learning_rate"] == 5e-3 and results_json["config"]["seed"] == seed
        assert results_json["eval_accuracy"] in full_ft["validation"]["values"]
    assert (
        full_ft["peak_memory_gib"] > 0.1
        and full_ft["optimizer_state_bytes"] > 0
        and full_ft["time_per_epoch_s"] > 0
    )
    assert (Path(config.output_dir) / CHART_FILE).is_file()
    assert (Path(config.output_dir) / "logs" / "full_ft-lr1e+12-seed1.log").read_text().count(
        "exit status 3"
    ) == 1


# Slow: reads the real sweep (see the fixture); the fake-trial tests above cover the logic by default.
@pytest.mark.slow
def test_every_trial_is_a_wandb_run_in_the_sweeps_group_with_recipe_rate_seed_and_phase(
    real_sweep, wandb_root
):
    runs = [read_run(run_dir) for run_dir in offline_runs(wandb_root)]
    assert len(runs) == 3  # the diverged trial too
    group = real_sweep.config.group
    assert {run.run_record["run_group"] for run in runs} == {group}
    configs = {(run.summary["config"]["learning_rate"], run.summary["config"]["seed"]): run for run in runs}
    assert set(configs) == {(5e-3, 1), (1e12, 1), (5e-3, 2)}
    for (lr, seed), run in configs.items():
        config = run.summary["config"]
        assert config[names.RECIPE] == "full_ft" and config[names.SWEEP] == group
        assert config[names.SWEEP_PHASE] == ("seeds" if seed == 2 else "search")
        assert run.summary["name"] == f"full_ft lr={format_lr(lr)} seed={seed}"
    assert configs[(5e-3, 2)].summary["config"][names.SWEEP_CHOSEN] == "full_ft lr=0.005"
    assert names.SWEEP_CHOSEN not in configs[(5e-3, 1)].summary["config"]


# Slow: reads the real sweep (see the fixture); the fake-trial tests above cover the logic by default.
@pytest.mark.slow
def test_the_dashboards_sweep_section_shows_what_the_sweeps_runs_logged(real_sweep, wandb_root):
    pytest.importorskip("wandb_workspaces")
    from recipes_workbench.dashboard import SECTION_SWEEP, build_view, view_spec

    spec = view_spec(build_view("bert-recipes", "an-entity", real_sweep.config.group))
    (section,) = [s for s in spec["section"]["panelBankConfig"]["sections"] if s["name"] == SECTION_SWEEP]
    panels = {panel["config"]["chartTitle"]: panel for panel in section["panels"]}
    assert len(panels) == 3
    scatter = next(p for title, p in panels.items() if "against the learning rate" in title)
    assert (scatter["config"]["xAxis"], scatter["config"]["yAxis"]) == (
        "config:learning_rate.value",
        "summary:eval_accuracy",
    )
    assert scatter["config"]["xAxisLogScale"] is True
    bar = next(p for p in panels.values() if p["viewType"] == "Bar Chart")["config"]
    assert (bar["groupBy"], bar["groupAgg"], bar["groupArea"]) == ("sweep_chosen.value", "mean", "stddev")
    memory = next(p for title, p in panels.items() if title.startswith("Peak memory"))["config"]
    assert (memory["xAxis"], memory["yAxis"]) == ("summary:peak_memory_gib", "summary:eval_accuracy")
    summary_keys = {key for p in section["panels"] for key in p["config"].get("metrics", [])}
    summary_keys |= {p["config"][axis].removeprefix("summary:") for p in section["panels"] if p["viewType"] == "Scatter Plot"
                     for axis in ("xAxis", "yAxis") if p["config"][axis].startswith("summary:")}  # fmt: skip
    config_keys = {"learning_rate", bar["groupBy"].removesuffix(".value")}
    runs = [read_run(run_dir) for run_dir in offline_runs(wandb_root)]
    finished = [run for run in runs if run.summary["config"]["learning_rate"] == 5e-3]
    for run in finished:  # every key the section shows, logged by the runs it shows
        assert summary_keys <= run.logged_keys, sorted(summary_keys - run.logged_keys)
    chosen = [run for run in finished if run.summary["config"][names.SWEEP_PHASE] == "seeds"]
    assert chosen and all(config_keys <= set(run.summary["config"]) for run in chosen)


# Slow: reads the real sweep (see the fixture); the fake-trial tests above cover the logic by default.
@pytest.mark.slow
def test_compare_on_the_sweeps_trials_groups_the_seeds_of_the_chosen_rate(real_sweep, capsys):
    config = real_sweep.config
    runs = [str(trial_dir(config, "full_ft", 5e-3, seed)) for seed in (1, 2)]
    assert cli_main(["compare", "--no_chart", *runs]) == 0
    output = capsys.readouterr().out
    assert (
        "Repeats of the same setting (every option equal but the seed and output_dir): 1 settings" in output
    )
    row = output.split("Repeats of the same setting", 1)[1].splitlines()[3]
    assert row.split()[2:6] == ["0.005", "2", "1,", "2"] and " ± " in row


def test_the_planner_skips_a_trial_above_the_memory_budget_before_launch(
    tiny_bert, learnable_data, tmp_path, capsys
):
    values = real_sweep_values(tmp_path, tiny_bert, learnable_data, tmp_path / "sweep")
    values["args"]["report_to"] = "none"
    config = sweep_config_from_values({**values, "memory_budget": 1e-6}, "test")
    assert run_sweep(config) == 0
    output = capsys.readouterr().out.split("Sweep sweep: each recipe")[0]  # the plan, before anything ran
    reason = re.search(
        r"skipped: (the planner predicts a peak of [0-9.]+ GiB, which does not fit the budget of 0.00 GiB \(--memory_budget\))",
        output,
    )
    assert reason, output
    assert (
        output.count(reason.group(0)) == 3
    )  # both search trials and the seed trial, before anything launched
    (full_ft,) = sweep_results(config)["recipes"]
    assert full_ft["status"] == f"skipped: {reason.group(1)}" and full_ft["memory_plan"]["fits"] is False
    assert (
        not (Path(config.output_dir) / "full_ft").exists() and not (Path(config.output_dir) / "logs").exists()
    )


@pytest.mark.slow
def test_kill_9_during_a_trial_then_the_same_command_resumes_and_reports_as_if_never_stopped(
    real_sweep, tiny_bert, learnable_data, tmp_path
):
    """The real thing: the sweep process killed with SIGKILL while its second trial runs; the same
    command again stops the orphaned trial, reruns it and only it, and reports what the uninterrupted
    sweep (the module's real_sweep) reported."""
    values = real_sweep_values(tmp_path, tiny_bert, learnable_data, tmp_path / "sweep")
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(yaml.safe_dump(values))
    command = [sys.executable, "-m", "recipes_workbench.cli", "sweep", str(sweep_file)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    logs = tmp_path / "sweep" / "logs"
    first = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and not list(logs.glob("*.log")):
        time.sleep(0.1)
    (first_log,) = logs.glob("*.log")
    while time.monotonic() < deadline and len(list(logs.glob("*.log"))) < 2:
        time.sleep(0.1)
    assert len(list(logs.glob("*.log"))) == 2, "the second trial never started"
    # Killed at the trial's first line of output (its log opens with the command): the trial is then
    # running and still has its data, model and first step ahead. A fixed wait after the log appeared
    # raced the diverging trial, which stops at its first step: once the recipe's imports got lighter,
    # it could finish within the wait and leave nothing to resume.
    (second_log,) = set(logs.glob("*.log")) - {first_log}
    while time.monotonic() < deadline and len(second_log.read_text().splitlines()) < 2:
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    second = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "Resuming: 1 trial(s) interrupted" in second.stdout

    def trials_reported(output: str) -> list[str]:
        return [
            line.split(":")[0]
            for line in output.splitlines()
            if line.startswith("full_ft ") and " seed=" in line
        ]

    before, after = trials_reported(first.stdout.read()), trials_reported(second.stdout)
    assert len(before) == 1 and not set(before) & set(after) and len(before) + len(after) == 3
    results = sweep_results(sweep_study_config(sweep_file))
    statuses = sorted(trial["status"] for trial in results["trials"])
    assert statuses == [
        "complete",
        "complete",
        "failed",
        "interrupted",
    ]  # 3 trials, the interrupted one twice
    assert comparable(results) == comparable(real_sweep.results)


def sweep_study_config(sweep_file: Path) -> SweepConfig:
    return sweep_config_from_values(load_sweep_file(str(sweep_file)), "test")


# A value of the wrong type for each key of the sweep file: a list, a mapping, true (issue #54: `output_dir: [a]`
# made a directory named "['a']").
WRONG_TYPES = (["a"], {"a": 1}, True)


@pytest.mark.parametrize("key", sorted(set(TOP_LEVEL_KEYS) - {"recipes", "args", "retry_failed"}))
def test_every_sweep_file_key_refuses_a_value_of_the_wrong_type_before_anything_is_made(
    tmp_path, monkeypatch, capsys, key
):
    monkeypatch.chdir(tmp_path)
    for value in WRONG_TYPES:
        if key == "seeds" and value is True:
            value = [True]  # a list is right for seeds; a list of non-integers is not
        sweep_file = tmp_path / "sweep.yaml"
        sweep_file.write_text(yaml.safe_dump({"recipes": {"full_ft": {"learning_rate": [1e-3]}}, key: value}))
        with pytest.raises(ConfigError, match=f"'{key}'"):
            sweep_config_from_values(load_sweep_file(str(sweep_file)), "test")
        assert cli_main(["sweep", str(sweep_file), "--dry_run"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
        assert sorted(path.name for path in tmp_path.iterdir()) == ["sweep.yaml"]
