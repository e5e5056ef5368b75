"""Checks on a run's arguments that need more than one field, or the data's task, to decide, run before
anything expensive. Every failure is a ConfigError or OutputDirError that names the value and the fix."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from recipes_lib.config.tasks import MULTI_LABEL, SINGLE_LABEL, TASK_METRICS, TUNE
from recipes_lib.errors import ConfigError, OutputDirError
from recipes_lib.locking import lock_directory
from recipes_lib.results import RESULTS_FILE

logger = logging.getLogger(__name__)

SUPPORTED_DATA_EXTENSIONS = (".csv", ".tsv", ".txt", ".json", ".jsonl", ".parquet")

# Files that mean "another run lives here".
RUN_MARKERS = (RESULTS_FILE, "model.safetensors", "adapter_model.safetensors", "checkpoint-*")

STALE_RUN_ADVICE = (
    "Continue that run with --resume_from_checkpoint last, or replace it with --overwrite_output_dir (either "
    "takes the lock over), or pick another --output_dir. "
)


def resume_requested(value: str | None) -> bool:
    """Whether `--resume_from_checkpoint VALUE` asks to resume ("false" in a YAML file does not)."""
    return value is not None and str(value).strip().lower() not in ("", "none", "false")


def claim_output_dir(training, main_process: bool) -> contextlib.ExitStack:
    """Lock the output_dir (main process only: the others write nothing there), then check it; close() lets
    go. The lock first: of two runs started at once into one directory, the second is refused before looking."""
    hold = contextlib.ExitStack()
    if main_process and not Path(training.output_dir).is_file():  # a file: the check says so
        continuing = training.overwrite_output_dir or resume_requested(training.resume_from_checkpoint)
        hold.enter_context(lock_directory(training.output_dir, "run", continuing, STALE_RUN_ADVICE))
    try:
        check_output_dir(training)
    except BaseException:
        hold.close()
        raise
    return hold


def check_output_dir(training) -> None:
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


def parse_decision_threshold(option: str | None) -> str | float | None:
    if option is None:
        return None
    text = str(option).strip()
    if text.lower() == TUNE:
        return TUNE
    try:
        threshold = float(text)
    except ValueError:
        threshold = float("nan")
    if not 0 < threshold < 1:
        raise ConfigError(
            f"decision_threshold is '{option}'; give 'tune' (the threshold with the best F1 of the positive class "
            "on the validation split) or a probability between 0 and 1, exclusive (e.g. --decision_threshold 0.3)."
        )
    return threshold


def check_early_stopping(training) -> None:
    patience = training.early_stopping_patience
    if patience < 1:
        raise ConfigError(f"early_stopping_patience is {patience}; give a number of evaluations, 1 or more.")
    evaluation, saving = (
        str(getattr(training.eval_strategy, "value", training.eval_strategy)),
        str(getattr(training.save_strategy, "value", training.save_strategy)),
    )
    if evaluation == "no" or saving != evaluation:
        raise ConfigError(
            f"early_stopping_patience {patience} needs a checkpoint at every evaluation, to end with the best one, "
            f"but eval_strategy is '{evaluation}' and save_strategy '{saving}'. Set both to 'epoch' (the defaults) "
            "or both to 'steps' with the same interval."
        )


def parse_class_weights(option: str, names: list[str]) -> list[float]:
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
    """Options that only fit some tasks, refused before the data is tokenized and the weights load."""
    for option, what_it_does, tasks in (
        ("class_weights", "weights the classes of a classification task", (SINGLE_LABEL, MULTI_LABEL)),
        ("label_smoothing_factor", "smooths a softmax over classes", (SINGLE_LABEL,)),
    ):
        if getattr(training, option) and labels.problem_type not in tasks:
            raise ConfigError(
                f"--{option} {getattr(training, option)} {what_it_does}, but this data is {labels.problem_type} "
                f"(from its labels or --problem_type). Leave --{option} out."
            )
    if training.decision_threshold is not None and (
        labels.problem_type != SINGLE_LABEL or labels.num_labels != 2
    ):
        kind = f"{labels.problem_type} with {labels.num_labels} {'class' if labels.num_labels == 1 else 'classes'}"
        raise ConfigError(
            f"--decision_threshold {training.decision_threshold} sets the probability at which a binary classifier "
            f"predicts its positive class (label id 1), but this data is {kind} ({', '.join(labels.names[:5])}; "
            "from its labels or --problem_type). Leave --decision_threshold out: single-label runs with more "
            "classes predict the likelier class, multi-label runs tune one threshold per class on their own."
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


def validate_arguments(arguments) -> None:
    """Fail here, not after an hour of tokenization."""
    data, training = arguments.data, arguments.training
    _check_data_source(data)
    _check_data_files(data)
    _check_text_columns(data)
    _check_positive_counts(data, training)
    _check_long_text(data)
    _check_training_schedule(training)
    _check_validation_split(data)
    if arguments.model.trust_remote_code:
        logger.warning(
            "trust_remote_code is on: Python code from '%s' will run on this machine.",
            arguments.model.model_name_or_path,
        )


def _check_data_source(data) -> None:
    for name in ("validation_file", "test_file"):
        if data.train_file is None and getattr(data, name) is not None:
            raise ConfigError(
                f"{name} '{getattr(data, name)}' was given without train_file. Pass --train_file too."
            )
    if data.test_split_name is not None and data.train_file is not None:
        raise ConfigError(
            f"test_split_name '{data.test_split_name}' names a Hub dataset's split, but the data is local "
            f"(train_file '{data.train_file}'). Use --test_file for a local test file."
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


def _check_data_files(data) -> None:
    for name in ("train_file", "validation_file", "test_file"):
        given = getattr(data, name)
        if given is None:
            continue
        path = Path(given)
        if path.is_dir():
            inside = sorted(p.name for p in path.iterdir() if p.suffix.lower() in SUPPORTED_DATA_EXTENSIONS)
            raise ConfigError(
                f"{name} '{given}' is a directory; pass one file in it"
                + (f" (it holds: {', '.join(inside[:5])})." if inside else ".")
            )
        if path.suffix.lower() not in SUPPORTED_DATA_EXTENSIONS:
            raise ConfigError(
                f"{name} '{given}' has an unsupported extension. Use one of {', '.join(SUPPORTED_DATA_EXTENSIONS)}; "
                "the extension decides how the file is read."
            )
        if not path.is_file():
            raise ConfigError(
                f"{name} '{given}' does not exist (looked in {path.resolve().parent}). Check the path."
            )


def _check_text_columns(data) -> None:
    if data.text_column_names is not None:
        columns = [c.strip() for c in data.text_column_names.split(",") if c.strip()]
        if not 1 <= len(columns) <= 2:
            raise ConfigError(
                f"text_column_names '{data.text_column_names}' names {len(columns)} columns; give one column, "
                "or two separated by a comma for sentence pairs (e.g. 'sentence1,sentence2')."
            )


def _check_positive_counts(data, training) -> None:
    positive = {
        "max_seq_length": data.max_seq_length,
        "max_train_samples": data.max_train_samples,
        "max_eval_samples": data.max_eval_samples,
        "max_text_chars": data.max_text_chars,
        "per_device_train_batch_size": training.per_device_train_batch_size,
        "per_device_eval_batch_size": training.per_device_eval_batch_size,
        "gradient_accumulation_steps": training.gradient_accumulation_steps,
    }
    for name, value in positive.items():
        if value is not None and value <= 0:
            raise ConfigError(f"{name} is {value}; it must be a positive integer.")


def _check_long_text(data) -> None:
    if data.long_text != "sliding_window":
        if data.max_windows_per_document is not None:
            raise ConfigError(
                f"max_windows_per_document is set but long_text is '{data.long_text}': it limits the windows of "
                "--long_text sliding_window. Add --long_text sliding_window, or leave it out."
            )
        return
    if data.max_windows_per_document is not None and data.max_windows_per_document <= 0:
        raise ConfigError(
            f"max_windows_per_document is {data.max_windows_per_document}; it must be positive."
        )
    # A window holds max_seq_length tokens less the special ones; each must add at least one new token.
    if not 0 <= data.stride < data.max_seq_length // 2:
        raise ConfigError(
            f"stride is {data.stride} with max_seq_length {data.max_seq_length}: the overlap between windows must "
            f"be at least 0 and below half a window ({data.max_seq_length // 2}), or the windows barely move "
            f"(e.g. --stride {data.max_seq_length // 4})."
        )


def _check_training_schedule(training) -> None:
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


def _check_validation_split(data) -> None:
    if not 0 < data.validation_split_percentage < 100:
        raise ConfigError(
            f"validation_split_percentage is {data.validation_split_percentage}; it must be between 1 and 99."
        )
