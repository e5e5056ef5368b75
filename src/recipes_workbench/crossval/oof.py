"""Out-of-fold predictions and the cross-validation's figures: every training row's prediction from the
fold that held it out, in OUTPUT_DIR/oof_predictions.jsonl (docs/crossval.md has its format).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from recipes_lib.errors import DataError
from recipes_lib.evaluation.predictions import EVAL_PREDICTIONS_FILE
from recipes_lib.whole_files import DamagedFileError
from recipes_workbench.crossval.folds import TrainingRows
from recipes_workbench.shared import CROSSVAL_RESULTS_FILE, mean_and_std

OOF_FILE = "oof_predictions.jsonl"
RESULTS_FILE = CROSSVAL_RESULTS_FILE


# A finished fold is not rerun: its directory goes first.
RUN_FOLD_AGAIN = "Delete the fold's directory ({fold}), then rerun the same command: that fold runs again."


def read_fold_predictions(fold_output_dir: Path, expected_rows: int) -> list[dict[str, Any]]:
    path = Path(fold_output_dir) / EVAL_PREDICTIONS_FILE
    if not path.is_file():
        raise DataError(
            f"{path} is missing: the fold's run finished without writing its held-out predictions. Its log says "
            "why; rerun the same command to run the fold again."
        )
    # A file cut mid-line (a disk error, an edit): one paragraph naming its line, not a JSON traceback.
    lines = read_jsonl(
        path, "a fold's held-out predictions", RUN_FOLD_AGAIN.format(fold=Path(fold_output_dir))
    )
    if len(lines) != expected_rows:
        raise DataError(
            f"{path} has {len(lines)} predictions for {expected_rows} held-out rows: the run did not predict every "
            "held-out row once (--max_eval_samples, or a data filter). Leave such options out of a cross-validation."
        )
    return lines


def out_of_fold_rows(
    training: TrainingRows, assignment: np.ndarray, fold_dirs: dict[int, Path]
) -> list[dict[str, Any]]:
    """One line per training row, in file order, from the fold that held it out."""
    rows: list[dict[str, Any] | None] = [None] * len(training.rows)
    for fold, directory in sorted(fold_dirs.items()):
        indices = [int(i) for i in np.flatnonzero(assignment == fold)]  # in file order, as its predictions
        for index, predicted in zip(indices, read_fold_predictions(directory, len(indices)), strict=True):
            rows[index] = {"row": index, "fold": fold, "label": training.given_label(index), **predicted}
    missing = [i for i, row in enumerate(rows) if row is None]
    if missing:
        raise DataError(f"Rows {missing[:10]} have no out-of-fold prediction: a fold did not finish.")
    return rows  # type: ignore[return-value]


def format_summary(metric: str, per_fold: list[float | None]) -> str:
    values = [value for value in per_fold if value is not None and math.isfinite(value)]
    figures = mean_and_std(values)
    if figures["mean"] is None:
        return f"{metric}: no fold finished"
    spread = "" if figures["std"] is None else f" ± {figures['std']:.4f} (std over folds)"
    folds = ", ".join("-" if value is None else f"{value:.4f}" for value in per_fold)
    return f"{metric}: {figures['mean']:.4f}{spread}; per fold: {folds}"


def read_jsonl(path: str | os.PathLike, what: str, remedy: str) -> list[Any]:
    """The records of a JSON Lines file (blank lines skipped), or a DamagedFileError naming the bad line."""
    path = Path(path)
    records = []
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line.decode("utf-8")))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
                last = not line.endswith(b"\n") and not handle.read(1)
                problem = "ends in the middle of a record" if last else f"is not one JSON record ({error})"
                raise DamagedFileError(
                    f"{path} ({what}) line {number} {problem}: it was cut short while being written, or changed "
                    f"since. It is not read as whole. {remedy}"
                ) from None
    return records
