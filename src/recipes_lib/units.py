"""Units and names shared by every report: bytes per GiB, the memory breakdown's parts, short names."""

from __future__ import annotations

from pathlib import Path

GIB = 2**30
MIB = 2**20
# What held the training memory, as results.json's memory_breakdown_gib names it (memory/monitor.py measures
# it, memory/planner/ predicts it, tools/compare.py stacks it in this order, bottom of a bar first).
BREAKDOWN_KEYS = ("weights", "gradients", "optimizer_state", "activations", "other")


def short_model_name(name_or_path: str | None) -> str:
    """'sentence-transformers/all-MiniLM-L6-v2' -> 'all-MiniLM-L6-v2'; a local directory -> its name."""
    if not name_or_path:
        return "-"
    return Path(name_or_path.rstrip("/\\")).name or name_or_path
