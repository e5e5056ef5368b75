"""`recipes-lib export`: the parser and the dispatch; the work is in recipes_workbench.export."""

from __future__ import annotations

import sys

from recipes_workbench.export import (
    DEFAULT_MAX_METRIC_DROP,
    MIN_FP32_AGREEMENT,
    MIN_INT8_AGREEMENT,
    MIN_INT8_SPEEDUP,
)


def add_export_parser(commands) -> None:
    parser = commands.add_parser(
        "export",
        help="Export a finished run to ONNX (optionally int8), checked against the PyTorch model before it is kept.",
        description="Export the model of a finished run (full model, LoRA or QLoRA adapter, merged first) to "
        "OUTPUT_DIR/export/model.onnx with dynamic batch and sequence axes, with its tokenizer, label names, "
        "thresholds and long-text settings; --quantize int8 adds ONNX Runtime's dynamic int8 model. Every "
        "exported model is run on the run's validation split (or --eval_file) beside the PyTorch model: "
        f"when one loses more than --max_metric_drop points, the fp32 model agrees on under "
        f"{100 * MIN_FP32_AGREEMENT:g}% of the rows, the int8 one on under --min_int8_agreement, or the int8 one "
        "is not faster than fp32 at batch 1, the command exits 1 and leaves the files in "
        "OUTPUT_DIR/export.failed/ (an earlier export/ is kept). Needs the 'export' extra.",
    )
    parser.add_argument("run_dir", help="the output_dir of a finished run (or its merged/ subdirectory)")
    parser.add_argument("--quantize", choices=["int8"], help="also write model.int8.onnx (dynamic int8)")
    parser.add_argument(
        "--eval_file", help="labelled held-out rows for the gate (default: the run's validation split)"
    )
    parser.add_argument(
        "--max_metric_drop",
        type=float,
        default=DEFAULT_MAX_METRIC_DROP,
        help=f"points of accuracy (regression: Pearson x100) an export may lose (default {DEFAULT_MAX_METRIC_DROP})",
    )
    parser.add_argument(
        "--int8_weights",
        choices=["signed", "unsigned"],
        default="signed",
        help="with --quantize int8: int8 weights (ONNX Runtime's default) or uint8 ones, its documented "
        "fallback when int8 weights lose accuracy (docs/export.md)",
    )
    parser.add_argument(
        "--min_int8_agreement",
        type=float,
        default=MIN_INT8_AGREEMENT,
        help=f"share of rows on which the int8 model must predict as PyTorch does (default {MIN_INT8_AGREEMENT})",
    )
    parser.add_argument(
        "--min_int8_speedup",
        type=float,
        default=MIN_INT8_SPEEDUP,
        help=f"how many times faster than fp32 the int8 model must be at batch 1 (default {MIN_INT8_SPEEDUP:g}: "
        "faster at all; 0: not checked)",
    )
    parser.add_argument("--batch_size", type=int, default=32, help="rows per batch in the gate (default 32)")


def log_notes_to_stderr() -> None:
    """Both packages' notes (INFO) on stderr; only warnings of the libraries below (onnxscript logs hundreds)."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    for package in ("recipes_lib", "recipes_workbench"):  # the export modules log under the workbench's name
        logging.getLogger(package).setLevel(logging.INFO)


def export_command(args) -> int:
    log_notes_to_stderr()
    try:
        from recipes_workbench.export.command import export_run, summary

        options = {key: value for key, value in vars(args).items() if key not in ("command", "run_dir")}
        outcome = export_run(args.run_dir, **options)
    except ImportError as error:
        print(f"error: export needs onnx, onnxscript and onnxruntime ({error}); pip install 'recipes-lib[export]'.",
              file=sys.stderr)  # fmt: skip
        return 2
    print(summary(outcome))
    if not outcome.passed:
        print(
            f"error: the export failed its quality gate: {'; and '.join(outcome.failures)}. The files are in "
            f"{outcome.directory} for inspection, not in export/; nothing there is meant to be deployed.",
            file=sys.stderr,
        )
        if outcome.report["models"].get("int8") is not None and all("int8" in f for f in outcome.failures):
            print("The fp32 export alone passed: drop --quantize to keep it.", file=sys.stderr)
        return 1
    return 0
