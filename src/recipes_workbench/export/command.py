"""`recipes-lib export OUTPUT_DIR`: export, quantize, gate, and only then call the directory export/ (else
export.failed/: a failed export never sits where a deployment script looks, nor overwrites a good one)."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from recipes_lib.config.tasks import SINGLE_LABEL
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.errors import ConfigError
from recipes_lib.evaluation.inference import batch_logits
from recipes_lib.locking import lock_directory
from recipes_lib.modeling.adapters import ADAPTER_CONFIG_FILE, load_trained_model
from recipes_lib.modeling.families import profile_for
from recipes_lib.modeling.weight_files import check_model_files
from recipes_lib.results import RunResults
from recipes_workbench.export import (
    DEFAULT_MAX_METRIC_DROP,
    MIN_FP32_AGREEMENT,
    MIN_INT8_AGREEMENT,
    MIN_INT8_SPEEDUP,
)
from recipes_workbench.export.bundle import (
    FP32_MODEL,
    INT8_MODEL,
    REPORT_FILE,
    find_run,
    saved_decisions,
    settle_export,
    write_bundle,
)
from recipes_workbench.export.gate import (
    Decider,
    against_constant,
    compare,
    data_arguments,
    gate_rows,
    verdict,
)
from recipes_workbench.export.onnx_model import (
    INT8_WEIGHTS,
    Int8Quantizer,
    export_for_int8,
    export_onnx,
    model_to_export,
    size_on_disk,
)
from recipes_workbench.export.runtime import measure_latency, onnx_logits, onnx_session, session_logits
from recipes_workbench.export.sensitivity import MAX_KEPT, SENSITIVITY_ROWS, keep_sensitive_nodes, rank_nodes

logger = logging.getLogger(__name__)

QUANTIZATIONS = ("int8",)
STALE_EXPORT_ADVICE = (
    "If that was an earlier export, the run itself is whole: delete the lock file and export again. If it was "
    "the training run, continue it first (--resume_from_checkpoint last). "
)
GATE_BATCH_SIZE = 32
LATENCY_ROWS = 32  # the gate's first rows, each alone, for the batch-1 latency


@dataclass
class ExportOutcome:
    directory: Path  # export/ or export.failed/
    report: dict[str, Any]
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class ExportOptions:
    """`recipes-lib export`'s options (cli/export.py), checked before anything is read."""

    quantize: str | None = None
    eval_file: str | None = None
    max_metric_drop: float = DEFAULT_MAX_METRIC_DROP
    batch_size: int = GATE_BATCH_SIZE
    progress: bool = True
    int8_weights: str = "signed"
    min_int8_agreement: float = MIN_INT8_AGREEMENT
    min_int8_speedup: float = MIN_INT8_SPEEDUP

    def __post_init__(self) -> None:
        if self.int8_weights not in INT8_WEIGHTS:
            raise ConfigError(
                f"--int8_weights is '{self.int8_weights}'; use one of {', '.join(INT8_WEIGHTS)}."
            )
        if self.quantize is not None and self.quantize not in QUANTIZATIONS:
            raise ConfigError(
                f"--quantize is '{self.quantize}'; the one quantization offered is int8 (dynamic, ONNX Runtime)."
            )
        if self.max_metric_drop < 0:
            raise ConfigError(
                f"--max_metric_drop is {self.max_metric_drop}; give the points the metric may lose, 0 or more."
            )
        if self.batch_size <= 0:
            raise ConfigError(f"--batch_size is {self.batch_size}; it must be a positive integer.")
        if not 0 <= self.min_int8_agreement <= 1:
            raise ConfigError(
                f"--min_int8_agreement is {self.min_int8_agreement}; give the share of rows (0 to 1) on which the int8 "
                "model must predict as PyTorch does."
            )
        if self.min_int8_speedup < 0:
            raise ConfigError(
                f"--min_int8_speedup is {self.min_int8_speedup}; give how many times faster than fp32 int8 must be at "
                "batch 1 (0 turns the check off)."
            )

    def gate_settings(self) -> dict:
        int8 = self.quantize == "int8"
        return {
            "int8_weights": self.int8_weights if int8 else None,
            "max_metric_drop_points": self.max_metric_drop,
            "min_fp32_agreement": MIN_FP32_AGREEMENT,
            "min_int8_agreement": self.min_int8_agreement if int8 else None,
            "min_int8_speedup": self.min_int8_speedup if int8 else None,
        }


def export_run(run_dir: str | Path, **options) -> ExportOutcome:
    """Export the run in `run_dir` to ONNX (and int8), gate it, and move it to export/ or export.failed/."""
    checked = ExportOptions(**options)
    run = find_run(run_dir)
    # The run's directory, locked as its run locks it (locking.py): never exported while it trains.
    with lock_directory(run.results_dir, "export", stale_advice=STALE_EXPORT_ADVICE):
        return _export(run.results_dir, run.model_dir, run.results, checked)


