"""Typed arguments for every recipe: YAML first, command line second, unknown keys are errors.

Three dataclasses are shared by all recipes (model, data, training); a recipe may add its own
(LoRA settings, say). The `help` metadata of each field is the documentation: `--help` prints it.

    recipes/full_ft.py --config recipes/configs/demo.yaml --learning_rate 3e-5

reads the YAML file, then lets the command line override any key. A key that no dataclass knows,
in the file or on the command line, stops the run before anything expensive happens and names the
closest valid key.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from transformers import HfArgumentParser, TrainingArguments
from transformers.hf_argparser import string_to_bool

from recipes_lib.errors import ConfigError
from recipes_lib.precision import (
    FP16_UNSAFE_MODEL_TYPES,
    PrecisionChoice,
    choose_precision,
    detect_capability,
    emulation_warning,
    launcher_mixed_precision,
)

SUPPORTED_DATA_EXTENSIONS = (".csv", ".tsv", ".json", ".jsonl")

# With no dataset and no files, a recipe trains on GLUE SST-2 (binary sentiment, 67k sentences).
DEFAULT_DATASET = ("glue", "sst2")


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default="bert-base-uncased",
        metadata={"help": "Hub model id or local directory of a BERT-sized encoder (config.json + weights)."},
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "Tokenizer id or path, if different from model_name_or_path."}
    )
    model_revision: str = field(default="main", metadata={"help": "Hub branch, tag or commit of the model."})
    cache_dir: str | None = field(
        default=None, metadata={"help": "Where downloaded models and data are kept."}
    )
    trust_remote_code: bool = field(
        default=False,
        metadata={
            "help": "Run Python code shipped with a Hub model. Off by default: only enable it for repos you trust."
        },
    )
    attn_implementation: str = field(
        default="sdpa",
        metadata={"help": "Attention kernel: 'sdpa' (PyTorch scaled_dot_product_attention) or 'eager'."},
    )


@dataclass
class DataArguments:
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Hub dataset name, e.g. 'glue'. When neither this nor train_file is given: glue/sst2."
        },
    )
    dataset_config_name: str | None = field(
        default=None, metadata={"help": "Hub dataset configuration, e.g. 'sst2' or 'mnli'."}
    )
    train_file: str | None = field(
        default=None,
        metadata={"help": "Local training data: .csv, .tsv, .json or .jsonl (format from the extension)."},
    )
    validation_file: str | None = field(
        default=None,
        metadata={
            "help": "Local validation data, same format as train_file. Without it, a split is held out."
        },
    )
    validation_split_name: str = field(
        default="validation", metadata={"help": "Name of the Hub dataset's split used for evaluation."}
    )
    validation_split_percentage: int = field(
        default=10,
        metadata={
            "help": "Percent of train held out for evaluation when there is no validation split or file."
        },
    )
    text_column_names: str | None = field(
        default=None,
        metadata={
            "help": "Text column, or two comma-separated columns for sentence pairs. "
            "Default: the dataset's string columns other than the label (one or two)."
        },
    )
    label_column_name: str = field(default="label", metadata={"help": "Column holding the class label."})
    max_seq_length: int = field(
        default=128,
        metadata={
            "help": "Truncate inputs to this many tokens. Batches are padded only to their longest input."
        },
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N training examples (quick runs, debugging)."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N validation examples."}
    )
    pad_to_max_length: bool = field(
        default=False,
        metadata={
            "help": "Pad every example to max_seq_length (the run_glue.py way). Off: pad each batch to its "
            "longest example, which on SST-2 (13 tokens on average) skips most of the work."
        },
    )
    pad_to_multiple_of: int | None = field(
        default=None,
        metadata={
            "help": "Pad batch length to a multiple of this. Default: 8 on GPU (tensor cores), none on CPU."
        },
    )
    preprocessing_num_workers: int | None = field(
        default=None, metadata={"help": "Processes used to tokenize the dataset."}
    )
    overwrite_cache: bool = field(
        default=False, metadata={"help": "Re-tokenize even if a cached result exists."}
    )


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _mps_available() -> bool:
    import torch

    return torch.backends.mps.is_available()


def _cuda_supports_tf32() -> bool | None:
    import torch

    if not torch.cuda.is_available():
        return None  # leave torch's setting alone
    return torch.cuda.get_device_capability()[0] >= 8


def _refuse_sharding_without_gpu() -> None:
    """FSDP and DeepSpeed need CUDA GPUs: on a CPU accelerate would quietly run plain DDP instead.

    accelerate 1.15 picks FSDP or DeepSpeed only for GPU-type processes; CPU processes stay
    MULTI_CPU (DDP over gloo) and the sharding settings of the config are ignored.
    """
    launched_with = [
        name
        for name, variable in (("FSDP", "ACCELERATE_USE_FSDP"), ("DeepSpeed", "ACCELERATE_USE_DEEPSPEED"))
        if os.environ.get(variable, "false").lower() == "true"
    ]
    if launched_with and not _cuda_available():
        raise ConfigError(
            f"This run was launched with {launched_with[0]} (the accelerate --config_file asks for it), but "
            "this machine has no CUDA GPU. On CPU processes accelerate ignores the sharding and runs plain "
            "DDP, so the run would not be what the config says. On a CPU, launch with --config_file "
            "accelerate_configs/multi_cpu.yaml (or cpu.yaml); use the FSDP and DeepSpeed configs on GPUs."
        )


@dataclass
class RecipeTrainingArguments(TrainingArguments):
    """`TrainingArguments` with the recipe defaults (BERT fine-tuning on GLUE, after Devlin et al.)."""

    output_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where checkpoints, the final model and results.json go. Default: outputs/<recipe>; "
            "'{recipe}' in the path becomes the recipe's name (e.g. outputs/demo/{recipe})."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Allow writing into an output_dir that holds another run's results (they are replaced)."
        },
    )
    per_device_train_batch_size: int = field(default=32, metadata={"help": "Training batch size per device."})
    # Evaluation keeps no activations for backward, so a larger batch fits in the same memory.
    per_device_eval_batch_size: int = field(
        default=64, metadata={"help": "Evaluation batch size per device."}
    )
    learning_rate: float = field(default=2e-5, metadata={"help": "Peak learning rate of AdamW."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Passes over the training data."})
    # A float below 1 is a fraction of the total steps (transformers 5 dropped `warmup_ratio`).
    warmup_steps: float = field(
        default=0.1, metadata={"help": "Linear warmup: steps, or a fraction of all steps if below 1."}
    )
    weight_decay: float = field(
        default=0.01, metadata={"help": "AdamW weight decay (not applied to biases/LayerNorm)."}
    )
    eval_strategy: str = field(
        default="epoch", metadata={"help": "When to evaluate: 'no', 'steps' or 'epoch'."}
    )
    save_strategy: str = field(
        default="epoch", metadata={"help": "When to checkpoint: 'no', 'steps' or 'epoch'."}
    )
    save_total_limit: int | None = field(default=2, metadata={"help": "Keep at most this many checkpoints."})
    # A fraction of the total steps: about 50 points on every loss curve whatever the run length.
    logging_steps: float = field(
        default=0.02, metadata={"help": "Log every N steps, or a fraction of all steps if below 1."}
    )
    # Batches of similar length waste little compute on padding (transformers 5 name for group_by_length).
    # The batches then come in a seeded random order, longest first (trainer.ShuffledLengthGroupedSampler).
    train_sampling_strategy: str = field(
        default="group_by_length",
        metadata={
            "help": "'group_by_length' (batches of similar length, little padding, in random order), "
            "'random' or 'sequential'."
        },
    )
    # None = automatic (precision.py): bf16 where the GPU has it natively, else fp16 (fp32 for
    # DeBERTa); fp32 on CPU. An explicit true/false wins, and must agree with the accelerate config.
    bf16: bool | None = field(
        default=None,
        metadata={
            "help": "bfloat16 mixed precision. Default: on where the GPU has native bf16 (Ampere or newer), "
            "else fp16 on GPUs and fp32 on CPUs. false: train in fp32."
        },
    )
    fp16: bool | None = field(
        default=None,
        metadata={
            "help": "float16 mixed precision with loss scaling. Default: on for GPUs without native bf16 "
            "(T4, V100, RTX 20xx), except DeBERTa (overflows in fp16). false: train in fp32."
        },
    )

    # Pinned host memory speeds up copies to a GPU and does nothing (but warn) without one.
    dataloader_pin_memory: bool | None = field(
        default=None, metadata={"help": "Pin host memory for faster GPU transfers. Default: on with a GPU."}
    )

    tf32: bool | None = field(
        default=None,
        metadata={
            "help": "TF32 matmuls for the fp32 parts (Ampere or newer GPUs: ~8x the fp32 rate, 10-bit mantissa). "
            "Default: on where supported."
        },
    )

    # W&B (tracking.py). transformers 5 reports to nothing by default; every recipe logs a run.
    report_to: None | str | list[str] = field(
        default="wandb",
        metadata={
            "help": "Where to log: 'wandb' (offline when there is no API key), 'none', or another "
            "Trainer integration ('tensorboard', 'all'). WANDB_MODE=disabled also turns W&B off."
        },
    )
    wandb_project: str | None = field(
        default=None, metadata={"help": "W&B project. Default: $WANDB_PROJECT, else 'bert-recipes'."}
    )
    experiment: str | None = field(
        default=None,
        metadata={
            "help": "W&B group: runs in one group are compared side by side. Default: '<model>_<dataset>', "
            "so every recipe run on the same model and data lands in the same group."
        },
    )
    wandb_tags: str | None = field(
        default=None,
        metadata={
            "help": "Extra W&B tags, comma-separated; recipe, model, precision and device kind are always tags."
        },
    )

    # Memory (memory.py, planner.py).
    track_memory: bool = field(
        default=True,
        metadata={
            "help": "Count every tensor of the training steps that can set a memory peak (the first two, then "
            "each larger batch) for memory_breakdown_gib and the CPU peaks. false: CUDA figures and RSS only. "
            "Off under --torch_compile, which it would keep from compiling."
        },
    )
    auto_batch_size: bool = field(
        default=False,
        metadata={
            "help": "Train with the largest per-device batch that fits (planner first, out-of-memory back-off "
            "as the safety net), raising gradient_accumulation_steps so the effective batch stays the same."
        },
    )

    def __post_init__(self):
        _refuse_sharding_without_gpu()
        if not _cuda_available() and not _mps_available():
            # No accelerator: train on the CPU, and say so to the Trainer, whose bf16 check would
            # otherwise look for a GPU (and, under several processes, run DDP over gloo).
            self.use_cpu = True
        if self.tf32 is None:
            self.tf32 = _cuda_supports_tf32() if not self.use_cpu else None
        if self.dataloader_pin_memory is None:
            import torch

            self.dataloader_pin_memory = torch.cuda.is_available() and not self.use_cpu
        on_cpu = self.use_cpu or os.environ.get("ACCELERATE_USE_CPU", "false").lower() == "true"
        self.capability = detect_capability(use_cpu=on_cpu)
        self._apply_precision(
            choose_precision(
                self.capability, bf16=self.bf16, fp16=self.fp16, launcher=launcher_mixed_precision()
            )
        )
        super().__post_init__()
        # TrainingArguments takes the launcher's mixed_precision whenever bf16 and fp16 are both
        # false, so `--bf16 false` under a bf16 accelerate config would still train in bf16.
        self.mixed_precision = self.precision_choice.mixed_precision
        # After the Trainer's own checks: --torch_compile_mode or _backend alone also turn compiling on.
        if self.torch_compile and self.track_memory:
            # The tensor tracker's dispatch mode keeps dynamo from compiling the model at all
            # (measured: such a run trained eagerly, loss equal to the bit). Measure memory with
            # CUDA's figures and the RSS only.
            logging.getLogger("recipes_lib").warning(
                "--torch_compile true turns off --track_memory (per-tensor memory tracking stops "
                "the model from being compiled); CUDA memory figures and the process RSS remain."
            )
            self.track_memory = False

    def _apply_precision(self, choice: PrecisionChoice) -> None:
        self.precision_choice = choice
        self.bf16 = choice.precision == "bf16"
        self.fp16 = choice.precision == "fp16"
        warning = emulation_warning(choice, self.capability) if choice.explicit else None
        if warning:
            logging.getLogger("recipes_lib").warning(warning)

    @property
    def precision(self) -> str:
        """'bf16', 'fp16' or 'fp32': what the run computes in (precision.py decides)."""
        return self.precision_choice.precision

    def settle_precision(self, model_type: str) -> None:
        """The automatic choice, revisited once the model family is known (before the Trainer exists).

        Only one case changes: automatic fp16 (a GPU without native bf16) for a family that
        overflows in fp16 becomes fp32. Explicit choices are never changed.
        """
        if self.precision_choice.explicit or model_type not in FP16_UNSAFE_MODEL_TYPES:
            return
        choice = choose_precision(self.capability, bf16=None, fp16=None, launcher=None, model_type=model_type)
        if choice.precision != self.precision:
            self._apply_precision(choice)
            self.mixed_precision = choice.mixed_precision


SHARED_ARGUMENT_CLASSES = (ModelArguments, DataArguments)


@dataclass
class ParsedArguments:
    model: ModelArguments
    data: DataArguments
    training: RecipeTrainingArguments
    # Recipe-specific argument objects, keyed by dataclass name (e.g. "LoraArguments").
    extra: dict[str, Any]
    config_file: str | None
    show_traceback: bool

    def to_dict(self) -> dict[str, Any]:
        """The full resolved configuration, as saved in results.json and the W&B run config."""
        resolved = {**dataclasses.asdict(self.model), **dataclasses.asdict(self.data)}
        for extra in self.extra.values():
            resolved.update(dataclasses.asdict(extra))
        # TrainingArguments.to_dict redacts tokens and turns enums into strings.
        resolved.update(self.training.to_dict())
        resolved["config_file"] = self.config_file
        return resolved


class _RecipeArgumentParser(HfArgumentParser):
    """HfArgumentParser that raises ConfigError instead of printing a 200-line usage and exiting."""

    def error(self, message):
        raise ConfigError(
            f"Bad command-line arguments: {message}. Run the recipe with --help to list every option."
        )


def _closest(key: str, valid: list[str]) -> str:
    matches = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return f" Did you mean '{matches[0]}'?" if matches else ""


def _recipes_accepting(key: str) -> list[str]:
    """The recipe scripts (next to the one running, or in this checkout's recipes/) that know `key`.

    Runs only on the error path: it imports the other recipe scripts to read their argument classes.
    """
    from recipes_lib.runner import load_recipe_script  # runner imports this module

    folders = {Path(sys.argv[0]).resolve().parent, Path(__file__).resolve().parents[2] / "recipes"}
    scripts = sorted({path for folder in folders if folder.is_dir() for path in folder.glob("*.py")})
    accepting = []
    for script in scripts:
        if "RECIPE = Recipe(" not in script.read_text():
            continue
        try:
            classes = load_recipe_script(script).argument_classes
        except Exception:  # a hint is not worth a second error
            continue
        if any(key == f.name for cls in classes for f in dataclasses.fields(cls)):
            accepting.append(script.name)
    return accepting


def _unknown_key_hint(key: str, valid: list[str], recipe_name: str) -> str:
    """Which other recipe takes the key (lora_r given to full_ft), else the closest valid key, if any."""
    others = _recipes_accepting(key)
    if others:
        return f" It is an option of {', '.join(others)}, not of {recipe_name}.py: run that recipe, or drop the key."
    return _closest(key, valid)


def _pop_option(argv: list[str], name: str) -> tuple[str | None, list[str]]:
    """Remove `--name VALUE` or `--name=VALUE` from argv; return VALUE."""
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


def load_config_file(path: str) -> dict[str, Any]:
    config_path = Path(path)
    if not config_path.is_file():
        raise ConfigError(
            f"Config file '{path}' does not exist (looked in {config_path.resolve().parent}). "
            "Pass a YAML file, e.g. --config recipes/configs/demo.yaml, or leave --config out to use the defaults."
        )
    try:
        values = yaml.safe_load(config_path.read_text())
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


def _convert_file_value(action: argparse.Action, key: str, value: Any, path: str, accepts_list: bool) -> Any:
    """Check a YAML value as argparse would check the same value typed on the command line."""
    if value is None or isinstance(value, dict):
        return value
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
    """{key: the text after it} for every `--key VALUE`, `--key=VALUE` or bare `--key` in argv."""
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


def parse_recipe_arguments(
    recipe_name: str,
    argv: list[str] | None = None,
    extra_argument_classes: tuple[type, ...] = (),
    recipe_defaults: dict[str, Any] | None = None,
) -> ParsedArguments:
    """Parse `--config FILE.yaml` plus command-line overrides into typed, validated arguments.

    Precedence, lowest first: dataclass defaults, `recipe_defaults` (what the recipe script sets,
    e.g. a higher learning rate for LoRA), the YAML file, the command line.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    show_traceback, argv = _pop_bare_debug(argv)
    show_traceback = show_traceback or os.environ.get("RECIPES_DEBUG", "") not in ("", "0")
    config_file, argv = _pop_option(argv, "--config")

    argument_classes = (*SHARED_ARGUMENT_CLASSES, *extra_argument_classes, RecipeTrainingArguments)
    parser = _RecipeArgumentParser(argument_classes, allow_abbrev=False)
    parser.prog = f"{recipe_name}.py"
    actions = {action.dest: action for action in parser._actions if action.dest != "help"}
    for action in actions.values():
        # HfArgumentParser gives `bool | None` options (--bf16, --fp16: None means automatic) no
        # value-less form; `--fp16` alone then failed. Alone, it means true, as for plain bools.
        if action.type is string_to_bool and action.nargs is None and not action.required:
            action.nargs, action.const = "?", True
    list_keys = {
        f.name for cls in argument_classes for f in dataclasses.fields(cls) if "list" in str(f.type).lower()
    }
    valid_keys = sorted(actions)

    defaults: dict[str, Any] = {"output_dir": f"outputs/{recipe_name}"}
    defaults.update(recipe_defaults or {})
    if config_file is not None:
        file_values = load_config_file(config_file)
        for key, value in file_values.items():
            if key not in actions:
                raise ConfigError(
                    f"Config file '{config_file}' has an unknown key '{key}'.{_unknown_key_hint(key, valid_keys, recipe_name)} "
                    "Every key must be an argument of the recipe; run it with --help to list them."
                )
            defaults[key] = _convert_file_value(actions[key], key, value, config_file, key in list_keys)
    given = {**(file_values if config_file is not None else {}), **_command_line_values(argv)}
    defaults.update(_implied_strategies(given))
    parser.set_defaults(**defaults)

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

    model_args, data_args, *extra_args, training_args = parsed
    # One config for every recipe: `output_dir: outputs/demo/{recipe}` gives each its own directory.
    training_args.output_dir = training_args.output_dir.replace("{recipe}", recipe_name)
    arguments = ParsedArguments(
        model=model_args,
        data=data_args,
        training=training_args,
        extra={type(extra).__name__: extra for extra in extra_args},
        config_file=config_file,
        show_traceback=show_traceback,
    )
    validate_arguments(arguments)
    return arguments


def validate_arguments(arguments: ParsedArguments) -> None:
    """Checks that need no download: fail here, not after an hour of tokenization."""
    data = arguments.data
    if data.train_file is None and data.validation_file is not None:
        raise ConfigError(
            f"validation_file '{data.validation_file}' was given without train_file. Pass --train_file too."
        )
    if data.train_file is not None and data.dataset_name is not None:
        raise ConfigError(
            f"Both dataset_name '{data.dataset_name}' and train_file '{data.train_file}' were given. "
            "Use one source: a Hub dataset or local files."
        )
    if data.dataset_config_name is not None and data.dataset_name is None and data.train_file is None:
        raise ConfigError(
            f"dataset_config_name '{data.dataset_config_name}' was given without dataset_name. "
            "Pass --dataset_name too (e.g. --dataset_name glue)."
        )
    for name in ("train_file", "validation_file"):
        path = getattr(data, name)
        if path is None:
            continue
        if Path(path).is_dir():
            inside = sorted(
                p.name for p in Path(path).iterdir() if p.suffix.lower() in SUPPORTED_DATA_EXTENSIONS
            )
            raise ConfigError(
                f"{name} '{path}' is a directory; pass one file in it"
                + (f" (it holds: {', '.join(inside[:5])})." if inside else ".")
            )
        if Path(path).suffix.lower() not in SUPPORTED_DATA_EXTENSIONS:
            raise ConfigError(
                f"{name} '{path}' has an unsupported extension. Use one of {', '.join(SUPPORTED_DATA_EXTENSIONS)}; "
                "the extension decides how the file is read."
            )
        if not Path(path).is_file():
            raise ConfigError(
                f"{name} '{path}' does not exist (looked in {Path(path).resolve().parent}). Check the path."
            )
    if data.text_column_names is not None:
        columns = [c.strip() for c in data.text_column_names.split(",") if c.strip()]
        if not 1 <= len(columns) <= 2:
            raise ConfigError(
                f"text_column_names '{data.text_column_names}' names {len(columns)} columns; give one column, "
                "or two separated by a comma for sentence pairs (e.g. 'sentence1,sentence2')."
            )
    training = arguments.training
    positive = {
        "max_seq_length": data.max_seq_length,
        "max_train_samples": data.max_train_samples,
        "max_eval_samples": data.max_eval_samples,
        "per_device_train_batch_size": training.per_device_train_batch_size,
        "per_device_eval_batch_size": training.per_device_eval_batch_size,
        "gradient_accumulation_steps": training.gradient_accumulation_steps,
    }
    for name, value in positive.items():
        if value is not None and value <= 0:
            raise ConfigError(f"{name} is {value}; it must be a positive integer.")
    # The Trainer accepts these and fails later (AdamW on a negative rate) or trains for zero steps.
    if not training.learning_rate > 0:
        raise ConfigError(
            f"learning_rate is {training.learning_rate:g}; it must be positive (BERT fine-tuning: 2e-5 to 5e-5)."
        )
    if training.max_steps <= 0 and not training.num_train_epochs > 0:
        raise ConfigError(
            f"num_train_epochs is {training.num_train_epochs:g}, so the run would train for no step. "
            "Give a positive number of epochs, or --max_steps N."
        )
    if training.max_grad_norm is not None and training.max_grad_norm < 0:
        raise ConfigError(
            f"max_grad_norm is {training.max_grad_norm:g}; give a positive norm to clip gradients to "
            "(default 1.0), or 0 to turn clipping off."
        )
    if not 0 < data.validation_split_percentage < 100:
        raise ConfigError(
            f"validation_split_percentage is {data.validation_split_percentage}; it must be between 1 and 99."
        )
    if arguments.model.trust_remote_code:
        import logging

        logging.getLogger(__name__).warning(
            "trust_remote_code is on: Python code from '%s' will run on this machine.",
            arguments.model.model_name_or_path,
        )


def dataset_source(data: DataArguments) -> tuple[str | None, str | None]:
    """The Hub dataset (name, config) a run reads, or (None, None) for local files."""
    if data.train_file is not None:
        return None, None
    if data.dataset_name is None:
        return DEFAULT_DATASET
    return data.dataset_name, data.dataset_config_name
