"""Several runs side by side: `recipes-lib compare outputs/demo/full_ft outputs/demo/lora ...` (docs/memory.md,
"Compare runs"): a table, a chart, the repeats of one setting grouped (`setting_key`), and how the runs'
evaluation sets differ where they do (`evaluation_sets`); `--wandb` logs them to W&B (compare_wandb.py).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION
from recipes_lib.results import RESULTS_FILE, RunResults, read_results
from recipes_lib.tracking.names import METRIC_TITLES, eval_key
from recipes_lib.units import BREAKDOWN_KEYS, GIB, short_model_name
from recipes_workbench.shared import OTHER_TASK_METRICS, format_table, print_error
from recipes_workbench.tools.run_labels import (
    alike,
    named_columns,
    number_cell,
    run_dir_of,
    run_names,
    shorten,
    windows_note,
)

CHART_FILE = "memory_comparison.png"
TENSOR_PEAK_NOTE = (
    "tensor peak: all tensors at once during training; weights ... other: the peak of each kind over the "
    "training steps, measured on the tensors (they do not all peak together, so they add up to more)."
)
# The columns of multi-label and regression metrics (micro-F1, MSE, ...) that `compare` and `show` add
# when a run has them: (results.json key, title). Last, binary tasks' positive-class F1 (label id 1), as
# paraphrase benchmarks report it beside accuracy.
TASK_METRIC_COLUMNS = (
    *((eval_key(metric), METRIC_TITLES[metric]) for metric in OTHER_TASK_METRICS),
    ("eval_f1_positive", "positive F1"),
)
# Each breakdown part's (chart legend, table column, colour): colour-blind-safe Okabe-Ito colours.
PARTS = {
    "weights": ("weights", "weights", "#0072B2"),
    "gradients": ("gradients", "gradients", "#E69F00"),
    "optimizer_state": ("optimizer state", "optimizer", "#009E73"),
    "activations": ("activations", "activations", "#CC79A7"),
    "other": ("other (inputs, optimizer temporaries)", "other", "#999999"),
}


class CompareError(Exception):
    """A run directory without results.json: one line for the user, exit code 2."""


def load_runs(run_dirs: list[str]) -> list[RunResults]:
    runs = []
    for run_dir in run_dirs:
        path = Path(run_dir)
        if not (path / RESULTS_FILE).is_file() and not (path.is_file() and path.suffix == ".json"):
            raise CompareError(f"no {RESULTS_FILE} in '{run_dir}'; pass the output_dir of a finished run.")
        runs.append(read_results(path))
    return runs


def _unit(runs: list[RunResults]) -> tuple[str, float]:
    """GiB, or MiB when every tensor figure is under 1 GiB (a small model would read 0.0x GiB)."""
    largest = max(
        [run.tensor_peak_gib or 0 for run in runs]
        + [value or 0 for run in runs for value in (run.memory_breakdown_gib or {}).values()]
    )
    return ("GiB", 1.0) if largest >= 1 else ("MiB", 1024.0)


def table_columns(unit: str, scale: float) -> list[tuple[str, Callable[[RunResults], str]]]:
    def scaled(read: Callable[[RunResults], float | None]) -> Callable[[RunResults], str]:
        return lambda run: number_cell(None if read(run) is None else read(run) * scale, "{:.2f}")

    def part(key: str) -> Callable[[RunResults], str]:
        return scaled(lambda run: (run.memory_breakdown_gib or {}).get(key))

    def optimizer_state_bytes(run: RunResults) -> str:
        measured = run.optimizer_state_bytes
        if measured is None:  # a results.json without the key: the breakdown's figure, in bytes
            gib = (run.memory_breakdown_gib or {}).get("optimizer_state")
            measured = None if gib is None else round(gib * GIB)
        return number_cell(measured, "{:,}")

    return [
        ("recipe", lambda run: str(run.recipe or "-")),
        ("model", lambda run: short_model_name(run.model_name_or_path)),
        ("peak GiB", lambda run: number_cell(run.peak_memory_gib, "{:.2f}")),
        (f"tensor peak {unit}", scaled(lambda run: run.tensor_peak_gib)),
        *[(f"{PARTS[key][1]} {unit}", part(key)) for key in BREAKDOWN_KEYS],
        ("trainable params", lambda run: number_cell(run.params_trainable, "{:,}")),
        ("optimizer state bytes", optimizer_state_bytes),
        ("samples/s", lambda run: number_cell(run.train_samples_per_s, "{:.1f}")),
        ("tokens/s", lambda run: number_cell(run.train_tokens_per_s, "{:,.0f}")),
        ("accuracy", lambda run: number_cell(run.eval_accuracy, "{:.4f}")),
        ("macro-F1", lambda run: number_cell(run.eval_f1, "{:.4f}")),
        ("train s", lambda run: number_cell(run.train_runtime_s, "{:.1f}")),
    ]


def task_metric_columns(runs: list[RunResults]) -> list[tuple[str, Callable[[RunResults], str]]]:
    """Multi-label's micro-F1, regression's MSE, Pearson and Spearman: a column where a run has the metric."""
    return [
        (title, lambda run, key=key: number_cell(run.value(key), "{:.4f}"))
        for key, title in TASK_METRIC_COLUMNS
        if any(run.value(key) is not None for run in runs)
    ]


def comparison_table(runs: list[RunResults], run_dirs: list[str], markdown: bool = False) -> str:
    """The table of `runs`, read from `run_dirs` (which name the runs when their settings look alike)."""
    unit, scale = _unit(runs)
    columns = named_columns(table_columns(unit, scale) + task_metric_columns(runs), runs, run_dirs)
    sets = evaluation_sets(runs)
    if len(sets) > 1:  # mark which set each run was scored on; the note under the table says how they differ
        set_of = {id(run): name for name, members in sets.items() for run in members}
        columns.append(("eval set", lambda run: set_of[id(run)]))
    rows = [[cell(run) for _, cell in columns] for run in runs]
    return format_table([title for title, _ in columns], rows, markdown)


# --- what each run was scored on ---------------------------------------------------------------------

# How a run's evaluation set is told apart, from what results.json records of it, and how to name
# each part in the note. A part a run does not record (an older results.json) does not count as a
# difference. No content fingerprint is recorded: a file edited in place between runs goes unseen.
EVALUATION_PARTS = ("data", "validation", "rows", "task", "labels", "held-out seed")


def evaluation_set(run: RunResults) -> dict[str, Any]:
    """What a run's validation metrics were computed on, part by part (EVALUATION_PARTS)."""
    config = run.config or {}
    confusion = run.confusion_matrix or {}
    labels = confusion.get("labels") or list(run.per_class or {}) or None
    held_out = "held out" in str(run.eval_split or "")
    return {
        # The Hub dataset, or the training file rows were held out of; a validation file of its own makes
        # the training file no part of the set (a cleaned train.csv scored on the same dev.csv compares).
        "data": None if config.get("validation_file") else run.dataset,
        # The file's path as given (eval_split keeps only its name), else the Hub split or "10% of train".
        "validation": config.get("validation_file") or run.eval_split,
        "rows": run.eval_samples,
        "task": run.problem_type,
        "labels": ", ".join(map(str, labels)) if labels else None,
        # Held-out rows are drawn from train with the run's seed: another seed, other rows.
        "held-out seed": config.get("seed") if held_out else None,
    }


