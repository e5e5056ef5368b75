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
from recipes_workbench.recipes import RECIPES
from recipes_workbench.sweep.config import (
    LearningRateSearch,
    RecipeSweep,
    SweepConfig,
    crossval_command,
    parse_args_mapping,
    trial_command,
    wandb_sweep_config,
)
from recipes_workbench.sweep.trials import Trial, trial_environment
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


def test_a_token_in_the_yaml_leaves_the_arguments_for_the_environment(tmp_path, monkeypatch):
    """The parsed arguments, and so training_args.bin, results.json and W&B's config, never hold it;
    huggingface_hub reads it from HF_TOKEN where a push needs it."""
    monkeypatch.setenv("HF_TOKEN", "")  # monkeypatch puts back what was there before the handover
    secret = PLANTED["YAML"]
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"hub_token": secret}))
    arguments = parse_arguments(
        RECIPES["full_ft"], ["--output_dir", str(tmp_path / "out"), "--config", str(config)]
    )
    assert arguments.training.hub_token is None
    assert os.environ["HF_TOKEN"] == secret
    assert secret.encode() not in pickle.dumps(arguments.training)
    from huggingface_hub import get_token

    assert get_token() == secret  # what Trainer.push_to_hub and recipes-lib push fall back on


# --- every secret option any parser accepts, through every way in (issue #54) ----------------------------


def _walk_parsers(parser, path=()):
    """(command path, parser) for the `recipes-lib` parser and each of its subcommands, all levels."""
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk_parsers(sub, (*path, name))


def accepted_secret_options() -> dict[str, set[str]]:
    """{parser: every option string it accepts whose name means a secret}, over every recipe's parser and
    every `recipes-lib` command: aliases included (HfArgumentParser adds --hub-token to --hub_token)."""
    from recipes_lib.config.parsing import recipe_parser
    from recipes_workbench.cli.main import build_parser

    parsers = {f"recipes/{name}.py": recipe_parser(spec) for name, spec in RECIPES.items()}
    parsers |= {" ".join(("recipes-lib", *path)): sub for path, sub in _walk_parsers(build_parser())}
    return {
        name: {o for a in parser._actions for o in a.option_strings if credentials.is_secret_option(o)}
        for name, parser in parsers.items()
    }


SECRET = "hf_plantedSecretOption00000000000000005"
RECIPE_SECRET_OPTIONS = sorted(set().union(*accepted_secret_options().values()))


def test_the_secret_options_found_are_the_hub_token_and_its_alias_and_no_command_takes_one():
    """The enumeration finds what it must (so the routes below test something), and a command of the
    workbench that starts taking a token on its command line (push's old --token) fails here."""
    found = accepted_secret_options()
    assert RECIPE_SECRET_OPTIONS == ["--hub-token", "--hub_token"]
    assert {
        name: options for name, options in found.items() if name.startswith("recipes-lib") and options
    } == {}


def _forms(option: str) -> list[list[str]]:
    return [[option, SECRET], [f"{option}={SECRET}"]]


def _refused_without_the_value(text: str, option: str) -> None:
    assert SECRET not in text
    assert f"{option} is a secret" in text and "HF_TOKEN" in text and "hf auth login" in text
    assert "Traceback" not in text and text.count("error:") == 1


@pytest.mark.parametrize("option", RECIPE_SECRET_OPTIONS)
def test_a_recipe_refuses_every_secret_option_on_its_command_line(tmp_path, monkeypatch, capsys, option):
    """Refused before anything reads them, in one paragraph naming the option, not its value: nothing a
    launcher prints (accelerate's CalledProcessError shows the child's command line) can hold a token
    the recipe took."""
    from recipes_lib.run.recipe_run import run_main

    monkeypatch.setenv("HF_TOKEN", "")
    for spec in RECIPES.values():
        for form in _forms(option):
            argv = ["--output_dir", str(tmp_path / "out"), *form]
            with pytest.raises(SystemExit) as stopped:
                run_main(lambda args, spec=spec: parse_arguments(spec, args), argv)
            assert stopped.value.code == 2
            _refused_without_the_value(capsys.readouterr().err, option)
            assert os.environ["HF_TOKEN"] == "" and not (tmp_path / "out").exists()


COMMANDS = sorted(name.split()[1] for name in accepted_secret_options() if name.count(" ") == 1)


@pytest.mark.parametrize("option", [*RECIPE_SECRET_OPTIONS, "--token", "--wandb_api_key", "--db-password"])
def test_every_recipes_lib_command_refuses_a_secret_option_before_parsing(tmp_path, capsys, option):
    """crossval passes unknown options to its folds, push once took --token, argparse echoes what it
    refuses ("unrecognized arguments: --token hf_..."): each command, each spelling, one paragraph."""
    from recipes_workbench.cli.main import main

    assert {"crossval", "push", "sweep", "export", "label-issues", "predict"} <= set(COMMANDS)
    for command in COMMANDS:
        for form in _forms(option):
            code = main([command, *form, "--output_dir", str(tmp_path / command)])
            assert code == 2, command
            _refused_without_the_value(capsys.readouterr().err, option)
            assert not (tmp_path / command).exists()


