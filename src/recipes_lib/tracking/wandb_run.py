"""W&B tracking: every recipe logs one comparable run, and no run dies for want of an API key.
docs/wandb.md says what a run is called, what it logs and how it falls back to offline; every name
logged comes from names.py, which the dashboard (recipes_workbench/dashboard.py) reads too.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from recipes_lib.config.arguments import (
    DataArguments,
    ModelArguments,
    ParsedArguments,
    RecipeTrainingArguments,
    dataset_source,
)
from recipes_lib.config.bitsandbytes_import import kernels_line_dropped
from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_lib.errors import ConfigError
from recipes_lib.memory.peaks import peak_rss_gib
from recipes_lib.results import RunResults, describe_device, library_versions
from recipes_lib.tracking import names
from recipes_lib.units import BREAKDOWN_KEYS, GIB, short_model_name

logger = logging.getLogger("recipes_lib")

DEFAULT_PROJECT = "bert-recipes"
WANDB_MODES = ("online", "offline", "disabled", "dryrun", "shared", "run")
# W&B rejects tags longer than 64 characters.
MAX_TAG_LENGTH = 64

# Shared settings that name a run when they differ from the recipe's defaults, with their label.
# Every field of a recipe's own argument classes (LoRA rank, say) is a naming setting too.
NAME_SETTINGS = {
    "learning_rate": "lr",
    "per_device_train_batch_size": "bs",
    "gradient_accumulation_steps": "accum",
    "num_train_epochs": "epochs",
    "max_steps": "steps",
    "max_seq_length": "seq",
    "warmup_steps": "warmup",
    "weight_decay": "wd",
    "lr_scheduler_type": "sched",
    "optim": "optim",
    "max_train_samples": "train_samples",
    "seed": "seed",
}


@dataclass(frozen=True)
class RunIdentity:
    project: str
    group: str
    name: str
    tags: tuple[str, ...]
    job_type: str = names.JOB_TYPE


def short_dataset_name(data: DataArguments) -> str:
    """'glue-sst2' for a Hub dataset; the directory holding train_file for local files."""
    name, config = dataset_source(data)
    if name is not None:
        return f"{name}-{config}".replace("/", "-") if config else name.replace("/", "-")
    train_file = Path(data.train_file).resolve()
    return train_file.parent.name or train_file.stem


def _plain(value: Any) -> Any:
    # Enums (optim, lr_scheduler_type) compare and print as their string values.
    return getattr(value, "value", value)


def _format_setting(value: Any) -> str:
    value = _plain(value)
    if isinstance(value, float):
        # 2e-05 -> 2e-5, 3.0 -> 3
        return f"{value:g}".replace("e-0", "e-").replace("e+0", "e+")
    if isinstance(value, (list, tuple)):
        return "+".join(str(item) for item in value)
    return str(value)


def _field_defaults(argument_classes) -> dict[str, Any]:
    defaults = {}
    for cls in argument_classes:
        for item in dataclasses.fields(cls):
            if item.default is not dataclasses.MISSING:
                defaults[item.name] = item.default
            elif item.default_factory is not dataclasses.MISSING:
                defaults[item.name] = item.default_factory()
    return defaults


def run_name(recipe: RecipeSpec, arguments: ParsedArguments) -> str:
    """recipe + model + every naming setting whose value differs from the recipe's default."""
    recipe_classes = (recipe.options,) if recipe.options is not None else ()
    defaults = _field_defaults((ModelArguments, DataArguments, *recipe_classes, RecipeTrainingArguments))
    defaults.update(recipe.training_defaults)
    settings = dict(NAME_SETTINGS)
    settings.update({item.name: item.name for cls in recipe_classes for item in dataclasses.fields(cls)})

    resolved = arguments.to_dict()
    differences = [
        f"{label}={_format_setting(resolved[key])}"
        for key, label in settings.items()
        if key in resolved and _plain(resolved[key]) != _plain(defaults.get(key))  # 3 == 3.0 in Python
    ]
    return " ".join([recipe.name, short_model_name(arguments.model.model_name_or_path), *differences])


