"""The model card's "ONNX export" section: the gate figures of a passed `recipes-lib export`, from the
report it keeps in output_dir (model_card.EXPORT_REPORT); loaded only when a run has one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recipes_lib.whole_files import read_json


def export_values(path: Path) -> dict[str, Any] | None:
    """The template's `export`: the figures of the gate report at `path`, each already worded; None
    unless the export passed."""
    report = read_json(path, "the export's gate report", "Run `recipes-lib export` on the run again.")
    if not (report.get("passed") and report.get("models")):
        return None
    int8_weights = report.get("int8_weights")
    rows = [
        {
            "name": f"{name} ({int8_weights} weights)" if name == "int8" and int8_weights else name,
            "file": model["file"],
            "size": f"{model['size_bytes'] / 2**20:.1f} MiB",
            "agreement": f"{100 * model['agreement']:.2f}% of {model['rows']}",
            "metric": model["metric"],
            "onnx": f"{model['onnx'][model['metric']]:.4f}",
            "pytorch": f"{model['pytorch'][model['metric']]:.4f}",
            "drop": f"{model['metric_drop_points']:.2f}",
            "logit": f"{model['max_abs_logit_difference']:.1e}",
        }
        for name, model in report["models"].items()
    ]
    return {
        "exporter": report.get("exporter"),
        "exported": report.get("exported"),
        "rows_from": report.get("rows_from"),
        "max_drop": report.get("max_metric_drop_points"),
        "min_agreement": f"{100 * report.get('min_fp32_agreement', 0):g}%",
        "rows": rows,
    }
