"""The export directory: the ONNX models and everything that turns their logits into the run's predictions
(docs/export.md, "What lands in OUTPUT_DIR/export/"). Deliberately no results.json: it is not a run, and
tools that list runs skip it. A directory whose gate failed is named export.failed/; predict refuses it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipes_lib.config.tasks import MULTI_LABEL, SINGLE_LABEL
from recipes_lib.errors import ConfigError, ModelError
from recipes_lib.evaluation.predictions import DECISION_THRESHOLD_FILE, THRESHOLDS_FILE
from recipes_lib.modeling.adapters import ADAPTER_CONFIG_FILE, MERGED_SUBDIR, read_base_quantization
from recipes_lib.results import RESULTS_FILE, RunResults, read_results, wrongly_typed
from recipes_lib.whole_files import DamagedFileError, fsync_path, read_json

EXPORT_SUBDIR = "export"
FAILED_SUBDIR = "export.failed"
FP32_MODEL = "model.onnx"
INT8_MODEL = "model.int8.onnx"
SETTINGS_FILE = "export_config.json"
REPORT_FILE = "export_report.json"
_MODEL_FILES = ("model.safetensors", "model.safetensors.index.json", ADAPTER_CONFIG_FILE)
# What predict reads from results.json, carried into export_config.json's "run".
RUN_KEYS = ("config", "text_columns", "problem_type", "decision_threshold", "label_thresholds", "recipe",
            "model_name_or_path")  # fmt: skip


@dataclass
class TrainedRun:
    """A finished run: where its results.json and its model are, and what the run recorded."""

    results_dir: Path  # holds results.json
    model_dir: Path  # holds the model: results_dir, or results_dir/merged
    results: RunResults

    @property
    def config(self) -> dict[str, Any]:
        return self.results.config

    def describe(self) -> str:
        if not (self.model_dir / ADAPTER_CONFIG_FILE).is_file():
            merged = self.model_dir.name == MERGED_SUBDIR and self.model_dir != self.results_dir
            return f"{'merged' if merged else 'full'} model of a {self.results.recipe or '?'} run"
        quantization = read_base_quantization(self.model_dir)
        if quantization is None:
            return "LoRA adapter on its full-precision base"
        if quantization.load_in_8bit:
            return "QLoRA adapter on its 8-bit LLM.int8 base"
        dtype = str(quantization.bnb_4bit_compute_dtype).removeprefix("torch.")
        return f"QLoRA adapter on its 4-bit {quantization.bnb_4bit_quant_type.upper()} base (compute {dtype})"


def find_run(path: str | Path) -> TrainedRun:
    """The run in `path`, as predict serves it and export exports it: an output_dir holding
    results.json, or its merged/ subdirectory."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(
            f"The run directory '{path}' does not exist. Pass the output_dir of a finished run (the directory "
            f"holding {RESULTS_FILE} and the model), or its {MERGED_SUBDIR}/ subdirectory for a merged LoRA model."
        )
    if not path.is_dir():
        raise ConfigError(
            f"'{path}' is a file, not a run directory. Pass the output_dir of a finished run (the directory "
            f"holding {RESULTS_FILE} and the model), not a file inside it."
        )
    # A merged model: the run's settings are one level up.
    merged = path.name == MERGED_SUBDIR and not (path / RESULTS_FILE).is_file()
    results_dir = path.parent if merged and (path.parent / RESULTS_FILE).is_file() else path
    results_path = results_dir / RESULTS_FILE
    if not results_path.is_file():
        unfinished = any(results_dir.glob("checkpoint-*"))
        finish = ", or finish this one: run its recipe again with --resume_from_checkpoint last."
        raise ConfigError(
            f"'{path}' holds no {RESULTS_FILE}, so it is not the output_dir of a finished run (a run writes "
            f"{RESULTS_FILE} last, and predict and export read the run's settings from it). Pass the "
            f"output_dir of a run that finished{finish if unfinished else '.'}"
        )
    results = read_results(results_path)
    if not isinstance(results.config, dict):
        raise ConfigError(
            f'{results_path} has no "config" (the run\'s settings), which predict and export read the text '
            "columns and max_seq_length from. It was written by an older version or edited; run the recipe again."
        )
    if not any((path / name).is_file() for name in _MODEL_FILES):
        raise ModelError(
            f"'{path}' holds {RESULTS_FILE} but no model ({' or '.join(_MODEL_FILES)}). Pass the directory the "
            "run saved its model in (its output_dir, or output_dir/merged)."
        )
    return TrainedRun(results_dir=results_dir, model_dir=path, results=results)