def run_identity(recipe: RecipeSpec, arguments: ParsedArguments) -> RunIdentity:
    training = arguments.training
    extra_tags = [tag.strip() for tag in (training.wandb_tags or "").split(",") if tag.strip()]
    tags = [
        recipe.name,
        short_model_name(arguments.model.model_name_or_path),
        training.precision,
        training.device.type,
        *extra_tags,
    ]
    return RunIdentity(
        project=training.wandb_project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
        # Model and data, not the recipe: swapping the recipe script keeps a run in the same group.
        group=training.experiment
        or f"{short_model_name(arguments.model.model_name_or_path)}_{short_dataset_name(arguments.data)}",
        name=training.run_name or run_name(recipe, arguments),
        tags=tuple(dict.fromkeys(tag[:MAX_TAG_LENGTH] for tag in tags)),  # unique, in order
    )


def _nvidia_driver_version() -> str | None:
    try:  # no nvidia-smi on the PATH: FileNotFoundError, an OSError
        completed = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = completed.stdout.strip().splitlines()
    return lines[0].strip() if completed.returncode == 0 and lines else None


def describe_environment(training: RecipeTrainingArguments) -> dict[str, Any]:
    device = training.device
    environment = {
        "device": describe_device(device),
        "device_kind": device.type,
        "num_processes": training.world_size,
        "precision": training.precision,
        "cuda_version": torch.version.cuda,
        "nvidia_driver_version": None,
        "versions": library_versions(),
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        environment["gpu_name"] = properties.name
        environment["gpu_memory_gib"] = round(properties.total_memory / GIB, 2)
        environment["gpu_compute_capability"] = f"{properties.major}.{properties.minor}"
        environment["nvidia_driver_version"] = _nvidia_driver_version()
    return environment


def tracking_requested(training: RecipeTrainingArguments) -> bool:
    """W&B is on unless report_to leaves it out or WANDB_MODE=disabled."""
    if "wandb" not in (training.report_to or []):
        return False
    mode = os.environ.get("WANDB_MODE")
    if mode is not None and mode not in WANDB_MODES:
        # wandb itself would fail later with a pydantic traceback; say it here, in one paragraph.
        raise ConfigError(
            f"WANDB_MODE is '{mode}', which W&B does not know. Use online, offline or disabled, "
            "or unset it (then the run is online with an API key and offline without one)."
        )
    return mode != "disabled"


def start_run(identity: RunIdentity, config: dict[str, Any], directory: str | None = None):
    """wandb.init, online only when it can work (its mode honours WANDB_MODE and `wandb offline`): the run
    or None, and why it fell back to offline. W&B's files go to `directory` (output_dir) unless WANDB_DIR
    says where: not to the directory the command runs in (a checkout's ./wandb filled with every run)."""
    with kernels_line_dropped():  # wandb's import reads every loaded module: a deferred bitsandbytes runs
        import wandb

    settings = wandb.setup().settings  # environment + settings files, as wandb.init reads them
    if settings.mode == "disabled":
        return None, None
    asked_offline = settings.mode in ("offline", "dryrun")
    fallback_reason = None
    if not asked_offline:  # online asked: offline from the start without a key
        from recipes_lib.tracking.auth import NO_KEY_REASON, has_credentials

        fallback_reason = None if has_credentials(settings) else NO_KEY_REASON
    mode = "offline" if asked_offline or fallback_reason else "online"
    init_kwargs = {
        **dataclasses.asdict(identity),  # project, group, name, tags, job_type
        "config": config,
        # wandb's end-of-run printout repeats the whole summary; results.json and our log say it once.
        "settings": wandb.Settings(quiet=True) if "WANDB_QUIET" not in os.environ else None,
    }
    if directory is not None and "WANDB_DIR" not in os.environ:
        Path(directory).mkdir(parents=True, exist_ok=True)
        init_kwargs["dir"] = str(directory)
    try:
        return wandb.init(mode=mode, **init_kwargs), fallback_reason
    except wandb.errors.Error as error:
        if mode == "offline":
            raise
        # No network, an invalid key, a server error: keep training and log offline.
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        fallback_reason = f"could not start an online W&B run ({first_line[:200]})"
        return wandb.init(mode="offline", **init_kwargs), fallback_reason


def memory_figures(device: torch.device) -> dict[str, float]:
    """Memory at a training log, for the curves (docs/wandb.md says what each figure is)."""
    if device.type == "cuda":
        allocated, max_allocated, reserved = names.CUDA_MEMORY_CURVES
        return {
            allocated: torch.cuda.memory_allocated(device) / GIB,
            max_allocated: torch.cuda.max_memory_allocated(device) / GIB,
            reserved: torch.cuda.memory_reserved(device) / GIB,
        }
    (peak_rss,) = names.CPU_MEMORY_CURVES
    return {peak_rss: peak_rss_gib()}


class ThroughputCallback(TrainerCallback):
    """Throughput and memory at every training log, over the training steps since the previous one (the
    clock starts at the first step after a log: evaluation and checkpointing left out). Tokens: the main
    process's count times the processes; samples: optimizer steps x the global batch."""

    def __init__(self, run, tokens):
        self.run = run
        self.tokens = tokens  # a training.callbacks.TokenCounter
        self.interval_start: float | None = None
        self.tokens_at_start = (0, 0)
        self.step_at_start = 0

    def on_step_begin(self, args, state, control, **kwargs):
        if self.interval_start is None:
            self.interval_start = time.perf_counter()
            self.tokens_at_start = (self.tokens.real, self.tokens.padded)
            self.step_at_start = state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        # Training logs carry "loss"; evaluation logs ("eval_loss") and the final summary do not.
        if not state.is_world_process_zero or "loss" not in (logs or {}) or self.interval_start is None:
            return
        seconds = time.perf_counter() - self.interval_start
        real = self.tokens.real - self.tokens_at_start[0]
        padded = self.tokens.padded - self.tokens_at_start[1]
        steps = state.global_step - self.step_at_start
        global_batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        figures = {names.STEP: state.global_step}
        if seconds > 0 and padded > 0:
            figures[names.SAMPLES_PER_SECOND_CURVE] = steps * global_batch / seconds
            figures[names.TOKENS_PER_SECOND_CURVE] = real * args.world_size / seconds
            figures[names.PAD_RATIO_CURVE] = 1 - real / padded
        figures.update(memory_figures(args.device))
        self.run.log(figures)
        self.interval_start = None


def results_table(runs: list[RunResults]):
    """A W&B table of finished runs, one row each: RESULTS_COLUMNS, then each memory part in GiB."""
    import wandb

    columns = [*names.RESULTS_COLUMNS, *(names.breakdown_column(part) for part in BREAKDOWN_KEYS)]
    rows = [
        [results.value(key) for key in names.RESULTS_COLUMNS]
        + [(results.memory_breakdown_gib or {}).get(part) for part in BREAKDOWN_KEYS]
        for results in runs
    ]
    return wandb.Table(columns=columns, data=rows)


def _chart(chart: names.Chart, table):
    import wandb

    return wandb.plot_table(chart.vega_spec, table, chart.fields, {"title": chart.title})


def _confusion_matrix_rows(confusion: Mapping[str, Any]) -> list[list[Any]] | None:
    """[true label, predicted label, count] per cell, as wandb.plot.confusion_matrix lays it out."""
    labels, matrix = confusion.get("labels"), confusion.get("matrix")
    n = len(labels or ())
    if not n or len(matrix or ()) != n or any(len(row) != n for row in matrix):
        logger.warning(
            "results.json's %s is not {labels: [n names], matrix: n x n counts}; not logged as a chart.",
            names.CONFUSION_MATRIX,
        )
        return None
    return [
        [str(actual), str(predicted), matrix[row][column]]
        for row, actual in enumerate(labels)
        for column, predicted in enumerate(labels)
    ]


def results_pictures(results: RunResults) -> dict[str, Any]:
    """What a person would rather look at than read, as W&B objects by key (docs/wandb.md, "Pictures")."""
    import wandb

    pictures: dict[str, Any] = {names.RESULTS_TABLE: results_table([results])}
    breakdown = results.memory_breakdown_gib
    if breakdown:
        chart = names.MEMORY_BREAKDOWN_CHART
        label, value = chart.fields["label"], chart.fields["value"]
        parts = [[part.replace("_", " "), breakdown.get(part)] for part in BREAKDOWN_KEYS]
        pictures[chart.key] = _chart(chart, wandb.Table(columns=[label, value], data=parts))
    confusion = results.confusion_matrix
    cells = _confusion_matrix_rows(confusion) if confusion else None
    if cells is not None:
        chart = names.CONFUSION_MATRIX_CHART
        pictures[chart.key] = _chart(chart, wandb.Table(columns=list(chart.fields.values()), data=cells))
    per_class = results.per_class
    if per_class:
        rows = [
            [str(label), *(scores.get(name) for name in names.PER_CLASS_FIELDS)]
            for label, scores in per_class.items()
        ]
        pictures[names.PER_CLASS_TABLE] = wandb.Table(columns=["label", *names.PER_CLASS_FIELDS], data=rows)
    return pictures


class Tracker:
    """The W&B run of one recipe run; every method does nothing when tracking is off."""

    def __init__(self, run=None):
        self.run = run

    @property
    def active(self) -> bool:
        return self.run is not None

    def callbacks(self, tokens) -> list:
        """The Trainer callbacks that add throughput and memory curves (`tokens`: the run's TokenCounter)."""
        return [ThroughputCallback(self.run, tokens)] if self.active else []

    def finish(self, results: RunResults) -> None:
        """Log the pictures, put every results.json key into the summary, close the run."""
        if not self.active:
            return
        self.run.log(results_pictures(results))
        self.run.summary.update({key: value for key, value in results.to_dict().items() if key != "config"})
        self.run.finish()
        self.run = None


def start_tracking(arguments: ParsedArguments, recipe: RecipeSpec) -> Tracker:
    """Start the W&B run on the main process, before the Trainer: its WandbCallback then reuses it."""
    training = arguments.training
    if not tracking_requested(training) or training.process_index != 0:
        return Tracker()
    identity = run_identity(recipe, arguments)
    config = {
        "recipe": recipe.name,
        **arguments.to_dict(),
        "environment": describe_environment(training),
        **sweep_config(),
    }
    run, fallback_reason = start_run(identity, config, training.output_dir)
    note = offline_note(run, fallback_reason, identity.name)
    if note is not None:
        (logger.warning if fallback_reason else logger.info)(note)
    return Tracker(run)


def sweep_config() -> dict[str, Any]:
    """The sweep keys a `recipes-lib sweep` trial adds to its config, from the JSON object the sweep puts
    in the environment; nothing outside a sweep, or from a malformed value."""
    text = os.environ.get(names.SWEEP_CONFIG_VARIABLE)
    if not text:
        return {}
    try:
        values = json.loads(text)
    except ValueError:
        values = None
    if not isinstance(values, dict):
        logger.warning(
            "%s is not a JSON object; the run's W&B config has no sweep keys.", names.SWEEP_CONFIG_VARIABLE
        )
        return {}
    return {key: values[key] for key in names.SWEEP_CONFIG_KEYS if key in values}


def offline_note(run, fallback_reason: str | None, name: str) -> str | None:
    """For an offline run, one line: why offline (unless asked), where the run is, how to upload it."""
    if run is None or not run.offline:
        return None
    run_dir = Path(run.settings.sync_dir).resolve()
    why = f"{fallback_reason}, so " if fallback_reason else "W&B offline mode: "
    return f"{why}run '{name}' is logged in {run_dir}; upload it later with: wandb sync {run_dir}"
