"""`recipes-lib show RUN...`: finished runs as one short table (no chart; `compare` has the long one)."""

from __future__ import annotations

from recipes_lib.units import short_model_name
from recipes_workbench.shared import format_table, print_error
from recipes_workbench.tools.compare import CompareError, load_runs, task_metric_columns
from recipes_workbench.tools.run_labels import named_columns, number_cell, run_names, windows_note

# (results.json key, column title, format)
SHOW_COLUMNS = (
    ("recipe", "recipe", "{}"),
    ("model_name_or_path", "model", "{}"),
    ("eval_accuracy", "accuracy", "{:.4f}"),
    ("eval_f1", "macro-F1", "{:.4f}"),
    ("params_trainable", "trainable params", "{:,}"),
    ("peak_memory_gib", "peak GiB", "{:.2f}"),
    ("train_samples_per_s", "samples/s", "{:.1f}"),
    ("train_tokens_per_s", "tokens/s", "{:.0f}"),
    ("pad_ratio", "pad ratio", "{:.2f}"),
    ("train_runtime_s", "train s", "{:.1f}"),
    ("device", "device", "{}"),
)


def show(run_dirs: list[str]) -> int:
    try:
        runs = load_runs(run_dirs)
    except CompareError as error:
        print_error(error)
        return 2
    memory_note = runs[-1].peak_memory_source
    cells = [
        (title, lambda run, key=key, fmt=fmt: number_cell(run.value(key), fmt))
        for key, title, fmt in SHOW_COLUMNS
    ]
    # The model by name (a local path's directory, or the one above a `model/` folder): the path is in results.json.
    cells[1] = ("model", lambda run: short_model_name(run.model_name_or_path))
    # Multi-label and regression runs add their metrics (micro-F1; MSE, Pearson, Spearman) after macro-F1.
    cells[4:4] = task_metric_columns(runs)
    cells = named_columns(cells, runs, run_dirs)
    print(format_table([title for title, _ in cells], [[cell(run) for _, cell in cells] for run in runs]))
    windows = windows_note(runs, run_names(run_dirs))
    if windows:
        print(windows)
    if memory_note:
        print(f"peak GiB: {memory_note}")
    return 0
