"""results.json: one typed record per run (`RunResults`), the same keys for every recipe, written
atomically by `write_results` and read back by `read_results` alone: the card, the W&B summary, compare,
show, predict, export, sweep, crossval and the benchmarks' tables read fields, never the file's keys."""

from __future__ import annotations

import json
import math
import os
import platform
import typing
from dataclasses import dataclass, fields
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipes_lib.errors import ConfigError
from recipes_lib.whole_files import DamagedFileError, read_json, written_whole

if TYPE_CHECKING:
    import torch

RESULTS_FILE = "results.json"


@dataclass(frozen=True, kw_only=True)
class RunResults:
    """A finished run, as results.json holds it: one field per key, in the file's order, each always written
    (null where it does not apply; docs/results-format.md). A default: only with an option or a split; the
    rest, `finish_run` must give. A new key: a field here, its value in `finish_run`, its line in the docs.
    """

    # What ran, and the validation split's metrics (eval_f1_micro: multi-label; mse, pearson, spearman: regression).
    recipe: str | None
    model_name_or_path: str | None
    dataset: str | None
    problem_type: str | None
    num_labels: int | None
    eval_accuracy: float | None
    eval_f1: float | None
    eval_f1_micro: float | None
    eval_mse: float | None
    eval_pearson: float | None
    eval_spearman: float | None
    eval_loss: float | None
    eval_samples: int | None
    eval_split: str | None
    test_split: str | None
    text_columns: list[str] | None
    truncation: dict[str, Any] | None
    # Multi-label thresholds and --decision_threshold, tuned or given; the figures at them.
    label_thresholds: dict[str, float] | None
    eval_tuned_accuracy: float | None = None
    eval_tuned_f1: float | None = None
    eval_tuned_f1_micro: float | None = None
    # Multi-label: each class's threshold, why, rows marked.
    threshold_tuning: dict[str, dict[str, Any]] | None = None
    decision_threshold: float | None = None
    decision_threshold_tuned_on: str | None = None
    positive_label: str | None = None
    # The share of validation rows given the positive class at the threshold, and at 0.5 (issue #50).
    decision_threshold_marked: float | None = None
    decision_threshold_marked_at_default: float | None = None
    eval_f1_positive: float | None = None
    eval_threshold_accuracy: float | None = None
    eval_threshold_f1: float | None = None
    eval_threshold_f1_positive: float | None = None
    test_f1_positive: float | None = None
    test_threshold_accuracy: float | None = None
    test_threshold_f1: float | None = None
    test_threshold_f1_positive: float | None = None
    per_class: dict[str, dict[str, Any]] | None
    confusion_matrix: dict[str, Any] | None
    # The test split, when it has labels (multi-label: at the tuned thresholds).
    test_accuracy: float | None = None
    test_f1: float | None = None
    test_f1_micro: float | None = None
    test_mse: float | None = None
    test_pearson: float | None = None
    test_spearman: float | None = None
    test_loss: float | None = None
    test_samples: int | None = None
    # --merge_adapter: the merged model, scored by running it.
    merged_model: str | None = None
    merged_eval_accuracy: float | None = None
    merged_eval_f1: float | None = None
    merged_eval_f1_positive: float | None = None  # binary tasks
    merged_eval_f1_micro: float | None = None
    merged_eval_mse: float | None = None
    merged_eval_pearson: float | None = None
    merged_eval_spearman: float | None = None
    # Parameters and the optimizer's state, counted after training.
    params_total: int | None
    params_trainable: int | None
    optimizer_state_bytes: int | None
    optimizer_state_bytes_by_dtype: dict[str, int] | None
    optimizer_state_bytes_by_parameter_kind: dict[str, int] | None
    # How training went.
    train_samples: int | None
    train_loss: float | None
    train_steps: int | None
    best_step: int | None
    best_metric: float | None
    class_weights: dict[str, float] | None
    epochs: float | None
    train_runtime_s: float | None
    train_samples_per_s: float | None
    train_tokens_per_s: float | None
    pad_ratio: float | None
    # A resumed run: the step its checkpoint held (the speed figures cover the steps after it); else null.
    resumed_from_step: int | None = None
    # What trained, and the memory it held.
    model_type: str | None
    attn_implementation: str | None
    lora_target_modules: list[str] | str | None
    modules_trained_in_full: list[str] | None
    quantized_base_bits: int | None
    peak_memory_gib: float | None
    peak_memory_reserved_gib: float | None
    peak_memory_source: str | None
    memory_phases: dict[str, Any] | None
    memory_phases_source: str | None
    memory_breakdown_gib: dict[str, float | None] | None
    memory_breakdown_source: str | None
    tensor_peak_gib: float | None
    memory_tracked_steps: int | None
    memory_peak_batch: dict[str, Any] | None
    auto_batch_size: dict[str, Any] | None
    # Where and how it ran.
    device: str | None
    num_processes: int | None
    precision: str | None
    precision_reason: str | None
    quantized_compute_dtype: str | None
    versions: dict[str, str | None] | None
    created_at: str | None
    output_dir: str | None
    config: dict[str, Any] | None
    # What the run says at its end (issues #42, #50): a collapsed model (outputs that do not depend on the input).
    model_collapsed: bool | None
    output_variation: dict[str, Any] | None
    neglected_classes: list[dict[str, Any]] | None
    train_loss_end: float | None
    train_loss_high: bool | None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in RESULT_KEYS}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunResults:
        """A missing key (an older file) reads as null; a key that is no field (the Trainer's test_runtime) is
        left out; a value of another type than its field's raises TypeError naming the key, so every reader
        can trust the record's types."""
        wrong = wrongly_typed(values)
        if wrong is not None:
            raise TypeError(wrong)
        return cls(**{name: values.get(name) for name in RESULT_KEYS})

    def value(self, key: str) -> Any:
        """The figure under a key given as data (a sweep's --metric, a card's score, a compare column)."""
        if key not in RESULT_KEYS:
            raise KeyError(
                f"results.json has no key '{key}'; its keys are RunResults' fields ({', '.join(RESULT_KEYS)})"
            )
        return getattr(self, key)