@pytest.mark.parametrize("key", ["hub_token", "hub-token"])
def test_a_sweeps_arg_flag_refuses_a_secret_and_its_yaml_args_hand_it_over_under_either_spelling(
    tmp_path, monkeypatch, capsys, key
):
    from recipes_workbench.cli.main import main

    assert main(["sweep", "--arg", f"{key}={SECRET}", "--arg", "max_steps=2"]) == 2
    _refused_without_the_value(capsys.readouterr().err, f"--{key}")
    config = SweepConfig(
        recipes=(RecipeSweep("full_ft", LearningRateSearch(grid=(1e-3,))),),
        output_dir=str(tmp_path),
        args=parse_args_mapping({key: SECRET, "max_steps": 2}, "'args'"),
    )
    for command in (trial_command(config, "full_ft", 1e-3, 42, sys.executable),
                    crossval_command(config, "full_ft", 1e-3, 42, sys.executable)):  # fmt: skip
        assert SECRET not in " ".join(command) and not credentials.secret_options_in(command)
    trial = Trial("full_ft", "search", 1e-3, 42, tmp_path, tmp_path / "log", [])
    assert trial_environment(trial, config)["HF_TOKEN"] == SECRET


@pytest.mark.parametrize("value", [[SECRET], {"a": SECRET}])
def test_a_secret_of_the_wrong_type_in_a_yaml_is_refused_without_its_value(tmp_path, monkeypatch, value):
    """`hub_token: [x]` in a recipe config or a sweep's args: one paragraph, the value not in it."""
    from recipes_lib.errors import ConfigError

    monkeypatch.setenv("HF_TOKEN", "")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"hub_token": value}))
    with pytest.raises(ConfigError) as refused:
        parse_arguments(RECIPES["full_ft"], ["--output_dir", str(tmp_path / "out"), "--config", str(config)])
    assert SECRET not in str(refused.value) and "hub_token" in str(refused.value)
    for key in ("hub_token", "hub-token", "wandb_api_key"):
        with pytest.raises(ConfigError) as refused:
            parse_args_mapping({key: value}, "'args'")
        assert SECRET not in str(refused.value)
    with pytest.raises(ConfigError) as refused:  # a secret no recipe takes would ride a trial's command line
        parse_args_mapping({"wandb_api_key": SECRET}, "'args'")
    assert SECRET not in str(refused.value)


@pytest.mark.workbench  # the study storage (the sweep extra: optuna)
@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://user:{SECRET}@db.example:notaport/study",  # SQLAlchemy cannot parse it
        f"postgresql://user:p@ss{SECRET}@db.example:5432/study",  # an @ in the password
        f"postgresql://user@127.0.0.1:9/study?password={SECRET}",
        f"mysql+pymysql://user@127.0.0.1:9/study?sslmode=require&api_key={SECRET}",
    ],
)
def test_a_storage_url_s_password_is_in_no_message(tmp_path, capsys, learnable_data, url):
    """crossval and sweep open --storage and name it when it fails: the URL is shown, its password not."""
    from recipes_workbench.cli.main import main

    code = main(["crossval", "full_ft", "--folds", "2", "--output_dir", str(tmp_path / "cv"),
                 "--train_file", str(learnable_data["train"]), "--accelerate_config",
                 str(ACCELERATE_CONFIGS / "cpu.yaml"), "--storage", url])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 2 and "--storage" in printed.err, printed.err
    assert SECRET not in printed.out + printed.err and "p@ss" not in printed.err
    assert credentials.REDACTED in printed.err


def test_a_message_holding_a_secret_of_the_environment_is_printed_without_it(monkeypatch, capsys):
    """Whatever a library puts in an error (a URL, a header, a path), the printed paragraph leaves out
    the value of every secret-named environment variable."""
    from recipes_lib.errors import ConfigError
    from recipes_lib.run.recipe_run import run_main

    monkeypatch.setenv("WANDB_API_KEY", SECRET)

    def failing(argv):
        raise ConfigError(f"the server said: bad key {SECRET} for https://u:{SECRET}x@host/x")

    with pytest.raises(SystemExit):
        run_main(failing, [])
    err = capsys.readouterr().err
    assert SECRET not in err and err.count(credentials.REDACTED) == 2


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
def test_a_recipe_run_and_its_export_write_no_planted_secret(
    tmp_path, tiny_bert, data_with_test, planted_env
):
    """The YAML's token and the environment's (the command line's is refused: the fast tests above, and
    test_docs' README launch)."""
    way = "YAML"
    output_dir = tmp_path / "run"
    config = tmp_path / "secret.yaml"
    config.write_text(yaml.safe_dump({"hub_token": PLANTED["YAML"]}))
    extra = ["--test_file", str(data_with_test["test"]), "--config", str(config)]
    completed = run_recipe_process(
        "full_ft", _run_args(tiny_bert, data_with_test, output_dir, *extra), env=planted_env
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert (output_dir / "training_args.bin").is_file() and list(
        output_dir.glob("checkpoint-*/training_args.bin")
    )
    assert list((output_dir / "wandb").glob("offline-run-*/*.wandb"))
    export = subprocess.run(
        [sys.executable, "-m", "recipes_workbench.cli", "export", str(output_dir)],
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
        "args": {**options, "max_eval_samples": 16, "hub-token": PLANTED["YAML"]},  # the dashed alias
    }))  # fmt: skip
    sweep = subprocess.run([sys.executable, "-m", "recipes_workbench.cli", "sweep", str(sweep_file)],
                           capture_output=True, text=True, timeout=1500, env=planted_env, cwd=REPO_ROOT)  # fmt: skip
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    assert list((tmp_path / "sweep").rglob("*.wandb")) and list((tmp_path / "sweep").rglob("*.db"))
    found = files_holding(PLANTED, tmp_path / "sweep", tmp_path / "wandb-home")
    printed = printed_holding(PLANTED, sweep.stdout, sweep.stderr)
    assert (found, printed) == ({}, []), f"planted secrets found: {found}; printed: {printed}"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # two folds, each its own launch
