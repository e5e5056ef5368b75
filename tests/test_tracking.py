"""W&B tracking: runs read back from their offline logs with `wandb leet inspect`, as a user would.

`wandb leet inspect --summary --json RUN` gives the run's name, tags, config and summary; its
group and job_type are only in the raw records (`wandb leet inspect --json RUN`, the "run" record),
and so is the history.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_lib.errors import ConfigError
from recipes_lib.tracking import names
from recipes_lib.tracking.wandb_run import DEFAULT_PROJECT, run_identity, start_tracking
from tests.helpers.repo import REPO_ROOT
from tests.helpers.runs import run_args, run_recipe_process
from tests.helpers.wandb_runs import FAKE_API_KEY, LoggedRun, isolated_wandb_env, offline_runs, read_run

FULL_FT = RecipeSpec(name="full_ft")
LORA_LIKE = RecipeSpec(name="lora", training_defaults={"learning_rate": 5e-4})


@dataclass
class TrackedRun(LoggedRun):
    """A recipe run in its own process, with its results.json and its one W&B run read back."""

    output_dir: Path
    wandb_root: Path
    output: str  # stdout + stderr of the run
    results: dict

    @property
    def history(self) -> list[dict]:
        return [record["history"]["item"] for record in self.records if record["type"] == "history"]

    def our_sync_lines(self) -> list[str]:
        return [line for line in self.output.splitlines() if "recipes_lib" in line and "wandb sync" in line]


def run_tracked(recipe: str, args: list[str], wandb_root: Path, output_dir: Path, env: dict) -> TrackedRun:
    return read_back(run_recipe_process(recipe, args, env=env), wandb_root, output_dir)


def read_back(completed: subprocess.CompletedProcess, wandb_root: Path, output_dir: Path) -> TrackedRun:
    """The finished run's results.json and its one W&B run, as `wandb leet inspect` reads it."""
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-4000:]
    run_dirs = offline_runs(wandb_root)
    assert len(run_dirs) == 1, run_dirs
    logged = read_run(run_dirs[0])
    return TrackedRun(
        run_dir=logged.run_dir,
        summary=logged.summary,
        records=logged.records,
        output_dir=output_dir,
        wandb_root=wandb_root,
        output=output,
        results=json.loads((output_dir / "results.json").read_text()),
    )


def without_nulls(value):
    """W&B's summary view leaves out keys whose value is null (e.g. CPU runs' reserved memory)."""
    if isinstance(value, dict):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    return value


@pytest.fixture(scope="module")
def no_key_run(tiny_bert, learnable_data, tmp_path_factory) -> TrackedRun:
    """full_ft with WANDB_MODE unset and no API key anywhere: what a new user gets."""
    root = tmp_path_factory.mktemp("no-key")
    output_dir = root / "out"
    env = isolated_wandb_env(root)
    # 3 epochs is the recipe default, so the run name leaves it out.
    args = run_args(tiny_bert, learnable_data, output_dir, "--num_train_epochs", "3", report_to=None)
    return run_tracked("full_ft", args, root, output_dir, env)


@pytest.fixture(scope="module")
def second_recipe_run(tiny_bert, learnable_data, tmp_path_factory) -> TrackedRun:
    """lora on the same model and data; an API key in the environment, offline mode, model upload on."""
    root = tmp_path_factory.mktemp("lora-offline")
    output_dir = root / "out"
    env = isolated_wandb_env(root, WANDB_MODE="offline", WANDB_API_KEY=FAKE_API_KEY, WANDB_LOG_MODEL="end")
    args = run_args(
        tiny_bert,
        learnable_data,
        output_dir,
        "--num_train_epochs",
        "2",
        "--wandb_tags",
        "smoke,tiny-model",
        report_to=None,
    )
    return run_tracked("lora", args, root, output_dir, env)


# --- a run with no API key ---------------------------------------------------------------------------