def evaluation_sets(runs: list[RunResults]) -> dict[str, list[RunResults]]:
    """The runs grouped by the set they were evaluated on (no part both record differs), A, B, ... in order."""
    sets: list[tuple[dict[str, Any], list[RunResults]]] = []
    for run in runs:
        parts = evaluation_set(run)
        for known, members in sets:
            if all(known[key] is None or parts[key] is None or known[key] == parts[key] for key in parts):
                members.append(run)
                for key, value in parts.items():  # fill in what the first run did not record
                    known[key] = known[key] if known[key] is not None else value
                break
        else:
            sets.append((parts, [run]))
    return {chr(ord("A") + i) if i < 26 else f"S{i + 1}": members for i, (_, members) in enumerate(sets)}


def evaluation_note(runs: list[RunResults], names: list[str]) -> str | None:
    """One line naming the runs of each evaluation set and what differs between the sets; None when all
    were evaluated on the same set."""
    sets = evaluation_sets(runs)
    if len(sets) < 2:
        return None
    name_of = {id(run): name for run, name in zip(runs, names, strict=True)}
    described = {name: evaluation_set(members[0]) for name, members in sets.items()}
    differences = []
    for key in EVALUATION_PARTS:
        values = {name: parts[key] for name, parts in described.items() if parts[key] is not None}
        if len(set(map(str, values.values()))) > 1:
            differences.append(
                f"{key} " + " vs ".join(f"{name} {shorten(str(value), 60)}" for name, value in values.items())
            )
    members = "; ".join(
        f"{name} = {', '.join(name_of[id(run)] for run in group)}" for name, group in sets.items()
    )
    return (
        f"Not evaluated on the same set (eval set column: {members}): {'; '.join(differences)}. "
        "Their scores are not like for like; compare runs of one set."
    )


