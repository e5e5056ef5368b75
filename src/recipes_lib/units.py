"""Units and names shared by every report: bytes per GiB, the memory breakdown's parts, tables, short names."""

from __future__ import annotations

from pathlib import Path

GIB = 2**30
MIB = 2**20
# What held the training memory, as results.json's memory_breakdown_gib names it (memory/monitor.py measures
# it, memory/planner/ predicts it, tools/compare.py stacks it in this order, bottom of a bar first).
BREAKDOWN_KEYS = ("weights", "gradients", "optimizer_state", "activations", "other")


def format_table(header: list[str], rows: list[list[str]], markdown: bool = False) -> str:
    """Columns padded to their widest cell under a dashed rule, or a Markdown table."""
    header = [str(cell) for cell in header]
    rows = [[str(cell) for cell in row] for row in rows]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        for line in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def short_model_name(name_or_path: str | None) -> str:
    """'sentence-transformers/all-MiniLM-L6-v2' -> 'all-MiniLM-L6-v2'; a local directory -> its name."""
    if not name_or_path:
        return "-"
    return Path(name_or_path.rstrip("/\\")).name or name_or_path
