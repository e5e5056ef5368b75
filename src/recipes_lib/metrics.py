"""Evaluation metrics through the `evaluate` library, from modules shipped with this package.

`evaluate.load("accuracy")` fetches its script from the Hub; a local module directory loads offline
and computes the same thing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import evaluate
import numpy as np

METRIC_MODULES = Path(__file__).parent / "metric_modules"


def load_metric(name: str) -> evaluate.EvaluationModule:
    module_dir = METRIC_MODULES / name
    if not module_dir.is_dir():
        available = ", ".join(sorted(p.name for p in METRIC_MODULES.iterdir() if p.is_dir()))
        raise ValueError(f"No shipped metric module '{name}'; available: {available}.")
    return evaluate.load(str(module_dir))


def build_compute_metrics(num_labels: int) -> Callable:
    """`compute_metrics` for the Trainer: accuracy and macro-F1 over all `num_labels` classes.

    Also `samples`, the number of predictions the metrics were computed on, after the Trainer gathered
    them from every process: the validation split's size when each example counted once (none
    dropped, none counted twice to even out the processes' batches).
    """
    accuracy, f1 = load_metric("accuracy"), load_metric("f1")
    all_labels = list(range(num_labels))

    def compute_metrics(eval_prediction) -> dict[str, float]:
        logits, references = eval_prediction.predictions, eval_prediction.label_ids
        if isinstance(logits, tuple):
            logits = logits[0]
        predictions = np.argmax(logits, axis=-1)
        return {
            **accuracy.compute(predictions=predictions, references=references),
            **f1.compute(predictions=predictions, references=references, average="macro", labels=all_labels),
            "samples": len(references),
        }

    return compute_metrics
