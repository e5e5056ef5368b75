"""Arguments from a YAML file (`--config`) and the command line, which wins. An unknown key, in either, stops
the run and names the closest valid key (or the recipe whose option it is); a file's values are checked as
the same value typed on the command line would be.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import logging
import math
import os
import sys
import typing
from pathlib import Path
from typing import Any

import yaml
from transformers import HfArgumentParser
from transformers.hf_argparser import string_to_bool

from recipes_lib.config.arguments import SHARED_ARGUMENT_CLASSES, ParsedArguments, RecipeTrainingArguments
from recipes_lib.config.precision import refuse_sharding_without_gpu
from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_lib.config.validation import validate_arguments
from recipes_lib.config.versions import check_supported_versions
from recipes_lib.credentials import hand_over_secrets, is_secret_option, refuse_secret_options
from recipes_lib.errors import ConfigError


class _RecipeArgumentParser(HfArgumentParser):
    """HfArgumentParser that raises ConfigError instead of printing a 200-line usage and exiting."""

    def error(self, message):
        raise ConfigError(
            f"Bad command-line arguments: {message}. Run the recipe with --help to list every option."
        )


def _unknown_key_hint(key: str, valid: list[str], recipe_name: str) -> str:
    """Which other recipe's options dataclass has the key (lora_r given to full_ft), else the closest valid key.
    Every recipe's options load here only: a run loads its own recipe's."""
    from recipes_lib.config.adamw_8bit_options import Adam8bitArguments
    from recipes_lib.config.distill_options import DistillArguments
    from recipes_lib.config.recipe_options import LoraArguments, QloraArguments

    classes = (Adam8bitArguments, LoraArguments, QloraArguments, DistillArguments)
    others = [cls.__name__ for cls in classes if key in {f.name for f in dataclasses.fields(cls)}]
    if others:
        return (
            f" It is an option of {' and '.join(others)}, which {recipe_name}.py does not parse: run a recipe "
            f"whose SPEC names {others[0]} (options={others[0]}), or drop the key."
        )
    matches = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return f" Did you mean '{matches[0]}'?" if matches else ""


def _pop_option(argv: list[str], name: str) -> tuple[str | None, list[str]]:
    remaining, value, i = [], None, 0
    while i < len(argv):
        token = argv[i]
        if token == name:
            if i + 1 >= len(argv):
                raise ConfigError(f"{name} needs a value, e.g. {name} recipes/configs/demo.yaml.")
            value, i = argv[i + 1], i + 2
            continue
        if token.startswith(name + "="):
            value = token.split("=", 1)[1]
        else:
            remaining.append(token)
        i += 1
    return value, remaining


def _pop_bare_debug(argv: list[str]) -> tuple[bool, list[str]]:
    """`--debug` alone means "show tracebacks"; `--debug VALUE` stays TrainingArguments.debug."""
    for i, token in enumerate(argv):
        if token == "--debug" and (i + 1 == len(argv) or argv[i + 1].startswith("--")):
            return True, argv[:i] + argv[i + 1 :]
    return False, argv


def wants_traceback(argv: list[str]) -> bool:
    """A bare `--debug`, or RECIPES_DEBUG=1: errors show their traceback instead of one paragraph."""
    return _pop_bare_debug(argv)[0] or os.environ.get("RECIPES_DEBUG", "") not in ("", "0")


def load_config_file(path: str) -> dict[str, Any]:
    config_path = Path(path)
    if not config_path.is_file():
        raise ConfigError(
            f"Config file '{path}' does not exist (looked in {config_path.resolve().parent}). "
            "Pass a YAML file, e.g. --config recipes/configs/demo.yaml, or leave --config out to use the defaults."
        )
    try:
        values = yaml.safe_load(config_path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"Config file '{path}' is not UTF-8 text (byte {error.start} is {error.object[error.start]:#04x}). "
            "Save it as UTF-8 (most editors: File > Save with Encoding), or check that --config names the YAML file."
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(
            f"Config file '{path}' is not valid YAML{where}: {problem}. Fix that line; every entry is 'key: value'."
        ) from None
    if values is None:
        # Often the wrong file (or one saved before it was written); the defaults need no --config.
        raise ConfigError(
            f"Config file '{path}' is empty (no 'key: value' lines). Add settings to it, or leave --config "
            "out to run with the recipe's defaults."
        )
    if not isinstance(values, dict):
        raise ConfigError(
            f"Config file '{path}' must be a mapping of 'key: value' lines, but it holds a {type(values).__name__}."
        )
    return values


def _convert_file_value(
    action: argparse.Action,
    key: str,
    value: Any,
    path: str,
    accepts_list: bool,
    accepts_mapping: bool = False,
) -> Any:
    if is_secret_option(key) and isinstance(value, dict | list):  # str() would make a token of it
        raise ConfigError(
            f"Config file '{path}': key '{key}' is a {type(value).__name__}; a secret is one string."
        )
    if value is None or isinstance(value, dict) and accepts_mapping:
        return value
    if isinstance(value, dict):
        raise ConfigError(
            f"Config file '{path}': key '{key}' takes a single value, but the file gives a mapping "
            f"({', '.join(map(str, value)) or 'empty'}). Write one value there, e.g. the default: {action.default!r}."
        )
    if isinstance(value, list):
        if not accepts_list:
            raise ConfigError(
                f"Config file '{path}': key '{key}' takes a single value, but the file gives a list {value}."
            )
        element = argparse.Action([], key, type=action.type, choices=action.choices)
        return [_convert_file_value(element, key, item, path, accepts_list=False) for item in value]
    text = str(value).lower() if isinstance(value, bool) else str(value)
    converted = text
    if action.type is not None:
        try:
            converted = action.type(text)
        except (TypeError, ValueError, argparse.ArgumentTypeError):
            type_name = getattr(action.type, "__name__", str(action.type))
            raise ConfigError(
                f"Config file '{path}': key '{key}' has value {value!r}, which is not a valid {type_name}. "
                f"Write a {type_name} there, e.g. the default: {action.default!r}."
            ) from None
    if action.choices is not None and converted not in action.choices:
        choices = ", ".join(str(getattr(c, "value", c)) for c in action.choices)
        raise ConfigError(f"Config file '{path}': key '{key}' is {value!r}; choose one of: {choices}.")
    return converted


# An interval that only counts under one strategy: `--save_steps 20` does nothing under the
# default `save_strategy: epoch`.
STRATEGY_OF_INTERVAL = {
    "save_steps": "save_strategy",
    "eval_steps": "eval_strategy",
    "logging_steps": "logging_strategy",
}


def _command_line_values(argv: list[str]) -> dict[str, str | None]:
    values = {}
    for i, token in enumerate(argv):
        if token.startswith("--"):
            key, _, value = token[2:].partition("=")
            following = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
            values[key] = value or following
    return values


def _implied_strategies(given: dict[str, Any]) -> dict[str, str]:
    """`--save_steps N` alone switches save_strategy to steps; with a contradicting strategy, an error."""
    implied = {}
    for interval, strategy in STRATEGY_OF_INTERVAL.items():
        if interval not in given:
            continue
        if strategy not in given:
            implied[strategy] = "steps"
        elif str(given[strategy]) != "steps":
            raise ConfigError(
                f"{interval} {given[interval]} was given with {strategy} '{given[strategy]}', under which "
                f"{interval} is ignored. Drop {strategy} (giving {interval} alone switches it to 'steps'), "
                f"set {strategy} steps, or drop {interval}."
            )
    if implied:
        logging.getLogger("recipes_lib").warning(
            "%s set to 'steps': its interval was given (%s).",
            " and ".join(implied),
            ", ".join(f"{k} {given[k]}" for k, v in STRATEGY_OF_INTERVAL.items() if v in implied),
        )
    return implied


def finite_float(text: str) -> float:
    """A float option's value: `inf`, `nan` and `1e400` (which float() reads as inf) are refused where they
    are read, from the command line or the YAML file; they would train to NaN or for ever."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    return value


