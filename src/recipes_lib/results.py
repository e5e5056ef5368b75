"""results.json: one flat record per run, the same keys for every recipe, written atomically."""

from __future__ import annotations

import json
import math
import os
import platform
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipes_lib.whole_files import written_whole

if TYPE_CHECKING:
    import torch

RESULTS_FILE = "results.json"
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
    versions["python"] = platform.python_version()
    return versions


def describe_device(device: torch.device) -> str:
    # torch imported here, where a run (which has it loaded) asks: the workbench reads results.json
    # through this module (workbench.py) and its commands do not load torch (test_bitsandbytes_import).
    import torch

    if device.type == "cuda":
        return f"cuda:{device.index or 0} ({torch.cuda.get_device_name(device)})"
    return f"{device.type} ({torch.get_num_threads()} threads, {platform.processor() or platform.machine()})"


def write_results(output_dir: str | os.PathLike, results: dict[str, Any]) -> Path:
    """Write results.json whole or not at all (whole_files.written_whole): a crash never leaves half a file."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    target = output_dir / RESULTS_FILE
    with written_whole(target) as handle:
        # NaN is not JSON (jq and browsers refuse it): an undefined metric, such as the correlation of
        # constant predictions, is written as null.
        json.dump(_finite(results), handle, indent=2, sort_keys=False, default=str, allow_nan=False)
        handle.write("\n")
    return target


def _finite(value):
    """The record with every NaN or infinite float replaced by None, at any depth."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def timestamp() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