def write_bundle(
    directory: Path,
    model_dir: Path,
    results_dir: Path,
    results: RunResults,
    tokenizer,
    model_config,
    exporter: str,
) -> None:
    """Everything but the ONNX files and the report into `directory`: tokenizer, config, thresholds, settings."""
    tokenizer.save_pretrained(directory)
    model_config.save_pretrained(directory)
    for name in (THRESHOLDS_FILE, DECISION_THRESHOLD_FILE):
        source = next((d / name for d in (model_dir, results_dir) if (d / name).is_file()), None)
        if source is not None:
            shutil.copyfile(source, directory / name)
    run = {key: results.value(key) for key in RUN_KEYS}
    # The exported model runs in fp32 on the CPU whatever the run trained in.
    run.update(precision="fp32", device="cpu")
    settings = {
        "run": run,
        "exporter": exporter,
        "inputs": list(tokenizer.model_input_names),
        "dynamic_axes": ["batch", "sequence"],
        "max_seq_length": results.config.get("max_seq_length"),
        "long_text": results.config.get("long_text", "truncate"),
        "stride": results.config.get("stride"),
        "window_pooling": results.config.get("window_pooling", "mean"),
    }
    (directory / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")


def settle_export(staging: Path, results_dir: Path, passed: bool) -> Path:
    """Rename the finished `staging` directory to export/ (replacing an earlier one) or export.failed/: it
    appears whole under its name or not at all (a kill before the rename leaves the earlier export, or none)."""
    target = results_dir / (EXPORT_SUBDIR if passed else FAILED_SUBDIR)
    # On disk before the name: a machine lost just after the rename must not leave export/ with empty files.
    fsync_tree(staging)
    if target.exists():
        retired = Path(tempfile.mkdtemp(prefix=".export-old-", dir=results_dir))
        target.rename(retired / target.name)
        staging.rename(target)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        staging.rename(target)
    if passed:  # a failure left by an earlier attempt no longer describes this run's export
        shutil.rmtree(results_dir / FAILED_SUBDIR, ignore_errors=True)
    return target


@dataclass
class ExportedModel:
    """An export directory predict can run: which ONNX file, and the run's settings it carries."""

    directory: Path
    onnx_path: Path
    settings: dict[str, Any]
    report: dict[str, Any] | None = None  # export_report.json: how each file was made

    @property
    def run_results(self) -> RunResults:
        """The part of the run's results.json that predict reads ("config", "text_columns", ...); the rest null."""
        return RunResults.from_dict(self.settings["run"])

    def describe(self) -> str:
        """Which file, and how it was made: the int8 model from its own source (the TorchScript trace, as
        export_report.json says), model.onnx by the exporter export_config.json names."""
        int8 = (self.report or {}).get("int8") or {}
        made_from = f"{self.settings.get('exporter', '?')} exporter"
        if self.onnx_path.name == INT8_MODEL and int8.get("made_from"):
            made_from = f"int8, made from {int8['made_from']}"
        return f"ONNX export ({self.onnx_path.name}, {made_from}) of a {self.run_results.recipe or '?'} run"


def find_export(path: str | Path) -> ExportedModel | None:
    """The export at `path` (an export directory, or one of its .onnx files), or None if `path` is not one;
    one whose gate failed (export.failed/, or a report saying so) is refused with the reason."""
    path = Path(path)
    onnx_path = path if path.suffix == ".onnx" and path.is_file() else path / FP32_MODEL
    directory = onnx_path.parent
    if not (directory / SETTINGS_FILE).is_file() or not onnx_path.is_file():
        return None
    report_path = directory / REPORT_FILE
    report = _read_bundle_file(report_path) if report_path.is_file() else {}
    if directory.name == FAILED_SUBDIR or report.get("passed") is False:
        raise ConfigError(
            f"'{directory}' holds an export that failed its quality gate ({report.get('reason', 'see its report')}), "
            f"so it is not served. Fix the cause and run `recipes-lib export` again, or predict with the run's "
            f"PyTorch model (pass the run's output_dir)."
        )
    settings = _read_bundle_file(directory / SETTINGS_FILE)
    wrong = wrongly_typed(settings["run"]) if isinstance(settings.get("run"), dict) else "it has none"
    if wrong is not None:  # read as RunResults (run_results): typed as results.json is
        raise DamagedFileError(
            f'{directory / SETTINGS_FILE} holds no whole "run" settings (the text columns, labels and problem type '
            f"predict needs: {wrong}), so the export in '{directory}' cannot be served. {_EXPORT_AGAIN}"
        )
    return ExportedModel(directory=directory, onnx_path=onnx_path, settings=settings, report=report)


_EXPORT_AGAIN = "Run `recipes-lib export` on the run again to write the export anew."


def _read_bundle_file(path: Path) -> dict[str, Any]:
    """An export's JSON file; one that is cut short, damaged or not an object is a DamagedFileError."""
    found = read_json(path, "a file of an ONNX export", _EXPORT_AGAIN)
    if not isinstance(found, dict):
        raise DamagedFileError(
            f"{path} holds a {type(found).__name__}, not the object an export writes. {_EXPORT_AGAIN}"
        )
    return found


# The decision files a run writes beside its model (evaluation/predictions.py), read back by what
# serves a trained directory: predict, the export (which copies them here) and crossval's ensemble.


def threshold_problem(value: Any, exclusive: bool) -> str | None:
    """What is wrong with a saved threshold, or None: a real number (not a string, not true/false), finite,
    between 0 and 1 (both ends excluded for a binary decision threshold, included for a class's)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{json.dumps(value)} is not a number"
    inside = 0 < value < 1 if exclusive else 0 <= value <= 1
    return None if math.isfinite(value) and inside else f"{value} is not between 0 and 1"


def read_thresholds(directory: str | Path, label_names: list[str]) -> list[float] | None:
    """The thresholds saved with a multi-label model, in label-id order; None where none were saved."""
    path = Path(directory) / THRESHOLDS_FILE
    if not path.is_file():
        return None
    saved = read_json(
        path, "a multi-label model's thresholds", "Restore it, or delete it to decide every class at 0.5."
    )
    saved = saved.get("thresholds") if isinstance(saved, dict) else None
    missing = [name for name in label_names if not isinstance(saved, dict) or name not in saved]
    problems = [f"'{name}': {threshold_problem(saved[name], exclusive=False)}" for name in label_names
                if name not in missing and threshold_problem(saved[name], exclusive=False)]  # fmt: skip
    if missing or problems:
        raise ConfigError(
            f"{path} does not hold a threshold between 0 and 1 for every class of the model "
            f"({'; '.join(problems + [f'{name!r} missing' for name in missing])}). It is written with the model "
            "at the end of a run; restore it, or delete it to decide every class at probability 0.5."
        )
    return [float(saved[name]) for name in label_names]


def saved_decisions(directories, results: RunResults, label_names: list[str], problem_type: str):
    """(a multi-label run's tuned thresholds, a binary run's --decision_threshold): the file saved with its
    model (the first of `directories` holding one), else results.json's; None where the task has none or
    neither has it (a binary run's None: argmax)."""
    if problem_type == MULTI_LABEL:
        for directory in directories:
            if (thresholds := read_thresholds(directory, label_names)) is not None:
                return thresholds, None
        saved = results.label_thresholds
        usable = isinstance(saved, dict) and set(saved) == set(label_names)
        if usable and not any(threshold_problem(saved[name], exclusive=False) for name in label_names):
            return [float(saved[name]) for name in label_names], None
    elif problem_type == SINGLE_LABEL and len(label_names) == 2:
        for directory in directories:
            if (threshold := read_decision_threshold(directory)) is not None:
                return None, threshold
        saved = results.decision_threshold
        if isinstance(saved, (int, float)) and 0 < saved < 1:
            return None, float(saved)
    return None, None


def read_decision_threshold(directory: str | Path) -> float | None:
    """The threshold saved with a binary model (decision_threshold.json); None where none was saved."""
    path = Path(directory) / DECISION_THRESHOLD_FILE
    if not path.is_file():
        return None
    saved = read_json(
        path,
        "a binary model's decision threshold",
        "Restore it, or delete it to decide by the likelier class.",
    )
    threshold = saved.get("threshold", "missing") if isinstance(saved, dict) else "missing"
    problem = threshold_problem(threshold, exclusive=True)
    if problem is not None:
        raise ConfigError(
            f"{path} does not hold a threshold between 0 and 1 ({problem}). It is written with the model at the "
            "end of a run with --decision_threshold; restore it, or delete it to decide by the likelier class."
        )
    return threshold


def fsync_tree(directory: str | os.PathLike) -> None:
    """Flush every file under `directory`, then the directories themselves, before the tree is renamed
    into place or marked complete (an export bundle, a checkpoint)."""
    directory = Path(directory)
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            fsync_path(path)
    for path in sorted((p for p in directory.rglob("*") if p.is_dir()), reverse=True):
        fsync_path(path)
    fsync_path(directory)