finite_float.__name__ = "finite number"  # as argparse and the config file's message name the type


def recipe_parser(spec: RecipeSpec) -> HfArgumentParser:
    """The recipe's command line (`--config` and a bare `--debug` are taken out of argv before it parses)."""
    option_classes = (spec.options,) if spec.options is not None else ()
    argument_classes = (*SHARED_ARGUMENT_CLASSES, *option_classes, RecipeTrainingArguments)
    parser = _RecipeArgumentParser(argument_classes, allow_abbrev=False)
    parser.prog = f"{spec.name}.py"
    for action in parser._actions:
        # HfArgumentParser gives `bool | None` options (--bf16, --fp16: None means automatic) no
        # value-less form, so `--fp16` alone would be an error. Alone, it means true, as for plain bools.
        if action.type is string_to_bool and action.nargs is None and not action.required:
            action.nargs, action.const = "?", True
        if action.type is float:
            action.type = finite_float
    return parser


def parse_arguments(spec: RecipeSpec, argv: list[str] | None = None) -> ParsedArguments:
    """Typed, validated arguments. Precedence, lowest first: dataclass defaults, the recipe's
    `training_defaults` (e.g. a higher learning rate for LoRA), the YAML file, the command line."""
    check_supported_versions()
    argv = list(sys.argv[1:] if argv is None else argv)
    refuse_secret_options(argv)  # before anything reads them: the YAML or the environment instead
    show_traceback = wants_traceback(argv)
    argv = _pop_bare_debug(argv)[1]
    config_file, argv = _pop_option(argv, "--config")

    recipe_name = spec.name
    parser = recipe_parser(spec)
    actions = {action.dest: action for action in parser._actions if action.dest != "help"}
    valid_keys = sorted(actions)
    # The options whose field takes a mapping (lr_scheduler_kwargs, fsdp_config, ...): a YAML mapping goes as is.
    # (From the annotations: HfArgumentParser rewrites such a field's type to str.)
    mapping_keys = {
        name
        for argument_class in parser.dataclass_types
        for name, annotation in typing.get_type_hints(argument_class).items()
        if "dict" in str(annotation)
    }

    defaults: dict[str, Any] = {"output_dir": f"outputs/{recipe_name}", **spec.training_defaults}
    file_values = load_config_file(config_file) if config_file is not None else {}
    for key, value in file_values.items():
        if key not in actions:
            raise ConfigError(
                f"Config file '{config_file}' has an unknown key '{key}'.{_unknown_key_hint(key, valid_keys, recipe_name)} "
                "Every key must be an argument of the recipe; run it with --help to list them."
            )
        # A list where the command line takes several values (HfArgumentParser's nargs "+" for list fields).
        defaults[key] = _convert_file_value(
            actions[key], key, value, config_file, actions[key].nargs == "+", key in mapping_keys
        )
    given = {**file_values, **_command_line_values(argv)}
    defaults.update(_implied_strategies(given))
    parser.set_defaults(**defaults)

    # TrainingArguments reads the launch's variables as it is built: a launch this machine cannot run
    # (FSDP or DeepSpeed without a GPU) is refused first, in words.
    refuse_sharding_without_gpu()
    try:
        *parsed, remaining = parser.parse_args_into_dataclasses(
            args=argv, return_remaining_strings=True, look_for_args_file=False
        )
    except (ValueError, TypeError) as error:
        # TrainingArguments.__post_init__ rejects inconsistent settings with a ValueError.
        raise ConfigError(f"Invalid training arguments: {error}") from None
    if remaining:
        unknown = next((token for token in remaining if token.startswith("-")), remaining[0])
        key = unknown.lstrip("-").split("=", 1)[0]
        raise ConfigError(
            f"Unknown command-line argument '{unknown}'.{_unknown_key_hint(key, valid_keys, recipe_name)} "
            "Run the recipe with --help to list every option."
        )

    model_args, data_args, *recipe_options, training_args = parsed
    hand_over_secrets(*parsed)  # the YAML's hub_token: into HF_TOKEN, out of the arguments
    # One config for every recipe: `output_dir: outputs/demo/{recipe}` gives each its own directory.
    training_args.output_dir = training_args.output_dir.replace("{recipe}", recipe_name)
    arguments = ParsedArguments(
        model=model_args,
        data=data_args,
        training=training_args,
        recipe_options={type(options): options for options in recipe_options},
        config_file=config_file,
        show_traceback=show_traceback,
    )
    validate_arguments(arguments)
    return arguments