def _chart_metric(runs: list[RunResults]) -> tuple[str, str]:
    """The score the chart marks: accuracy (multi-label: exact match), or Pearson when every run is regression."""
    if runs and all(run.problem_type == REGRESSION for run in runs):
        return eval_key("pearson"), "Pearson"
    if runs and all(run.problem_type == MULTI_LABEL for run in runs):
        return eval_key("accuracy"), "exact match"
    return eval_key("accuracy"), "accuracy"


def write_chart(runs: list[RunResults], path: str | os.PathLike, names: list[str] | None = None) -> Path:
    """Top: one stacked bar per run (where the training memory went). Below it, in the same
    column: the run's accuracy. Reading down a column gives the trade-off. `names`: each run's label
    (else its recipe, and its model where the models differ)."""
    # matplotlib is imported only when a chart is drawn (a heavy import).
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed (servers, CI)
    import matplotlib.pyplot as plt

    unit, scale = _unit(runs)
    positions = list(range(len(runs)))
    figure, (memory_axis, accuracy_axis) = plt.subplots(
        2,
        1,
        sharex=True,
        figsize=(max(6.5, 1.5 * len(runs) + 4.5), 6.2),
        gridspec_kw={"height_ratios": [3, 1]},
        layout="constrained",
    )
    totals = _draw_memory_bars(memory_axis, runs, positions, unit, scale)
    peaks = _mark_tensor_peaks(memory_axis, runs, positions, scale)
    _label_memory_axis(memory_axis, unit, totals, peaks)
    _draw_accuracy(accuracy_axis, runs, positions, names)
    _set_title(memory_axis, runs)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def _draw_memory_bars(
    memory_axis, runs: list[RunResults], positions: list[int], unit: str, scale: float
) -> list[float]:
    """One bar per run, its breakdown parts stacked, its total written on top; returns the totals."""
    bottoms = [0.0] * len(runs)
    for key in BREAKDOWN_KEYS:
        heights = [((run.memory_breakdown_gib or {}).get(key) or 0) * scale for run in runs]
        legend, _, colour = PARTS[key]
        memory_axis.bar(positions, heights, 0.55, bottom=bottoms, color=colour, label=legend)
        bottoms = [bottom + height for bottom, height in zip(bottoms, heights, strict=True)]
    number = "{:.2f}" if unit == "GiB" else "{:.0f}"
    for position, total in zip(positions, bottoms, strict=True):
        memory_axis.annotate(
            number.format(total),
            (position, total),
            ha="center",
            va="bottom",
            xytext=(0, 3),
            textcoords="offset points",
        )
    return bottoms


