"""No secret in any byte a run writes or uploads (issue #49).

A secret comes in three ways: an option on the command line (--hub_token), a key of the --config YAML,
or the environment (HF_TOKEN, WANDB_API_KEY). Each way gets its own planted value; after a recipe run,
a sweep and a cross-validation, every file they wrote (the pickled training_args.bin, checkpoints,
W&B's offline run with its binary .wandb file, logs, the Optuna database, the export bundle) and what
they printed are searched for each value. The fast tests pin each piece: the handover at parsing, the
command lines a sweep writes, the command line W&B records.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from recipes_lib import credentials
from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.registry import RECIPES
from recipes_lib.sweep.config import (
    LearningRateSearch,
    RecipeSweep,
    SweepConfig,
    crossval_command,
    parse_args_mapping,
    trial_command,
    wandb_sweep_config,
)
from recipes_lib.sweep.trials import Trial, trial_environment
from tests.helpers.data import learnable_rows, write_csv
from tests.helpers.repo import ACCELERATE_CONFIGS, RECIPES_DIR, REPO_ROOT
from tests.helpers.runs import run_args, run_recipe_process
from tests.helpers.wandb_runs import isolated_wandb_env

# One value per way in, each shaped like the real thing (W&B checks a key's shape before using it).
PLANTED = {
    "command line": "hf_plantedOnTheCommandLine0000000000001",
    "YAML": "hf_plantedInTheYamlConfig000000000000002",
    "env HF_TOKEN": "hf_plantedInTheEnvironment00000000000003",
    "env WANDB_API_KEY": "planted0wandb0key0in0the0environment00000000004",
}


def files_holding(secrets: dict[str, str], *roots: Path) -> dict[str, list[str]]:
    """{way in: the files under `roots` whose bytes hold its planted value}, only the ways found."""
    found: dict[str, list[str]] = {}
    for root in roots:
        for path in sorted(Path(root).rglob("*")):
            if not path.is_file() or path.is_symlink():
                continue
            data = path.read_bytes()
            for way, secret in secrets.items():
                if secret.encode() in data:
                    found.setdefault(way, []).append(str(path.relative_to(root.parent)))
    return found


def printed_holding(secrets: dict[str, str], *outputs: str) -> list[str]:
    return [way for way, secret in secrets.items() if any(secret in text for text in outputs)]


@pytest.fixture
def planted_env(tmp_path) -> dict[str, str]:
    """An offline W&B with no WANDB_DIR (the run keeps its W&B files in its output_dir) and the
    environment's two secrets planted."""
    env = isolated_wandb_env(tmp_path / "wandb-home", WANDB_MODE="offline")
    env.pop("WANDB_DIR")
    env.update(
        HF_TOKEN=PLANTED["env HF_TOKEN"], WANDB_API_KEY=PLANTED["env WANDB_API_KEY"], OMP_NUM_THREADS="1"
    )
    return env


# --- fast: each piece --------------------------------------------------------------------------------------


def test_the_secret_options_are_the_token_and_key_fields():
    assert credentials.is_secret_option("hub_token") and credentials.is_secret_option("--hub_token")
    assert credentials.is_secret_option("wandb_api_key") and credentials.is_secret_option("token")
    for name in (
        "tokenizer_name",
        "include_num_input_tokens_seen",
        "average_tokens_across_devices",
        "max_seq_length",
    ):
        assert not credentials.is_secret_option(name)


def test_every_secret_field_of_the_arguments_has_a_way_into_the_environment():
    """A new `*_token` field (a transformers upgrade) fails here until it is handed over too."""
    import dataclasses

    from recipes_lib.config.arguments import SHARED_ARGUMENT_CLASSES, RecipeTrainingArguments

    classes = [
        *SHARED_ARGUMENT_CLASSES,
        RecipeTrainingArguments,
        *(s.options for s in RECIPES.values() if s.options),
    ]
    secret_fields = {
        f.name for cls in classes for f in dataclasses.fields(cls) if credentials.is_secret_option(f.name)
    }
    assert secret_fields == {"hub_token"}
    assert secret_fields <= set(credentials.ENVIRONMENT_OF)