def test_without_an_api_key_the_run_finishes_offline_and_one_line_says_how_to_sync(no_key_run):
    lines = no_key_run.our_sync_lines()
    assert len(lines) == 1, lines
    assert "no W&B API key found" in lines[0]
    synced_dir = Path(lines[0].rsplit("wandb sync ", 1)[1].strip())
    assert synced_dir == no_key_run.run_dir.resolve()
    assert list(synced_dir.glob("run-*.wandb"))
    assert no_key_run.summary["state"] == "finished" and no_key_run.summary["exit_code"] == 0


def test_run_name_group_tags_and_job_type(no_key_run, tiny_bert, learnable_data):
    model = tiny_bert.name
    # The run changes these three from the full_ft defaults; nothing else is named.
    assert no_key_run.summary["name"] == f"full_ft {model} lr=0.002 bs=16 seq=32"
    assert no_key_run.summary["project"] == DEFAULT_PROJECT
    assert no_key_run.summary["tags"] == ["full_ft", model, "fp32", "cpu"]
    assert no_key_run.run_record["run_group"] == f"{model}_{learnable_data['train'].parent.name}"
    assert no_key_run.run_record["job_type"] == names.JOB_TYPE


def test_summary_holds_every_results_key_with_the_same_value(no_key_run):
    results, summary = no_key_run.results, no_key_run.summary["summary"]
    shared = [key for key in results if key != "config"]
    assert "peak_memory_gib" in shared and "train_tokens_per_s" in shared
    assert {"train_loss_end", "train_loss_high", "neglected_classes"} <= set(shared)  # issue #42's findings
    mismatches = {
        key: (results[key], summary.get(key))
        for key in shared
        if without_nulls(summary.get(key)) != without_nulls(results[key])
    }
    assert not mismatches
    # The Trainer's own curve ends on the same evaluation that results.json records.
    assert summary["eval/accuracy"] == results["eval_accuracy"]


def test_config_is_the_resolved_configuration_plus_the_environment(no_key_run):
    config, results = no_key_run.summary["config"], no_key_run.results
    assert without_nulls({key: config.get(key) for key in results["config"]}) == without_nulls(
        results["config"]
    )
    assert config["recipe"] == "full_ft"
    environment = config["environment"]
    assert environment["device_kind"] == "cpu" and environment["device"] == results["device"]
    assert environment["versions"] == results["versions"]


def test_history_has_the_trainer_curves_throughput_and_memory(no_key_run):
    history = no_key_run.history
    losses = [row["train/loss"] for row in history if "train/loss" in row]
    accuracies = [row["eval/accuracy"] for row in history if "eval/accuracy" in row]
    assert len(losses) >= 10 and losses[-1] < losses[0]
    # Every epoch (3); the final evaluation is the last epoch's, reused (RecipeTrainer.evaluate), not logged twice.
    assert len(accuracies) == 3
    assert any("train/learning_rate" in row and "train/grad_norm" in row for row in history)
    throughput = [row for row in history if "throughput/real_tokens_per_second" in row]
    assert throughput and all(row["throughput/real_tokens_per_second"] > 0 for row in throughput)
    assert all(
        0 <= row["throughput/pad_ratio"] < 1 and row["throughput/samples_per_second"] > 0
        for row in throughput
    )
    assert all(0 < row["memory/peak_rss_gib"] < 24 for row in throughput)


def test_at_the_end_the_run_logs_its_results_memory_and_confusion_matrix_as_pictures(no_key_run):
    """A launched run (accelerate launch, no key): tests/workbench/test_dashboard.py checks the contents."""
    summary = no_key_run.summary["summary"]
    for key in (
        names.RESULTS_TABLE,
        names.MEMORY_BREAKDOWN_CHART.table_key,
        names.CONFUSION_MATRIX_CHART.table_key,
        names.PER_CLASS_TABLE,
    ):
        assert summary[key]["_type"] == "table-file", key
    charts = {
        key
        for record in no_key_run.records
        if record["type"] == "config"
        for key in record["config"]["update"]
    }
    assert f"_wandb.visualize.{names.MEMORY_BREAKDOWN_CHART.key}" in charts
    assert f"_wandb.visualize.{names.CONFUSION_MATRIX_CHART.key}" in charts