def _export(results_dir, model_dir, results, options: ExportOptions) -> ExportOutcome:
    from transformers import AutoConfig, AutoTokenizer

    check_model_files(model_dir)  # a damaged config or weights file: one paragraph naming it
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model_config = AutoConfig.from_pretrained(model_dir)
    label_names = [model_config.id2label[i] for i in range(model_config.num_labels)]
    problem_type = model_config.problem_type or results.problem_type or SINGLE_LABEL
    # The held-out rows before the weights: a bad path costs seconds, not an export.
    rows = gate_rows(
        results.config, tokenizer, label_names, options.eval_file, profile_for(model_config).max_length
    )

    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=results_dir))
    staging.chmod(0o755)  # mkdtemp's 0700 would follow the directory to export/
    try:
        started = time.perf_counter()
        model, what = model_to_export(model_dir, staging / ".scratch")
        exporter = export_onnx(model, tokenizer, staging / FP32_MODEL)
        export_seconds = time.perf_counter() - started
        logger.info("Exported %s to ONNX with the %s exporter in %.1f s.", what, exporter, export_seconds)
        quantizer, int8_recipe = None, None
        if options.quantize == "int8":
            quantizer, int8_recipe = _make_int8(model, tokenizer, staging, options.int8_weights, model_config)
        write_bundle(staging, model_dir, results_dir, results, tokenizer, model_config, exporter)

        # The model the run evaluated (an adapter on its base, as predict loads it), for the gate to compare with.
        adapter = (model_dir / ADAPTER_CONFIG_FILE).is_file()
        reference = load_trained_model(model_dir, "cpu").eval() if adapter else model
        cpu = torch.device("cpu")
        collator = padding_collator(tokenizer, data_arguments(results.config), cpu)
        batch_size, max_metric_drop = options.batch_size, options.max_metric_drop
        reference_logits = batch_logits(reference, rows.encoded, collator, cpu, batch_size, options.progress)
        # The thresholds as predict uses them (the bundle holds the files).
        decider = Decider(
            problem_type, label_names, *saved_decisions((staging,), results, label_names, problem_type)
        )

        def gate_of(path: Path) -> dict:
            """One exported model's gate figures (gate.compare), with its file and size on disk."""
            logits = onnx_logits(onnx_session(path), rows.encoded, collator, batch_size, options.progress)
            compared = compare(reference_logits, logits, rows, decider)
            return {**compared, "file": path.name, "size_bytes": size_on_disk(path)}

        files = {
            name: staging / f
            for name, f in (("fp32", FP32_MODEL), ("int8", INT8_MODEL))
            if (staging / f).is_file()
        }
        compared = {name: gate_of(path) for name, path in files.items()}
        min_agreement = {"int8": options.min_int8_agreement}
        if quantizer is not None and verdict({"int8": compared["int8"]}, max_metric_drop, min_agreement):
            int8_recipe = _keep_sensitive_nodes(
                quantizer, staging, compared, int8_recipe, rows, reference_logits, collator, batch_size, gate_of,
                lambda result: not verdict({"int8": result}, max_metric_drop, min_agreement),
            )  # fmt: skip
        shutil.rmtree(staging / ".scratch", ignore_errors=True)
        latency = gate_latency(reference, files, rows.encoded, tokenizer.model_input_names)
        del model, reference
        reference_check = against_constant(reference_logits, rows, decider)  # issue #50: a constant model
        failures = verdict(
            compared, max_metric_drop, min_agreement, latency, options.min_int8_speedup, reference_check
        )
        report = {"passed": not failures, "reason": "; ".join(failures) if failures else None,
                  "run": str(results_dir.name), "exported": what, "exporter": exporter,
                  "export_seconds": round(export_seconds, 1), "rows_from": rows.source,
                  **options.gate_settings(),
                  "int8": int8_recipe, "latency": latency, "models": compared,
                  "pytorch_against_constant": reference_check}  # fmt: skip
        (staging / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
        directory = settle_export(staging, results_dir, passed=not failures)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if not failures:
        _card_with_export(results_dir, results)
    return ExportOutcome(directory, report, failures)


def _card_with_export(results_dir: Path, results: RunResults) -> None:
    """The run's model card again, now with the export's gate figures (tracking/card_export.py).
    The export stands whatever happens here: a card that cannot be written is a warning."""
    from recipes_lib.tracking.model_card import write_card
    from recipes_workbench.recipes import recipe_summary

    try:
        write_card(results_dir, results, summary=recipe_summary(results.recipe))
    except (OSError, ValueError, KeyError) as error:
        logger.warning("The export passed, but the model card could not be rewritten with it: %s", error)


def _make_int8(model, tokenizer, staging: Path, weights: str, model_config) -> tuple[Int8Quantizer, dict]:
    """The int8 model (staging/model.int8.onnx), from the TorchScript trace with eager attention where
    there is one (onnx_model.export_for_int8), else from model.onnx; and its quantizer, kept for the
    sensitivity pass."""
    scratch = staging / ".scratch"
    scratch.mkdir(exist_ok=True)
    traced = scratch / "traced.onnx"
    source = traced if export_for_int8(model, tokenizer, traced) else staging / FP32_MODEL
    quantizer = Int8Quantizer(source, scratch / "int8", weights, model_config)
    recipe = quantizer.quantize(staging / INT8_MODEL)
    made_from = "TorchScript trace, eager attention" if source == traced else FP32_MODEL
    return quantizer, {**recipe, "made_from": made_from}


def _keep_sensitive_nodes(
    quantizer, staging, compared, recipe, rows, reference_logits, collator, batch_size, gate_of, passes
) -> dict:
    """The int8 model failed its gate: keep its most damaging nodes in fp32 until it passes (sensitivity.py).
    Updates compared["int8"] and returns the int8 record with the nodes kept and the ranking's head."""
    count = min(SENSITIVITY_ROWS, len(rows.encoded))
    head = rows.encoded.select(range(count))

    def logits_of(path: Path):
        return onnx_logits(onnx_session(path), head, collator, batch_size, progress=False)

    logger.info("The int8 model fails its gate: ranking its nodes by the damage their int8 does.")
    ranked = rank_nodes(quantizer, staging / ".scratch", logits_of, reference_logits[:count])
    every_node = compared["int8"]  # the gate figures with every node in int8, kept in the report
    result, kept_recipe = keep_sensitive_nodes(quantizer, staging / INT8_MODEL, ranked, gate_of, passes)
    if result is not None:
        compared["int8"] = result
        recipe = {**recipe, **kept_recipe}
    return {
        **recipe,
        "most_damaging": [{"node": node, "damage": damage} for node, damage in ranked[:MAX_KEPT]],
        "every_node_int8": every_node,
    }


def gate_latency(reference, files: dict[str, Path], encoded, input_names: list[str]) -> dict:
    """Batch-1 latency at one intra-op thread (the figure least moved by other work on the machine):
    PyTorch eager beside each exported model, interleaved on the gate's first LATENCY_ROWS rows."""
    import numpy as np

    rows = encoded.select(range(min(LATENCY_ROWS, len(encoded))))
    inputs = [{name: np.asarray([row[name]], dtype=np.int64) for name in input_names} for row in rows]
    engines = {
        "pytorch": lambda row: reference(**{name: torch.from_numpy(array) for name, array in row.items()})
    }
    for name, path in files.items():
        session = onnx_session(path, threads=1)
        engines[name] = lambda row, session=session: session_logits(session, row)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            figures = measure_latency(engines, inputs)
    finally:
        torch.set_num_threads(threads)
    return {"threads": 1, **figures}


def summary(outcome: ExportOutcome) -> str:
    """The report as a few lines for the terminal."""
    report = outcome.report
    lines = [f"Exported {report['exported']} ({report['exporter']} exporter) to {outcome.directory}",
             f"Gate on {report['rows_from']}:"]  # fmt: skip
    for name, result in report["models"].items():
        metric = result["metric"]
        lines.append(
            f"  {name:5} {result['file']:16} {result['size_bytes'] / 2**20:8.1f} MiB  agreement {100 * result['agreement']:6.2f}%"
            f"  {metric} {100 * result['onnx'][metric]:.2f} (PyTorch {100 * result['pytorch'][metric]:.2f}, "
            f"drop {result['metric_drop_points']:.2f} points)  largest logit difference {result['max_abs_logit_difference']:.2e}"
        )
    recipe = report.get("int8")
    if recipe:
        fused = ", ".join(f"{op} x{count}" for op, count in recipe["fused_operators"].items()) or "none"
        kept = ", ".join(recipe["nodes_kept_fp32"]) or "none"
        lines.append(
            f"int8: {recipe['weights']}; fused before quantizing: {fused}; nodes kept in fp32: {kept}"
        )
    latency = report.get("latency")
    if latency:
        medians = latency["median_ms"]
        times = [f"PyTorch {medians['pytorch']:.2f} ms"] + [
            f"{name} {ms:.2f} ms ({medians['pytorch'] / ms:.1f}x)"
            for name, ms in medians.items()
            if name != "pytorch"
        ]
        lines.append(
            f"Batch-1 latency, {latency['threads']} thread, median of {latency['rows']} rows taken in turn: "
            + ", ".join(times)
        )
    return "\n".join(lines)