@pytest.mark.parametrize("way", ["command line", "command line =", "YAML"])
def test_a_token_given_as_an_option_leaves_the_arguments_for_the_environment(tmp_path, monkeypatch, way):
    """The parsed arguments, and so training_args.bin, results.json and W&B's config, never hold it;
    huggingface_hub reads it from HF_TOKEN where a push needs it."""
    monkeypatch.setenv("HF_TOKEN", "")  # monkeypatch puts back what was there before the handover
    secret = PLANTED["YAML" if way == "YAML" else "command line"]
    argv = ["--output_dir", str(tmp_path / "out")]
    if way == "YAML":
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({"hub_token": secret}))
        argv += ["--config", str(config)]
    elif way == "command line":
        argv += ["--hub_token", secret]
    else:
        argv += [f"--hub_token={secret}"]
    arguments = parse_arguments(RECIPES["full_ft"], argv)
    assert arguments.training.hub_token is None
    assert os.environ["HF_TOKEN"] == secret
    assert secret.encode() not in pickle.dumps(arguments.training)
    from huggingface_hub import get_token

    assert get_token() == secret  # what Trainer.push_to_hub and recipes-lib push fall back on


def test_the_command_line_w_and_b_records_has_the_value_replaced(tmp_path, monkeypatch):
    """W&B's metadata records sys.argv (wandb offers no switch for that field alone): once parsed, the
    secret's value is out of it, whichever way it was written."""
    import wandb

    secret = PLANTED["command line"]
    argv = ["--output_dir", str(tmp_path), "--hub_token", secret, "--learning_rate", "1e-3"]
    assert credentials.redacted_argv([*argv, f"--hub_token={secret}"]) == [
        "--output_dir", str(tmp_path), "--hub_token", credentials.REDACTED, "--learning_rate", "1e-3",
        f"--hub_token={credentials.REDACTED}",
    ]  # fmt: skip
    monkeypatch.setattr(sys, "argv", ["recipes/full_ft.py", *argv])
    monkeypatch.setenv("HF_TOKEN", "")  # monkeypatch restores it after the handover
    parse_arguments(RECIPES["full_ft"], argv)
    assert sys.argv == ["recipes/full_ft.py", *argv[:3], credentials.REDACTED, *argv[4:]]
    assert secret not in " ".join(wandb.Settings()._args)


def test_a_sweeps_trial_commands_and_w_and_b_sweep_files_hold_no_secret_and_the_trial_gets_it(
    tmp_path, monkeypatch
):
    secret = PLANTED["command line"]
    monkeypatch.setenv("HF_TOKEN", "")  # monkeypatch puts back what was there before the handover
    config = SweepConfig(
        recipes=(RecipeSweep("full_ft", LearningRateSearch(grid=(1e-3,))),),
        output_dir=str(tmp_path),
        args=parse_args_mapping({"hub_token": secret, "max_steps": 2}, "'args'"),
    )
    commands = [
        trial_command(config, "full_ft", 1e-3, 42, sys.executable),
        crossval_command(config, "full_ft", 1e-3, 42, sys.executable),
        yaml.safe_dump(wandb_sweep_config(config, "full_ft")).split(),
    ]
    for command in commands:
        assert secret not in " ".join(command)
        assert "--hub_token" not in command
    assert "--max_steps" in commands[0]  # the other options stay
    trial = Trial("full_ft", "search", 1e-3, 42, tmp_path, tmp_path / "log", commands[0])
    assert trial_environment(trial, config)["HF_TOKEN"] == secret


# --- slow: the real runs, every file searched --------------------------------------------------------------


def _run_args(tiny_bert, data, output_dir, *extra):
    # Two steps, a checkpoint at each, W&B offline: training_args.bin at the top and in each checkpoint.
    return run_args(
        tiny_bert, data, output_dir, "--save_steps", "1", *extra,
        steps=2, epochs=None, batch_size=8, max_eval_samples=16, save_strategy="steps", report_to="wandb",
    )  # fmt: skip


