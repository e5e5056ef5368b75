"""Checks on a run's arguments that need more than one field, or the data's task, to decide.

Each field's own checks run when its dataclass is built (`__post_init__`); the checks here look
at the arguments together and run before anything expensive: `check_output_dir` before any
download, `check_task_options` once the labels have decided the task, before tokenization and
before the weights load. Every failure is a ConfigError or OutputDirError that names the value
and the fix.
"""

from __future__ import annotations

from pathlib import Path

from recipes_lib.config.tasks import SINGLE_LABEL, TASK_METRICS
from recipes_lib.errors import ConfigError, OutputDirError
from recipes_lib.results import RESULTS_FILE

# Files that mean "another run lives here".
RUN_MARKERS = (RESULTS_FILE, "model.safetensors", "adapter_model.safetensors", "checkpoint-*")


def resume_requested(value: str | None) -> bool:
    """Whether `--resume_from_checkpoint VALUE` asks to resume ("false" in a YAML file does not)."""
    return value is not None and str(value).strip().lower() not in ("", "none", "false")


def check_output_dir(training) -> None:
    """Refuse to write over another run unless asked to resume it or to overwrite it."""
    output_dir = Path(training.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise OutputDirError(f"--output_dir '{output_dir}' is a file, not a directory. Pick another path.")
    resuming = resume_requested(training.resume_from_checkpoint)
    if not output_dir.is_dir() or training.overwrite_output_dir or resuming:
        return
    found = sorted({path.name for marker in RUN_MARKERS for path in output_dir.glob(marker)})
    if found:
        raise OutputDirError(
            f"The output directory '{output_dir}' already holds a run ({', '.join(found[:3])}). Nothing was "
            "changed. Pick another --output_dir, continue that run with --resume_from_checkpoint last, or "
            "replace it with --overwrite_output_dir."
        )


def parse_class_weights(option: str, names: list[str]) -> list[float]:
    """`--class_weights 1,3.5`: one positive weight per class, in label-id order."""
    try:
        weights = [float(value) for value in option.split(",")]
    except ValueError:
        weights = []
    if len(weights) != len(names) or not all(weight > 0 for weight in weights):
        raise ConfigError(
            f"class_weights '{option}' is not 'balanced' or {len(names)} positive numbers, one per class in label-id "
            f"order ({', '.join(names)}), e.g. --class_weights {','.join(['1'] * len(names))}."
        )
    return weights


def check_task_options(training, labels) -> None:
    """Options that only fit some tasks, refused before the data is tokenized and the weights load.

    `labels` is the data's label mapping (its names and problem_type). Sets greater_is_better to
    false for `--metric_for_best_model mse`: the Trainer takes every metric but a "*loss" as
    greater-is-better, and a squared error is not.
    """
    if training.class_weights and labels.problem_type != SINGLE_LABEL:
        raise ConfigError(
            f"--class_weights weights the classes of a single-label task, but this data is {labels.problem_type} "
            "(from its labels or --problem_type). Leave --class_weights out."
        )
    if training.label_smoothing_factor and labels.problem_type != SINGLE_LABEL:
        raise ConfigError(
            f"--label_smoothing_factor {training.label_smoothing_factor} smooths a softmax over classes, but this "
            f"data is {labels.problem_type} (from its labels or --problem_type). Leave it out (or set it to 0)."
        )
    if training.class_weights and training.class_weights != "balanced":
        parse_class_weights(training.class_weights, labels.names)  # a wrong count fails here
    metric = training.metric_for_best_model
    allowed = ("loss", *TASK_METRICS[labels.problem_type])
    if metric is not None and metric.removeprefix("eval_") not in allowed:
        raise ConfigError(
            f"--metric_for_best_model is '{metric}', which a {labels.problem_type} run does not compute; it "
            f"reports: {', '.join(allowed)}. Pick one of those."
        )
    if metric is not None and metric.removeprefix("eval_") == "mse":
        training.greater_is_better = False