RESULT_KEYS = tuple(field.name for field in fields(RunResults))


def wrongly_typed(values: dict[str, Any]) -> str | None:
    """What is wrong with the first value whose type is not its field's (None when every one fits)."""
    from recipes_lib.typed_json import first_mistyped  # loaded by a reader of the record, not by a run

    return first_mistyped(values, typing.get_type_hints(RunResults))


def read_results(path: str | os.PathLike) -> RunResults:
    """The record of a run's results.json: its output_dir, or the file itself. The one reader of the file."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: no finished run's results there. Name a run's output_dir.")
    values = read_json(
        path,
        "a run's results",
        "Restore it from a copy, or run the recipe again with --overwrite_output_dir.",
    )
    if not isinstance(values, dict):
        raise ConfigError(
            f"{path} holds a {type(values).__name__}, not a run's record; run the recipe again."
        )
    try:
        return RunResults.from_dict(values)
    except TypeError as wrong:
        raise DamagedFileError(
            f"{path} (a run's results) is damaged: {wrong}. It was changed since the run wrote it, so none of it "
            "is read. Restore it from a copy, or run the recipe again with --overwrite_output_dir."
        ) from None


REPORTED_PACKAGES = (
    "torch",
    "transformers",
    "accelerate",
    "datasets",
    "evaluate",
    "peft",
    "bitsandbytes",
    "wandb",
)


def library_versions() -> dict[str, str | None]:
    versions = {}
    for package in REPORTED_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {**versions, "python": platform.python_version()}


def describe_device(device: torch.device) -> str:
    # torch imported here, where a run (which has it loaded) asks: the workbench's commands read results.json
    # through this module (read_results) and do not load torch (test_bitsandbytes_import).
    import torch

    if device.type == "cuda":
        return f"cuda:{device.index or 0} ({torch.cuda.get_device_name(device)})"
    return f"{device.type} ({torch.get_num_threads()} threads, {platform.processor() or platform.machine()})"


def write_results(output_dir: str | os.PathLike, results: RunResults) -> Path:
    """Whole or not at all: a crash never leaves half a file."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    target = output_dir / RESULTS_FILE
    with written_whole(target) as handle:
        # NaN is not JSON (jq and browsers refuse it): an undefined metric, such as the correlation of
        # constant predictions, is written as null.
        json.dump(_finite(results.to_dict()), handle, indent=2, default=str, allow_nan=False)
        handle.write("\n")
    return target


def _finite(value):
    """Every NaN or infinite float replaced by None, at any depth."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value