@pytest.fixture
def data_with_test(learnable_data, tmp_path):
    return {**learnable_data, "test": write_csv(tmp_path / "test.csv", learnable_rows(12, seed=7))}


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a recipe launch and an export on a busy machine
@pytest.mark.parametrize("way", ["command line", "YAML"])
def test_a_recipe_run_and_its_export_write_no_planted_secret(
    tmp_path, tiny_bert, data_with_test, planted_env, way
):
    output_dir = tmp_path / "run"
    extra = ["--test_file", str(data_with_test["test"])]
    if way == "YAML":
        config = tmp_path / "secret.yaml"
        config.write_text(yaml.safe_dump({"hub_token": PLANTED["YAML"]}))
        extra += ["--config", str(config)]
    else:
        extra += ["--hub_token", PLANTED["command line"]]
    completed = run_recipe_process(
        "full_ft", _run_args(tiny_bert, data_with_test, output_dir, *extra), env=planted_env
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert (output_dir / "training_args.bin").is_file() and list(
        output_dir.glob("checkpoint-*/training_args.bin")
    )
    assert list((output_dir / "wandb").glob("offline-run-*/*.wandb"))
    export = subprocess.run(
        [sys.executable, "-m", "recipes_lib.cli", "export", str(output_dir)],
        capture_output=True, text=True, timeout=600, env=planted_env, cwd=REPO_ROOT,
    )  # fmt: skip
    assert (output_dir / "export").is_dir() or (output_dir / "export.failed").is_dir(), export.stderr[-2000:]
    secrets = {key: value for key, value in PLANTED.items() if key == way or key.startswith("env")}
    found = files_holding(secrets, output_dir, tmp_path / "wandb-home")
    printed = printed_holding(secrets, completed.stdout, completed.stderr, export.stdout, export.stderr)
    assert (found, printed) == ({}, []), f"planted secrets found: {found}; printed: {printed}"


# Recipe options for the sweep's trial and the crossval's folds: two steps of the tiny BERT, W&B offline.
def tiny_options(tiny_bert, train_file) -> dict:
    return {
        "model_name_or_path": str(tiny_bert), "train_file": str(train_file), "max_seq_length": 32,
        "per_device_train_batch_size": 8, "max_steps": 2, "save_strategy": "no", "report_to": "wandb",
        "disable_tqdm": "true",
    }  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three processes (the sweep, its preflight, its trial) on a busy machine
def test_a_sweep_writes_no_planted_secret(tmp_path, tiny_bert, learnable_data, planted_env):
    """A sweep whose file gives the token as a recipe option (a trial): its trial log, its Optuna database, the
    trial's files and W&B run."""
    sweep_file = tmp_path / "sweep.yaml"
    options = {
        **tiny_options(tiny_bert, learnable_data["train"]),
        "validation_file": str(learnable_data["validation"]),
    }
    sweep_file.write_text(yaml.safe_dump({
        "recipes": {"full_ft": {"learning_rate": [1e-3]}}, "seeds": [42], "output_dir": str(tmp_path / "sweep"),
        "accelerate_config": str(ACCELERATE_CONFIGS / "cpu.yaml"), "recipes_dir": str(RECIPES_DIR),
        "args": {**options, "max_eval_samples": 16, "hub_token": PLANTED["YAML"]},
    }))  # fmt: skip
    sweep = subprocess.run([sys.executable, "-m", "recipes_lib.cli", "sweep", str(sweep_file)],
                           capture_output=True, text=True, timeout=1500, env=planted_env, cwd=REPO_ROOT)  # fmt: skip
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    assert list((tmp_path / "sweep").rglob("*.wandb")) and list((tmp_path / "sweep").rglob("*.db"))
    found = files_holding(PLANTED, tmp_path / "sweep", tmp_path / "wandb-home")
    printed = printed_holding(PLANTED, sweep.stdout, sweep.stderr)
    assert (found, printed) == ({}, []), f"planted secrets found: {found}; printed: {printed}"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # two folds, each its own launch
def test_a_crossval_writes_no_planted_secret(tmp_path, tiny_bert, learnable_data, planted_env):
    """A two-fold crossval given the token on its command line: its fold logs, crossval.db, the folds' files."""
    options = [
        item
        for key, value in tiny_options(tiny_bert, learnable_data["train"]).items()
        for item in (f"--{key}", str(value))
    ]
    crossval = subprocess.run(
        [sys.executable, "-m", "recipes_lib.cli", "crossval", "full_ft", "--folds", "2",
         "--output_dir", str(tmp_path / "crossval"), "--recipes_dir", str(RECIPES_DIR),
         "--accelerate_config", str(ACCELERATE_CONFIGS / "cpu.yaml"), *options, "--hub_token", PLANTED["command line"]],
        capture_output=True, text=True, timeout=1500, env=planted_env, cwd=REPO_ROOT,
    )  # fmt: skip
    assert crossval.returncode == 0, crossval.stdout[-3000:] + crossval.stderr[-3000:]
    assert (
        list((tmp_path / "crossval").rglob("*.wandb")) and (tmp_path / "crossval" / "crossval.db").is_file()
    )
    found = files_holding(PLANTED, tmp_path / "crossval", tmp_path / "wandb-home")
    printed = printed_holding(PLANTED, crossval.stdout, crossval.stderr)
    assert (found, printed) == ({}, []), f"planted secrets found: {found}; printed: {printed}"
