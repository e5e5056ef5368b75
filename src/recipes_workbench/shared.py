"""What the workbench (the planner, sweep, crossval, tools, the dashboard and the command line) shares
and a recipe run never loads: tables for the terminal or Markdown, mean ± std, names and colours."""

from __future__ import annotations

import statistics
import sys

from recipes_lib.credentials import redact
from recipes_workbench.recipes import RECIPES

# What `recipes-lib crossval` writes in its output_dir instead (the sweep reads it when `folds` is set).
CROSSVAL_RESULTS_FILE = "crossval_results.json"


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


def mean_and_std(values: list[float]) -> dict[str, float | None]:
    """Mean and sample standard deviation (n - 1); no spread from one value (a fold, a seed)."""
    if not values:
        return {"mean": None, "std": None}
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else None}


# The metrics of multi-label and regression runs besides accuracy and macro-F1: columns of `show` and
# `compare` when a run has them, and a dashboard section of their own.
OTHER_TASK_METRICS = ("f1_micro", "mse", "pearson", "spearman")

# Okabe-Ito (colour-blind safe), one per recipe in the order of recipes/: the W&B view's groups and the
# sweep's chart colour each recipe alike.
RECIPE_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442", "#000000")


def recipe_colours() -> dict[str, str]:
    """{recipe: colour}, one per recipe script of recipes/ (a script's name is its SPEC's name)."""
    return {name: RECIPE_COLOURS[i % len(RECIPE_COLOURS)] for i, name in enumerate(RECIPES)}


def print_error(error: object) -> None:
    """`error: MESSAGE` on stderr, redacted: how every command prints its bad input (one place, so none skips it)."""
    print(redact(f"error: {error}"), file=sys.stderr)