def _mark_tensor_peaks(
    memory_axis, runs: list[RunResults], positions: list[int], scale: float
) -> list[tuple[int, float]]:
    """A black tick at each run's measured all-tensors peak, where it has one; returns (position, value)s."""
    peaks = [(position, run.tensor_peak_gib) for position, run in zip(positions, runs, strict=True)]
    peaks = [(position, peak * scale) for position, peak in peaks if peak is not None]
    if peaks:
        memory_axis.scatter(
            [position for position, _ in peaks],
            [value for _, value in peaks],
            marker="_",
            s=1400,
            linewidths=2.5,
            color="black",
            zorder=3,
            label="all tensors at once\n(measured peak)",
        )
    return peaks


def _label_memory_axis(memory_axis, unit: str, totals: list[float], peaks: list[tuple[int, float]]) -> None:
    """The memory axis's label, range and legend (the parts in stacking order, the peak marker last)."""
    memory_axis.set_ylabel(f"training memory, {unit}")
    memory_axis.set_ylim(0, max(totals + [value for _, value in peaks] + [1e-9]) * 1.15)
    memory_axis.spines[["top", "right"]].set_visible(False)
    handles, names = memory_axis.get_legend_handles_labels()
    # Legend top to bottom in the order the parts stack (top part first), the peak marker last.
    legends = [PARTS[key][0] for key in reversed(BREAKDOWN_KEYS)]
    order = [names.index(legend) for legend in legends] + [
        index for index, name in enumerate(names) if name not in legends
    ]
    memory_axis.legend(
        [handles[i] for i in order],
        [names[i] for i in order],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=8,
        frameon=False,
        title="peak of each kind",
        title_fontsize=8,
        markerscale=0.35,  # the peak marker is a wide bar-width tick; a short one in the legend
    )


def _draw_accuracy(accuracy_axis, runs: list[RunResults], positions: list[int], names=None) -> None:
    """Each run's validation score (accuracy, exact match or Pearson) under its bar, and the run labels."""
    metric_key, metric_label = _chart_metric(runs)
    accuracies = [run.value(metric_key) for run in runs]
    known = [
        (position, value) for position, value in zip(positions, accuracies, strict=True) if value is not None
    ]
    accuracy_axis.scatter(
        [p for p, _ in known], [v for _, v in known], marker="D", s=60, color="#D55E00", zorder=3
    )
    for position, value in known:
        accuracy_axis.annotate(
            f"{value:.3f}", (position, value), xytext=(9, -4), textcoords="offset points", color="#D55E00"
        )
    if known:
        low, high = min(v for _, v in known), max(v for _, v in known)
        margin = max(0.02, (high - low) * 0.35)
        accuracy_axis.set_ylim(max(-1.0, low - margin), min(1.0, high + margin) + 0.005)
    accuracy_axis.set_ylabel(f"validation\n{metric_label}", color="#D55E00")
    accuracy_axis.tick_params(axis="y", colors="#D55E00")
    accuracy_axis.grid(axis="y", alpha=0.3)
    accuracy_axis.spines[["top", "right"]].set_visible(False)
    # Each run's recipe (and model, where they differ); `names` where those do not tell the runs apart.
    models = {run.model_name_or_path for run in runs}
    labels = names or [
        f"{run.recipe or '?'}" + ("" if len(models) == 1 else f"\n{short_model_name(run.model_name_or_path)}")
        for run in runs
    ]
    accuracy_axis.set_xticks(positions, labels)
    accuracy_axis.set_xlim(-0.6, len(runs) - 0.4)


def _set_title(memory_axis, runs: list[RunResults]) -> None:
    """The chart's title: the models compared, and the devices they ran on."""
    models = sorted({short_model_name(run.model_name_or_path) for run in runs})
    devices = sorted({str(run.device or "").split(" (")[0] for run in runs if run.device})
    memory_axis.set_title(
        f"Training memory and accuracy by recipe: {', '.join(models)}"
        + (f" ({', '.join(devices)})" if devices else ""),
        fontsize=11,
    )


def runs_home(run_dirs: list[str]) -> Path:
    """The directory that holds all the runs (outputs/demo/ for the demo's runs): what compare writes
    goes there, beside the runs, not into the directory the command runs from."""
    return Path(os.path.commonpath([str(run_dir_of(run_dir).resolve().parent) for run_dir in run_dirs]))


