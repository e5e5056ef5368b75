"""Arguments: defaults, YAML + command-line precedence, unknown keys and bad values, shipped configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_lib.errors import ConfigError
from tests.helpers.repo import REPO_ROOT, load_recipe


def write_yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def test_no_arguments_means_bert_base_on_sst2_with_the_recipe_defaults():
    arguments = parse_arguments(RecipeSpec("full_ft"), [])
    training = arguments.training
    assert arguments.model.model_name_or_path == "bert-base-uncased"
    assert arguments.data.dataset_name is None and arguments.data.train_file is None  # -> glue/sst2
    assert arguments.data.max_seq_length == 128
    assert training.per_device_train_batch_size == 32
    assert training.learning_rate == 2e-5
    assert training.num_train_epochs == 3
    assert 0 < training.warmup_steps < 1  # a fraction of all steps
    assert training.weight_decay == 0.01
    assert training.eval_strategy == "epoch"
    assert training.train_sampling_strategy == "group_by_length"
    # Automatic: prepare decides them from the machine and the model's family (config/precision.py).
    assert (training.bf16, training.fp16, training.tf32, training.dataloader_pin_memory) == (None,) * 4
    assert training.output_dir == "outputs/full_ft"
    assert arguments.model.trust_remote_code is False


def test_torch_compile_turns_off_the_tensor_tracker_that_would_keep_it_from_compiling():
    assert parse_arguments(RecipeSpec("full_ft"), []).training.track_memory is True
    compiled = parse_arguments(RecipeSpec("full_ft"), ["--torch_compile", "true"]).training
    assert compiled.torch_compile is True and compiled.track_memory is False
    # A compile mode alone turns compiling on (TrainingArguments), and so the tracker off.
    by_mode = parse_arguments(RecipeSpec("full_ft"), ["--torch_compile_mode", "reduce-overhead"]).training
    assert by_mode.torch_compile is True and by_mode.track_memory is False


def test_command_line_overrides_the_file_and_the_file_overrides_recipe_defaults(tmp_path):
    config = write_yaml(tmp_path, "learning_rate: 1.0e-4\nnum_train_epochs: 2\nmax_seq_length: 64\n")
    arguments = parse_arguments(
        RecipeSpec("lora", training_defaults={"learning_rate": 3e-4, "seed": 7}),
        ["--config", config, "--num_train_epochs", "5"],
    )
    assert arguments.training.learning_rate == 1e-4  # file beats recipe default
    assert arguments.training.num_train_epochs == 5  # command line beats file
    assert arguments.training.seed == 7  # recipe default beats dataclass default
    assert arguments.data.max_seq_length == 64
    assert arguments.training.output_dir == "outputs/lora"
    assert arguments.to_dict()["config_file"] == config


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("learning_rat: 1.0e-4\n", "unknown key 'learning_rat'. Did you mean 'learning_rate'?"),
        ("learning_rate: fast\n", "key 'learning_rate' has value 'fast', which is not a valid finite number"),
        ("num_train_epochs: [1, 2]\n", "key 'num_train_epochs' takes a single value"),
        ("max_seq_length: 12.5\n", "key 'max_seq_length' has value 12.5, which is not a valid int"),
        ("learning_rate: [\n", "is not valid YAML at line"),
        ("- a\n- b\n", "must be a mapping"),
    ],
)
def test_bad_config_files_are_errors_that_name_the_key(tmp_path, yaml_text, expected):
    with pytest.raises(ConfigError) as caught:
        parse_arguments(RecipeSpec("full_ft"), ["--config", write_yaml(tmp_path, yaml_text)])
    assert expected in str(caught.value)


def test_missing_config_file_is_an_error_naming_it():
    with pytest.raises(ConfigError, match="Config file 'nope.yaml' does not exist"):
        parse_arguments(RecipeSpec("full_ft"), ["--config", "nope.yaml"])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--learning_rat", "1e-4"],
            "Unknown command-line argument '--learning_rat'. Did you mean 'learning_rate'?",
        ),
        (["--per_device_train_batch_size", "many"], "invalid int value: 'many'"),
        (["--eval_strategy", "sometimes"], "sometimes"),
        (["--max_seq_length", "0"], "max_seq_length is 0"),
        (["--text_column_names", "a,b,c"], "names 3 columns"),
        (["--train_file", "data.xlsx"], "unsupported extension"),
        (["--train_file", "missing.csv"], "train_file 'missing.csv' does not exist"),
        (["--dataset_config_name", "sst2"], "without dataset_name"),
    ],
)
def test_bad_command_line_values_are_errors_that_name_them(argv, expected):
    with pytest.raises(ConfigError) as caught:
        parse_arguments(RecipeSpec("full_ft"), argv)
    assert expected in str(caught.value)


def test_abbreviated_options_are_not_silently_accepted():
    with pytest.raises(ConfigError, match="--learning"):
        parse_arguments(RecipeSpec("full_ft"), ["--learning", "1e-4"])


def test_bare_debug_flag_asks_for_tracebacks_and_is_not_a_training_argument():
    arguments = parse_arguments(RecipeSpec("full_ft"), ["--debug", "--seed", "3"])
    assert arguments.show_traceback and arguments.training.seed == 3


def test_recipe_extra_argument_classes_are_parsed_from_file_and_command_line(tmp_path):
    from dataclasses import dataclass

    @dataclass
    class ToyArguments:
        toy_rank: int = 8

    config = write_yaml(tmp_path, "toy_rank: 4\n")
    toy = RecipeSpec("toy", options=ToyArguments)
    assert parse_arguments(toy, ["--config", config]).options(ToyArguments).toy_rank == 4
    assert parse_arguments(toy, ["--toy_rank", "2"]).options(ToyArguments).toy_rank == 2


SHIPPED_CONFIGS = sorted((REPO_ROOT / "recipes" / "configs").glob("*.yaml"))


@pytest.mark.parametrize("config_path", SHIPPED_CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads_and_shows_how_to_launch_it(config_path, monkeypatch):
    """Each shipped YAML parses against the installed transformers/peft and starts with a launch line."""
    header = config_path.read_text().splitlines()[0]
    assert header.startswith("#"), f"{config_path.name} must start with a comment"
    assert "accelerate launch" in config_path.read_text().split("\n\n")[0] or "make " in header
    # Parse it with the recipe its launch line names, so recipe-specific keys are known.
    launch_line = next(
        line for line in config_path.read_text().splitlines() if "recipes/" in line and ".py" in line
    )
    recipe = load_recipe(launch_line.split("recipes/")[1].split(".py")[0])
    monkeypatch.chdir(REPO_ROOT)  # configs name data paths relative to the repository root
    arguments = parse_arguments(recipe.SPEC, ["--config", str(config_path)])
    assert arguments.training.output_dir