# --- a second recipe on the same data, with a key in the environment --------------------------------


def test_two_recipes_on_the_same_model_and_data_share_a_group(no_key_run, second_recipe_run, tiny_bert):
    assert second_recipe_run.run_record["run_group"] == no_key_run.run_record["run_group"]
    # lr 0.002 differs from lora's own default (5e-4) as it does from full_ft's (2e-5).
    assert second_recipe_run.summary["name"] == f"lora {tiny_bert.name} lr=0.002 bs=16 epochs=2 seq=32"
    assert second_recipe_run.summary["tags"] == ["lora", tiny_bert.name, "fp32", "cpu", "smoke", "tiny-model"]


def test_explicit_offline_mode_says_where_the_run_is_without_a_warning(second_recipe_run):
    lines = second_recipe_run.our_sync_lines()
    assert len(lines) == 1 and "W&B offline mode" in lines[0] and "WARNING" not in lines[0]


def test_the_api_key_appears_in_no_log_result_or_saved_file(second_recipe_run):
    assert FAKE_API_KEY not in second_recipe_run.output
    needle = FAKE_API_KEY.encode()
    for directory in (second_recipe_run.output_dir, second_recipe_run.wandb_root):
        for path in directory.rglob("*"):
            if path.is_file():
                assert needle not in path.read_bytes(), path


def test_wandb_log_model_end_uploads_the_final_adapter_as_an_artifact(second_recipe_run):
    artifacts = [record["artifact"] for record in second_recipe_run.records if record["type"] == "artifact"]
    final = [artifact for artifact in artifacts if "final_model" in artifact["aliases"]]
    assert len(final) == 1
    files = {entry["path"] for entry in final[0]["manifest"]["contents"]}
    assert {"adapter_model.safetensors", "adapter_config.json"} <= files


@pytest.mark.slow
def test_with_a_key_but_no_reachable_server_the_run_falls_back_to_offline(
    tiny_bert, learnable_data, tmp_path
):
    """WANDB_MODE unset and a key: wandb.init tries the server, gives up, and the run goes on offline.

    The fake key fails either way: no network here, or the server rejects it.
    """
    output_dir = tmp_path / "out"
    env = isolated_wandb_env(tmp_path, WANDB_API_KEY=FAKE_API_KEY, WANDB_INIT_TIMEOUT="1")
    run = run_tracked(
        "full_ft",
        run_args(tiny_bert, learnable_data, output_dir, "--max_steps", "4", report_to=None),
        tmp_path,
        output_dir,
        env,
    )
    lines = run.our_sync_lines()
    assert len(lines) == 1 and "could not start an online W&B run" in lines[0], run.output[-3000:]
    assert run.summary["summary"]["eval_accuracy"] == run.results["eval_accuracy"]
    assert FAKE_API_KEY not in run.output
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert FAKE_API_KEY.encode() not in path.read_bytes(), path


@pytest.mark.slow
def test_with_two_processes_only_the_main_process_logs_a_run(tiny_bert, learnable_data, tmp_path):
    output_dir = tmp_path / "out"
    args = run_args(
        tiny_bert,
        learnable_data,
        output_dir,
        "--num_train_epochs",
        "2",
        "--per_device_train_batch_size",
        "8",
        report_to=None,
    )
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO_ROOT / "accelerate_configs" / "multi_cpu.yaml"),
        "--num_processes", "2", "--main_process_port", "0",  # port 0: a free one, whatever else runs
        str(REPO_ROOT / "recipes" / "full_ft.py"), *args,
    ]  # fmt: skip
    completed = subprocess.run(
        command, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, env=isolated_wandb_env(tmp_path)
    )
    run = read_back(completed, tmp_path, output_dir)  # asserts there is exactly one run
    assert len(run.our_sync_lines()) == 1
    assert run.summary["summary"]["num_processes"] == run.results["num_processes"] == 2
    assert run.summary["summary"]["train_tokens_per_s"] == run.results["train_tokens_per_s"]