# --- repeats of one setting: the same run but for its seed ------------------------------------------

# Options of the resolved config that do not change what a run computes, besides its seeds: where it
# writes and how it is named and logged. Runs equal in every other option are repeats of one setting.
NOT_THE_SETTING = frozenset({
    "seed", "data_seed",
    "output_dir", "logging_dir", "overwrite_output_dir", "resume_from_checkpoint", "config_file",
    "run_name", "experiment", "wandb_project", "wandb_tags", "project", "report_to", "disable_tqdm",
})  # fmt: skip
REPEAT_METRICS = (("eval_accuracy", "accuracy"), ("eval_f1", "macro-F1"))


def setting_key(run: RunResults) -> str:
    """What a run computed, but its seed and where it wrote: the recipe and every other resolved option."""
    config = {key: value for key, value in (run.config or {}).items() if key not in NOT_THE_SETTING}
    return json.dumps({"recipe": run.recipe, **config}, sort_keys=True, default=str)


def group_repeats(runs: list[RunResults]) -> list[list[RunResults]]:
    """The runs grouped by setting (setting_key), groups in the order of their first run."""
    groups: dict[str, list[RunResults]] = {}
    for run in runs:
        groups.setdefault(setting_key(run), []).append(run)
    return list(groups.values())


def _mean_std(values: list[float], fmt: str = "{:.4f}") -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.fmean(values))} ± {fmt.format(statistics.stdev(values))}"


def repeats_table(groups: list[list[RunResults]], markdown: bool = False) -> str:
    """One row per setting: its runs and seeds, then mean ± sample std (n - 1) of each figure over them."""
    metrics = [(key, title) for key, title in (*REPEAT_METRICS, *TASK_METRIC_COLUMNS)
               if any(run.value(key) is not None for group in groups for run in group)]  # fmt: skip
    header = [
        "recipe",
        "model",
        "lr",
        "runs",
        "seeds",
        *(title for _, title in metrics),
        "peak GiB",
        "train s",
    ]
    rows = []
    for group in groups:
        config = group[0].config or {}
        rows.append([
            str(group[0].recipe or "-"), short_model_name(group[0].model_name_or_path),
            number_cell(config.get("learning_rate"), "{:g}"), str(len(group)),
            ", ".join(str((run.config or {}).get("seed", "-")) for run in group),
            *(_mean_std([run.value(key) for run in group if run.value(key) is not None]) for key, _ in metrics),
            _mean_std([run.peak_memory_gib for run in group if run.peak_memory_gib is not None], "{:.2f}"),
            _mean_std([run.train_runtime_s for run in group if run.train_runtime_s is not None], "{:.1f}"),
        ])  # fmt: skip
    return format_table(header, rows, markdown)


def compare(run_dirs: list[str], chart: str | None = None, markdown: bool = False, draw: bool = True) -> int:
    try:
        runs = load_runs(run_dirs)
    except CompareError as error:
        print_error(error)
        return 2
    print(comparison_table(runs, run_dirs, markdown))
    peaks = sorted({f"peak: {run.peak_memory_source}" for run in runs if run.peak_memory_source})
    notes = [evaluation_note(runs, run_names(run_dirs)), windows_note(runs, run_names(run_dirs))]
    for note in [*notes, *peaks, TENSOR_PEAK_NOTE]:
        if note:
            print(f"{'- ' if markdown else ''}{note}")
    groups = group_repeats(runs)
    if len(groups) < len(runs):
        print()
        print(f"Repeats of the same setting (every option equal but the seed and output_dir): {len(groups)} settings, "
              "mean ± std (sample standard deviation) over their runs")  # fmt: skip
        print(repeats_table(groups, markdown))
    if draw:
        names = run_names(run_dirs) if alike(runs) else None
        path = write_chart(runs, chart or runs_home(run_dirs) / CHART_FILE, names)
        print(f"chart: {path}")
    return 0
