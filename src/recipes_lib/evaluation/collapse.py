"""A model whose outputs do not depend on its input (a collapsed model: docs/troubleshooting.md), measured.

`output_variation`, from one evaluation's logits: `output_std` (the largest standard deviation across the
rows of any class's probability; regression: of the score, over that of the true scores) and
`distinct_predictions`. Every evaluation returns both (evaluation/metrics.py), training/callbacks.py
warns at the first collapse, the record keeps them (`collapse_results`); collapse_note.py says it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from recipes_lib.config.tasks import DEFAULT_THRESHOLD, MULTI_LABEL, REGRESSION
from recipes_lib.evaluation.thresholds import FLAT_STD, sigmoid, softmax

if TYPE_CHECKING:
    from recipes_lib.results import RunResults


def output_variation(logits: np.ndarray, problem_type: str, references=None) -> dict[str, Any]:
    """{"output_std", "distinct_predictions", "rows"} of this module's docstring, from one evaluation's logits."""
    logits = np.asarray(logits, dtype=np.float64)
    rows = len(logits)
    if rows < 2:  # one row cannot vary (is_collapsed judges no fewer than two)
        return {"output_std": 0.0, "distinct_predictions": rows, "rows": rows}
    if problem_type == REGRESSION:
        scores = logits.reshape(rows, -1)[:, 0]
        spread = float(np.std(np.asarray(references, dtype=np.float64))) if references is not None else 0.0
        spread = spread or 1.0
        distinct = len(np.unique(np.round(scores / (FLAT_STD * spread))))
        return {
            "output_std": round(float(np.std(scores)) / spread, 6),
            "distinct_predictions": distinct,
            "rows": rows,
        }
    chances = sigmoid(logits) if problem_type == MULTI_LABEL else softmax(logits)  # each class's, per row
    if problem_type == MULTI_LABEL:
        distinct = len(np.unique(chances >= DEFAULT_THRESHOLD, axis=0))  # the label sets at 0.5
    else:
        distinct = len(np.unique(chances.argmax(axis=-1)))
    return {
        "output_std": round(float(chances.std(axis=0).max()), 6),
        "distinct_predictions": distinct,
        "rows": rows,
    }


def is_collapsed(variation: dict[str, Any] | None) -> bool:
    """Every row the same prediction, and no class's output moving by FLAT_STD (False for under two rows)."""
    if not variation or variation["rows"] < 2:
        return False
    return variation["distinct_predictions"] <= 1 and variation["output_std"] < FLAT_STD


def collapse_results(logits: np.ndarray, problem_type: str, references=None) -> dict[str, Any]:
    """results.json's keys (and the W&B summary's): `model_collapsed` and `output_variation` of the final
    validation predictions."""
    variation = output_variation(logits, problem_type, references)
    return {"model_collapsed": is_collapsed(variation), "output_variation": variation}


def end_of_run_notes(results: RunResults, default_learning_rate: float | None = None) -> list[str]:
    """The warnings that close a run: a collapsed model's alone (the neglected-class and training-loss notes
    advise a higher rate, which makes a collapse worse); else those two notes. `default_learning_rate`:
    the recipe's (its SPEC's), which the training-loss note compares the run's with."""
    from recipes_lib.evaluation.neglected import results_neglect_note
    from recipes_lib.evaluation.training_loss import high_loss_note

    if results.model_collapsed:
        from recipes_lib.evaluation.collapse_note import results_collapse_note

        return [results_collapse_note(results)]
    notes = [
        results_neglect_note(results) if results.neglected_classes else None,
        high_loss_note(results, default_learning_rate),
    ]
    return [note for note in notes if note]