def test_a_crossval_writes_no_planted_secret(tmp_path, tiny_bert, learnable_data, planted_env):
    """A two-fold crossval given the token in its --config YAML: its fold logs, crossval.db, the folds' files."""
    config = tmp_path / "secret.yaml"
    config.write_text(yaml.safe_dump({"hub_token": PLANTED["YAML"]}))
    options = [
        item
        for key, value in tiny_options(tiny_bert, learnable_data["train"]).items()
        for item in (f"--{key}", str(value))
    ]
    crossval = subprocess.run(
        [sys.executable, "-m", "recipes_workbench.cli", "crossval", "full_ft", "--folds", "2",
         "--output_dir", str(tmp_path / "crossval"), "--recipes_dir", str(RECIPES_DIR),
         "--accelerate_config", str(ACCELERATE_CONFIGS / "cpu.yaml"), *options, "--config", str(config)],
        capture_output=True, text=True, timeout=1500, env=planted_env, cwd=REPO_ROOT,
    )  # fmt: skip
    assert crossval.returncode == 0, crossval.stdout[-3000:] + crossval.stderr[-3000:]
    assert (
        list((tmp_path / "crossval").rglob("*.wandb")) and (tmp_path / "crossval" / "crossval.db").is_file()
    )
    found = files_holding(PLANTED, tmp_path / "crossval", tmp_path / "wandb-home")
    printed = printed_holding(PLANTED, crossval.stdout, crossval.stderr)
    assert (found, printed) == ({}, []), f"planted secrets found: {found}; printed: {printed}"


def _cli_error(argv: list[str], capsys) -> tuple[int, str]:
    """(exit code, stderr) of `recipes-lib ARGV` in-process: argparse's errors exit, the commands return."""
    from recipes_workbench.cli.main import main

    try:
        code = main(argv)
    except SystemExit as exit:
        code = exit.code
    printed = capsys.readouterr()
    return code, printed.out + printed.err


def _commands():
    """{command: its subparser} of `recipes-lib`, every one the parser has."""
    import argparse

    from recipes_workbench.cli.main import build_parser

    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _required(subparser, value: str) -> list[str]:
    """`value` for each positional and required option of a command."""
    argv = []
    for action in subparser._actions:
        if not action.option_strings and action.nargs not in ("?", "*"):
            argv.append(value)
        elif action.option_strings and action.required:
            argv += [action.option_strings[0], value]
    return argv


# Argparse's own errors echo what was typed; the commands' messages name their bad value: all redacted.
def test_no_recipes_lib_command_prints_a_url_password_given_in_an_unknown_argument_or_a_bad_value(capsys):
    url = f"postgresql://user:{SECRET}@db.example/study"
    untyped = []
    for command, subparser in _commands().items():
        code, printed = _cli_error([command, *_required(subparser, "x"), f"--db_url={url}"], capsys)
        assert code == 2 and SECRET not in printed, (command, printed)
        if command != "crossval":  # crossval hands unknown options to its folds' recipe
            assert "unrecognized arguments" in printed and credentials.REDACTED in printed, (command, printed)
        typed = [
            a for a in subparser._actions if a.option_strings and (a.type not in (None, str) or a.choices)
        ]
        if typed:  # argparse refuses the value: "invalid int value: '...'", "invalid choice: '...'"
            argv = [command, *_required(subparser, "x"), typed[0].option_strings[0], url]
        elif _required(subparser, url):  # the command's own message names its bad value
            argv = [command, *_required(subparser, url)]
        else:
            untyped.append(command)
            continue
        code, printed = _cli_error(argv, capsys)
        assert code != 0 and SECRET not in printed, (command, printed)
        assert credentials.REDACTED in printed or command == "wandb-dashboard", (command, printed)
    assert untyped == ["families"]  # it takes no value
    code, printed = _cli_error([url], capsys)  # not a command: "invalid choice"
    assert code == 2 and SECRET not in printed and credentials.REDACTED in printed
