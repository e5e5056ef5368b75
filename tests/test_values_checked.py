"""Values are checked by type and range where they are read (issue 54): every number of a recipe, from the
YAML file or the command line, is finite (`inf`, `nan`, `.inf`, `1e400` refused in one paragraph naming the
key); a mapping where a single value goes is refused, for every option that takes a single value; a
config file that is not UTF-8 is named."""

from __future__ import annotations

import typing

import pytest
from transformers.hf_argparser import string_to_bool

from recipes_lib.config.parsing import finite_float, parse_arguments, recipe_parser
from recipes_lib.credentials import is_secret_option
from recipes_lib.errors import ConfigError
from tests.helpers.repo import RECIPES, load_recipe

SPECS = {name: load_recipe(name).SPEC for name in RECIPES}
BASE = ["--model_name_or_path", "m", "--train_file", "t.csv", "--validation_file", "v.csv"]


def _options(recipe: str, kind) -> list[str]:
    """The options of one value of this type (not those whose field takes a mapping, typed str by the parser)."""
    parser = recipe_parser(SPECS[recipe])
    hints = {
        name: str(hint) for cls in parser.dataclass_types for name, hint in typing.get_type_hints(cls).items()
    }
    return sorted(
        action.dest
        for action in parser._actions
        if action.type is kind
        and action.nargs is None
        and action.dest != "help"
        and "dict" not in hints[action.dest]
    )


FLOAT_OPTIONS = [(recipe, key) for recipe in RECIPES for key in _options(recipe, finite_float)]
SCALAR_OPTIONS = [
    (recipe, key)
    for recipe in ("full_ft", "lora")
    for kind in (int, finite_float, str, string_to_bool)
    for key in _options(recipe, kind)
]


@pytest.mark.parametrize("recipe, key", FLOAT_OPTIONS, ids=[f"{r}-{k}" for r, k in FLOAT_OPTIONS])
def test_every_float_option_refuses_a_number_that_is_not_finite(recipe, key, tmp_path):
    for text in ("inf", "-inf", "nan", "1e400"):
        with pytest.raises(ConfigError, match=rf"argument --{key}\S*: {text} is not a finite number"):
            parse_arguments(SPECS[recipe], [*BASE, f"--{key}={text}"])
    for yaml_text in (".inf", "-.inf", ".nan", "1e400"):
        config = tmp_path / "config.yaml"
        config.write_text(f"{key}: {yaml_text}\n")
        with pytest.raises(
            ConfigError, match=rf"key '{key}' has value .*, which is not a valid finite number"
        ):
            parse_arguments(SPECS[recipe], [*BASE, "--config", str(config)])


@pytest.mark.parametrize("recipe, key", SCALAR_OPTIONS, ids=[f"{r}-{k}" for r, k in SCALAR_OPTIONS])
def test_every_single_value_option_refuses_a_mapping_in_the_config_file(recipe, key, tmp_path):
    config = tmp_path / "config.yaml"
    # A secret's own check comes first (test_secrets): its message names no value either.
    expected = (
        "a secret is one string"
        if is_secret_option(key)
        else "takes a single value, but the file gives a mapping"
    )
    for mapping in ("{a: 1}", "{}"):
        config.write_text(f"{key}: {mapping}\n")
        with pytest.raises(ConfigError, match=rf"key '{key}' (is a dict; )?{expected}"):
            parse_arguments(SPECS[recipe], [*BASE, "--config", str(config)])


def test_the_float_options_are_found():
    assert {"learning_rate", "num_train_epochs", "weight_decay", "max_grad_norm"} <= {
        k for _, k in FLOAT_OPTIONS
    }


def test_an_option_that_takes_a_mapping_still_takes_one(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("lr_scheduler_kwargs: {power: 2.0}\n")
    for name in ("t.csv", "v.csv"):
        (tmp_path / name).write_text("text,label\na,0\nb,1\n")
    files = ["--train_file", str(tmp_path / "t.csv"), "--validation_file", str(tmp_path / "v.csv")]
    arguments = parse_arguments(SPECS["full_ft"], [*BASE, *files, "--config", str(config)])
    assert arguments.training.lr_scheduler_kwargs == {"power": 2.0}


@pytest.mark.parametrize("content", [b"learning_rate: 1e-5\nx: \xff\n", "seed: 1\n".encode("utf-16")])
def test_a_config_file_that_is_not_utf8_is_named(tmp_path, content):
    config = tmp_path / "config.yaml"
    config.write_bytes(content)
    with pytest.raises(ConfigError, match=rf"Config file '{config}' is not UTF-8 text \(byte \d+"):
        parse_arguments(SPECS["full_ft"], [*BASE, "--config", str(config)])


# --- saved thresholds: real numbers between 0 and 1, one check for both files -------------------------

BAD_THRESHOLDS = {"seven": 7, "negative": -3, "nan": float("nan"), "string": "0.2", "true": True, "null": None,
                  "list": [0.5], "infinite": float("inf")}  # fmt: skip


@pytest.mark.parametrize("bad", BAD_THRESHOLDS, ids=list(BAD_THRESHOLDS))
def test_a_saved_threshold_that_is_not_a_probability_is_refused_naming_the_file(tmp_path, bad):
    import json

    from recipes_workbench.export.bundle import read_decision_threshold, read_thresholds

    value = BAD_THRESHOLDS[bad]
    (tmp_path / "label_thresholds.json").write_text(json.dumps({"thresholds": {"a": 0.3, "b": value}}))
    with pytest.raises(
        ConfigError, match=r"label_thresholds.json does not hold a threshold between 0 and 1 .*'b'"
    ):
        read_thresholds(tmp_path, ["a", "b"])
    (tmp_path / "decision_threshold.json").write_text(json.dumps({"threshold": value}))
    with pytest.raises(
        ConfigError, match=r"decision_threshold.json does not hold a threshold between 0 and 1"
    ):
        read_decision_threshold(tmp_path)


def test_saved_thresholds_in_range_are_read(tmp_path):
    import json

    from recipes_workbench.export.bundle import read_decision_threshold, read_thresholds

    (tmp_path / "label_thresholds.json").write_text(json.dumps({"thresholds": {"a": 0, "b": 0.25, "c": 1.0}}))
    assert read_thresholds(tmp_path, ["a", "b", "c"]) == [0.0, 0.25, 1.0]
    (tmp_path / "decision_threshold.json").write_text(json.dumps({"threshold": 0.3}))
    assert read_decision_threshold(tmp_path) == 0.3
    (tmp_path / "label_thresholds.json").write_text(json.dumps({"thresholds": {"a": 0.5}}))
    with pytest.raises(ConfigError, match="'b' missing"):
        read_thresholds(tmp_path, ["a", "b"])
