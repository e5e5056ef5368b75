"""The model card's "ONNX export" section: the gate figures of a passed `recipes-lib export`, from the
report it keeps in output_dir (model_card.EXPORT_REPORT); loaded only when a run has one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recipes_lib.tracking.model_card import EXPORT_REPORT
from recipes_lib.whole_files import read_json


def read_export_report(output_dir: str | Path) -> dict[str, Any] | None:
    """The passed export's report in output_dir, or None (no export, or a report that did not pass)."""
    path = Path(output_dir).joinpath(*EXPORT_REPORT)
    if not path.is_file():
        return None
    report = read_json(path, "the export's gate report", "Run `recipes-lib export` on the run again.")
    return report if report.get("passed") and report.get("models") else None


def export_values(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """The template's `export`: the report's figures, each already worded."""
    if report is None:
        return None
    rows = []
    int8_weights = report.get("int8_weights")
    for name, model in report["models"].items():
        metric = model["metric"]
        rows.append(
            {
                "name": f"{name} ({int8_weights} weights)" if name == "int8" and int8_weights else name,
                "file": model["file"],
                "size": f"{model['size_bytes'] / 2**20:.1f} MiB",
                "agreement": f"{100 * model['agreement']:.2f}% of {model['rows']}",
                "metric": metric,
                "onnx": f"{model['onnx'][metric]:.4f}",
                "pytorch": f"{model['pytorch'][metric]:.4f}",
                "drop": f"{model['metric_drop_points']:.2f}",
                "logit": f"{model['max_abs_logit_difference']:.1e}",
            }
        )
    return {
        "exporter": report.get("exporter"),
        "exported": report.get("exported"),
        "rows_from": report.get("rows_from"),
        "max_drop": report.get("max_metric_drop_points"),
        "min_agreement": f"{100 * report.get('min_fp32_agreement', 0):g}%",
        "rows": rows,
    }