# --- identity and switches, in this process ----------------------------------------------------------


def parse(recipe: RecipeSpec, data: dict[str, Path], *args: str):
    return parse_arguments(
        recipe, ["--train_file", str(data["train"]), "--validation_file", str(data["validation"]), *args]
    )


def test_run_name_shows_only_the_settings_that_differ_from_the_recipe_defaults(learnable_data):
    assert run_identity(FULL_FT, parse(FULL_FT, learnable_data)).name == "full_ft bert-base-uncased"
    changed = parse(FULL_FT, learnable_data, "--learning_rate", "3e-5", "--optim", "adafactor")
    assert run_identity(FULL_FT, changed).name == "full_ft bert-base-uncased lr=3e-5 optim=adafactor"
    # 5e-4 is the lora recipe's own default: not a difference worth naming.
    assert run_identity(LORA_LIKE, parse(LORA_LIKE, learnable_data, "--learning_rate", "5e-4")).name == (
        "lora bert-base-uncased"
    )
    assert run_identity(FULL_FT, parse(FULL_FT, learnable_data, "--run_name", "mine")).name == "mine"


def test_group_is_model_and_dataset_unless_an_experiment_is_given(learnable_data):
    full_ft = run_identity(FULL_FT, parse(FULL_FT, learnable_data))
    lora = run_identity(LORA_LIKE, parse(LORA_LIKE, learnable_data, "--seed", "7"))
    assert full_ft.group == lora.group == f"bert-base-uncased_{learnable_data['train'].parent.name}"
    hub = parse_arguments(RecipeSpec("full_ft"), ["--dataset_name", "glue", "--dataset_config_name", "mnli"])
    assert run_identity(FULL_FT, hub).group == "bert-base-uncased_glue-mnli"
    named = run_identity(FULL_FT, parse(FULL_FT, learnable_data, "--experiment", "lr-sweep"))
    assert named.group == "lr-sweep"


def test_project_comes_from_the_flag_then_wandb_project_then_the_default(learnable_data, monkeypatch):
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    assert run_identity(FULL_FT, parse(FULL_FT, learnable_data)).project == DEFAULT_PROJECT
    monkeypatch.setenv("WANDB_PROJECT", "from-env")
    assert run_identity(FULL_FT, parse(FULL_FT, learnable_data)).project == "from-env"
    flagged = parse(FULL_FT, learnable_data, "--wandb_project", "from-flag")
    assert run_identity(FULL_FT, flagged).project == "from-flag"


@pytest.mark.parametrize(
    ("args", "mode"),
    [(("--report_to", "none"), "offline"), ((), "disabled"), (("--report_to", "tensorboard"), None)],
)
def test_tracking_is_off_when_report_to_leaves_out_wandb_or_wandb_mode_is_disabled(
    learnable_data, tmp_path, monkeypatch, args, mode
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    if mode is None:
        monkeypatch.delenv("WANDB_MODE", raising=False)
    else:
        monkeypatch.setenv("WANDB_MODE", mode)
    tracker = start_tracking(parse(FULL_FT, learnable_data, *args), FULL_FT)
    assert not tracker.active
    assert not (tmp_path / "wandb").exists()


def test_an_unknown_wandb_mode_is_a_config_error_not_a_traceback(learnable_data, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offlne")
    with pytest.raises(ConfigError, match="WANDB_MODE is 'offlne'"):
        start_tracking(parse(FULL_FT, learnable_data), FULL_FT)


def test_the_repository_demo_config_logs_to_wandb():
    """`make demo` leaves an offline run to look at with `wandb leet outputs/demo/full_ft/wandb`
    (Makefile: WANDB_MODE=offline)."""
    arguments = parse_arguments(
        RecipeSpec("full_ft"), ["--config", str(REPO_ROOT / "recipes/configs/demo.yaml")]
    )
    assert arguments.training.report_to == ["wandb"]
