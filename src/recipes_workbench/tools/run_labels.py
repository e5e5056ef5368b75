"""What tells finished runs apart in `compare` and `show`, and what their speed and loss count.

Runs of one recipe and model (the three `--long_text` modes of `make long-text-demo`, a sweep's trials)
are alike in both columns: each is then named by its output directory and by the options whose values
differ between the runs. Under `--long_text sliding_window` a training row is a window, so samples/s and
tokens/s count windows and eval_loss averages over windows: a documents-per-second figure stands beside
them, and a note says what the loss averages.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recipes_lib.results import RunResults
from recipes_lib.units import short_model_name

# Options that say where a run wrote and how it is logged, or that have a column of their own (the model).
NOT_A_DIFFERENCE = frozenset({
    "output_dir", "logging_dir", "overwrite_output_dir", "resume_from_checkpoint", "config_file",
    "run_name", "experiment", "wandb_project", "wandb_tags", "project", "report_to", "disable_tqdm",
    "model_name_or_path",
})  # fmt: skip
SLIDING_WINDOW = "sliding_window"  # data/long_text.py's mode whose rows are windows
WIDEST_DIFFERENCES = 60  # characters of the "differs" cell; the rest is cut with "..."


def run_dir_of(run_dir: str) -> Path:
    """The run's directory, whether it was given as the directory or as its results.json."""
    return Path(run_dir) if Path(run_dir).is_dir() else Path(run_dir).parent


def run_names(run_dirs: list[str]) -> list[str]:
    """Each run's directory name (its path when two share a name)."""
    names = [run_dir_of(run_dir).name for run_dir in run_dirs]
    return names if len(set(names)) == len(names) else [str(run_dir) for run_dir in run_dirs]


def shorten(text: str, width: int) -> str:
    """A long value (a hundred label names, many options) cut to a width its cell or line can carry."""
    return text if len(text) <= width else text[: width - 3] + "..."


def number_cell(value: Any, fmt: str) -> str:
    """A table cell: the number as `fmt` writes it, "-" where the run has none (compare and show)."""
    return "-" if value is None else fmt.format(value)


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def differing_options(runs: list[RunResults]) -> list[str]:
    """The resolved options (results.json's config) whose values are not the same in every run."""
    configs = [run.config or {} for run in runs]
    keys = dict.fromkeys(key for config in configs for key in config if key not in NOT_A_DIFFERENCE)
    return [key for key in keys if len({_value(config.get(key)) for config in configs}) > 1]


def alike(runs: list[RunResults]) -> bool:
    """Whether the recipe and model columns leave two runs looking the same."""
    shown = {(run.recipe, short_model_name(run.model_name_or_path)) for run in runs}
    return len(shown) < len(runs)


def naming_columns(
    runs: list[RunResults], run_dirs: list[str]
) -> list[tuple[str, Callable[[RunResults], str]]]:
    """`run` (the output directory) and `differs` (each run's values of the differing options), first in the
    table, when the recipe and model do not tell the runs apart; else none."""
    if not alike(runs):
        return []
    name_of = {id(run): name for run, name in zip(runs, run_names(run_dirs), strict=True)}
    columns: list[tuple[str, Callable[[RunResults], str]]] = [("run", lambda run: name_of[id(run)])]
    options = differing_options(runs)
    if options:

        def differences(run: RunResults) -> str:
            config = run.config or {}
            return shorten(
                " ".join(f"{key}={_value(config.get(key))}" for key in options), WIDEST_DIFFERENCES
            )

        columns.append(("differs", differences))
    return columns


def named_columns(
    columns: list[tuple[str, Callable[[RunResults], str]]], runs: list[RunResults], run_dirs: list[str]
) -> list[tuple[str, Callable[[RunResults], str]]]:
    """A table's `columns` (compare's, show's) with docs/s beside samples/s where a run counts windows,
    and the naming columns first."""
    if any(windowed(run) for run in runs):
        speed = [title for title, _ in columns].index("samples/s") + 1
        columns.insert(speed, ("docs/s", lambda run: number_cell(documents_per_second(run), "{:.1f}")))
    return naming_columns(runs, run_dirs) + columns


def windowed(run: RunResults) -> bool:
    return (run.config or {}).get("long_text") == SLIDING_WINDOW


def documents_per_second(run: RunResults) -> float | None:
    """Training documents a second: samples/s counts training rows, windows under sliding_window."""
    train = (run.truncation or {}).get("train") or {}
    if run.train_samples_per_s is None or not train.get("rows") or not train.get("examples"):
        return run.train_samples_per_s
    return run.train_samples_per_s * train["examples"] / train["rows"]


def windows_note(runs: list[RunResults], names: list[str]) -> str | None:
    """One line saying what a sliding_window run's speed and eval_loss count; None without such a run."""
    described = []
    for run, name in zip(runs, names, strict=True):
        if windowed(run):
            splits = run.truncation or {}
            counts = [
                f"{split} {splits[split]['rows']:,} windows of {splits[split]['examples']:,} documents"
                for split in ("train", "validation")
                if (splits.get(split) or {}).get("rows")
            ]
            described.append(f"{name} ({', '.join(counts)})" if counts else name)
    if not described:
        return None
    return (
        f"--long_text sliding_window reads documents as windows: {'; '.join(described)}. Its samples/s and "
        "tokens/s count windows, docs/s documents; its eval_loss (results.json, the card) is the mean over "
        "validation windows, not documents, so it does not compare with another run's loss (its metrics "
        "are per document)."
    )
