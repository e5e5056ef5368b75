"""Several runs side by side: `recipes-lib compare outputs/demo/full_ft outputs/demo/lora ...`.

Reads each run's results.json and prints one table (memory and what holds it, trainable
parameters, optimizer state, speed, accuracy), then draws one chart: a stacked bar per run of
weights / gradients / optimizer state / activations / other, with the run's accuracy marked, so
the memory-for-accuracy trade-off reads at a glance. `--markdown` prints the table as Markdown
(for a README or a W&B report).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recipes_lib.memory import BREAKDOWN_KEYS
from recipes_lib.results import RESULTS_FILE, read_results

CHART_FILE = "memory_comparison.png"
PART_LABELS = {
    "weights": "weights",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "activations": "activations (peak)",
    "other": "other (inputs, optimizer temporaries)",
}
# Colour-blind-safe (Okabe-Ito), one per breakdown part.
PART_COLOURS = {
    "weights": "#0072B2",
    "gradients": "#E69F00",
    "optimizer_state": "#009E73",
    "activations": "#CC79A7",
    "other": "#999999",
}


class CompareError(Exception):
    """A run directory without results.json: one line for the user, exit code 2."""


def load_runs(run_dirs: list[str]) -> list[dict[str, Any]]:
    runs = []
    for run_dir in run_dirs:
        path = Path(run_dir)
        if not (path / RESULTS_FILE).is_file() and not (path.is_file() and path.suffix == ".json"):
            raise CompareError(f"no {RESULTS_FILE} in '{run_dir}'; pass the output_dir of a finished run.")
        runs.append(read_results(path))
    return runs


def short_model_name(name: str | None) -> str:
    """The last part of a Hub id or path: 'all-MiniLM-L6-v2', not a site-packages path."""
    if not name:
        return "-"
    return Path(name.rstrip("/")).name or name


def _unit(runs: list[dict[str, Any]]) -> tuple[str, float]:
    """GiB, or MiB when every figure is under 1 GiB (a small model would read 0.00 GiB throughout)."""
    largest = max(
        [run.get("peak_memory_gib") or 0 for run in runs]
        + [value or 0 for run in runs for value in (run.get("memory_breakdown_gib") or {}).values()]
    )
    return ("GiB", 1.0) if largest >= 1 else ("MiB", 1024.0)


def _number(value: Any, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def table_columns(unit: str, scale: float) -> list[tuple[str, Callable[[dict[str, Any]], str]]]:
    def memory(key: str) -> Callable[[dict[str, Any]], str]:
        return lambda run: _number(None if run.get(key) is None else run[key] * scale, "{:.2f}")

    def part(key: str) -> Callable[[dict[str, Any]], str]:
        def cell(run: dict[str, Any]) -> str:
            value = (run.get("memory_breakdown_gib") or {}).get(key)
            return _number(None if value is None else value * scale, "{:.2f}")

        return cell

    def optimizer_state(run: dict[str, Any]) -> str:
        measured = run.get("optimizer_state_bytes")
        if measured is None:
            gib = (run.get("memory_breakdown_gib") or {}).get("optimizer_state")
            measured = None if gib is None else gib * 2**30
        return _number(None if measured is None else measured / 2**20, "{:.1f}")

    return [
        ("recipe", lambda run: str(run.get("recipe", "-"))),
        ("model", lambda run: short_model_name(run.get("model_name_or_path"))),
        (f"peak {unit}", memory("peak_memory_gib")),
        (f"tensor peak {unit}", memory("tensor_peak_gib")),
        *[(f"{PART_LABELS[key].split(' (')[0]} {unit}", part(key)) for key in BREAKDOWN_KEYS],
        ("trainable params", lambda run: _number(run.get("params_trainable"), "{:,}")),
        ("optimizer state MiB", optimizer_state),
        ("samples/s", lambda run: _number(run.get("train_samples_per_s"), "{:.1f}")),
        ("tokens/s", lambda run: _number(run.get("train_tokens_per_s"), "{:,.0f}")),
        ("accuracy", lambda run: _number(run.get("eval_accuracy"), "{:.4f}")),
        ("macro-F1", lambda run: _number(run.get("eval_f1"), "{:.4f}")),
        ("train s", lambda run: _number(run.get("train_runtime_s"), "{:.1f}")),
    ]


def format_table(header: list[str], rows: list[list[str]], markdown: bool = False) -> str:
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


def comparison_table(runs: list[dict[str, Any]], markdown: bool = False) -> str:
    unit, scale = _unit(runs)
    columns = table_columns(unit, scale)
    rows = [[cell(run) for _, cell in columns] for run in runs]
    return format_table([title for title, _ in columns], rows, markdown)


def table_notes(runs: list[dict[str, Any]]) -> list[str]:
    sources = sorted({run.get("peak_memory_source") for run in runs if run.get("peak_memory_source")})
    notes = [f"peak: {source}" for source in sources]
    notes.append(
        "tensor peak: all tensors at once during training; weights ... other: the peak of each kind over the "
        "training steps, measured on the tensors (they do not all peak together, so they add up to more)."
    )
    return notes


def _run_label(run: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    recipe = str(run.get("recipe", "?"))
    models = {run.get("model_name_or_path") for run in runs}
    return recipe if len(models) == 1 else f"{recipe}\n{short_model_name(run.get('model_name_or_path'))}"


def write_chart(runs: list[dict[str, Any]], path: str | os.PathLike) -> Path:
    """One stacked bar per run (where the memory went) and its accuracy on a second axis."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed (servers, CI)
    import matplotlib.pyplot as plt

    unit, scale = _unit(runs)
    labels = [_run_label(run, runs) for run in runs]
    positions = list(range(len(runs)))
    figure, memory_axis = plt.subplots(figsize=(max(6.0, 1.6 * len(runs) + 3), 5.2), layout="constrained")
    bottoms = [0.0] * len(runs)
    for key in BREAKDOWN_KEYS:
        heights = [((run.get("memory_breakdown_gib") or {}).get(key) or 0) * scale for run in runs]
        memory_axis.bar(
            positions, heights, 0.55, bottom=bottoms, color=PART_COLOURS[key], label=PART_LABELS[key]
        )
        bottoms = [bottom + height for bottom, height in zip(bottoms, heights, strict=True)]
    for position, total in zip(positions, bottoms, strict=True):
        memory_axis.annotate(
            f"{total:.2f}" if unit == "GiB" else f"{total:.0f}",
            (position, total),
            ha="center",
            va="bottom",
            fontsize=9,
            xytext=(0, 2),
            textcoords="offset points",
        )
    peaks = [(position, run.get("tensor_peak_gib")) for position, run in zip(positions, runs, strict=True)]
    peaks = [(position, peak * scale) for position, peak in peaks if peak is not None]
    if peaks:
        memory_axis.scatter(
            [p for p, _ in peaks],
            [v for _, v in peaks],
            marker="_",
            s=900,
            linewidths=2.5,
            color="black",
            zorder=3,
            label="all tensors at once (measured peak)",
        )
    memory_axis.set_ylabel(f"training memory, {unit} (peak of each kind)")
    memory_axis.set_xticks(positions, labels)
    memory_axis.set_ylim(0, max(bottoms + [v for _, v in peaks] + [1e-9]) * 1.25)
    memory_axis.spines[["top"]].set_visible(False)

    accuracy_axis = memory_axis.twinx()
    accuracies = [(position, run.get("eval_accuracy")) for position, run in zip(positions, runs, strict=True)]
    accuracies = [(position, value) for position, value in accuracies if value is not None]
    if accuracies:
        accuracy_axis.plot(
            [p for p, _ in accuracies],
            [v for _, v in accuracies],
            linestyle="none",
            marker="D",
            markersize=9,
            color="#D55E00",
            markeredgecolor="white",
            label="accuracy (right axis)",
            zorder=4,
        )
        for position, value in accuracies:
            accuracy_axis.annotate(
                f"{value:.3f}",
                (position, value),
                xytext=(10, -3),
                textcoords="offset points",
                color="#D55E00",
                fontsize=9,
                fontweight="bold",
            )
    accuracy_axis.set_ylim(0, 1.05)
    accuracy_axis.set_ylabel("validation accuracy", color="#D55E00")
    accuracy_axis.tick_params(axis="y", colors="#D55E00")
    accuracy_axis.spines[["top"]].set_visible(False)

    handles, names = memory_axis.get_legend_handles_labels()
    more_handles, more_names = accuracy_axis.get_legend_handles_labels()
    memory_axis.legend(
        handles[::-1] + more_handles, names[::-1] + more_names, loc="upper right", fontsize=8, framealpha=0.9
    )
    models = sorted({short_model_name(run.get("model_name_or_path")) for run in runs})
    devices = sorted({str(run.get("device", "")).split(" (")[0] for run in runs if run.get("device")})
    memory_axis.set_title(
        f"Memory and accuracy by recipe: {', '.join(models)}"
        + (f" ({', '.join(devices)})" if devices else ""),
        fontsize=11,
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def default_chart_path(run_dirs: list[str]) -> Path:
    """Next to the runs: in the directory that holds them all (outputs/demo/ for the demo's runs)."""
    parents = [str(Path(run_dir).resolve().parent if Path(run_dir).is_dir() else Path(run_dir).resolve().parent.parent)
               for run_dir in run_dirs]  # fmt: skip
    return Path(os.path.commonpath(parents)) / CHART_FILE


def compare(run_dirs: list[str], chart: str | None = None, markdown: bool = False, draw: bool = True) -> int:
    try:
        runs = load_runs(run_dirs)
    except CompareError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(comparison_table(runs, markdown))
    for note in table_notes(runs):
        print(f"{'- ' if markdown else ''}{note}")
    if draw:
        path = write_chart(runs, chart or default_chart_path(run_dirs))
        print(f"chart: {path}")
    return 0
