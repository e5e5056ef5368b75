"""Evaluation metrics through the `evaluate` library, from modules shipped with this package.

`evaluate.load("accuracy")` fetches its script from the Hub; a local module directory loads offline
and computes the same thing.
"""

from __future__ import annotations

from pathlib import Path

import evaluate
import numpy as np

from recipes_lib.config.tasks import DEFAULT_THRESHOLD, MULTI_LABEL, REGRESSION
from recipes_lib.evaluation.thresholds import predicted_labels, sigmoid

METRIC_MODULES = Path(__file__).parent / "metric_modules"


def load_metric(name: str, config_name: str | None = None) -> evaluate.EvaluationModule:
    """The shipped module `name`; `config_name="multilabel"` (accuracy, f1) takes one 0/1 row per example."""
    module_dir = METRIC_MODULES / name
    if not module_dir.is_dir():
        available = ", ".join(sorted(p.name for p in METRIC_MODULES.iterdir() if p.is_dir()))
        raise ValueError(f"No shipped metric module '{name}'; available: {available}.")
    return evaluate.load(str(module_dir), config_name)


class TaskMetrics:
    """`compute_metrics` for the Trainer, for the run's kind of task (tasks.TASK_METRICS).

    - single-label: accuracy and macro-F1 over all classes (a class never predicted still counts);
    - multi-label: exact-match accuracy, macro- and micro-F1, each class decided by its threshold
      (0.5 until `thresholds` is set to the tuned ones: the final test split is scored with those);
    - regression: mean squared error, Pearson and Spearman correlation of the single output.

    Also `samples`, the number of predictions the metrics were computed on, after the Trainer gathered
    them from every process: the validation split's size when each example counted once (none
    dropped, none counted twice to even out the processes' batches).
    """

    def __init__(self, problem_type: str, num_labels: int):
        self.problem_type, self.num_labels = problem_type, num_labels
        self.thresholds = [DEFAULT_THRESHOLD] * num_labels
        if problem_type == REGRESSION:
            self.modules = {
                "mse": load_metric("mse"),
                "pearson": load_metric("correlation", "pearson"),
                "spearman": load_metric("correlation", "spearman"),
            }
        else:
            config = "multilabel" if problem_type == MULTI_LABEL else None
            self.modules = {name: load_metric(name, config) for name in ("accuracy", "f1")}

    def __call__(self, eval_prediction) -> dict[str, float]:
        logits, references = eval_prediction.predictions, eval_prediction.label_ids
        if isinstance(logits, tuple):
            logits = logits[0]
        return {**self.scores(np.asarray(logits), np.asarray(references)), "samples": len(references)}

    def scores(self, logits: np.ndarray, references: np.ndarray, thresholds=None) -> dict[str, float]:
        """The task's metrics from raw logits and the encoded labels (multi-label: at `thresholds`, default
        the current ones)."""
        modules = self.modules
        if self.problem_type == REGRESSION:
            scores, targets = logits.reshape(len(logits), -1)[:, 0], references.reshape(-1)
            return {
                "mse": modules["mse"].compute(predictions=scores, references=targets)["mse"],
                "pearson": modules["pearson"].compute(predictions=scores, references=targets)["pearson"],
                "spearman": modules["spearman"].compute(predictions=scores, references=targets)["spearman"],
            }
        if self.problem_type == MULTI_LABEL:
            predictions = predicted_labels(
                sigmoid(logits), self.thresholds if thresholds is None else thresholds
            )
            targets = references.round().astype(np.int64)  # the 0.0/1.0 rows the model trained on
            f1 = modules["f1"]
            return {
                **modules["accuracy"].compute(predictions=predictions, references=targets),
                "f1": f1.compute(predictions=predictions, references=targets, average="macro")["f1"],
                "f1_micro": f1.compute(predictions=predictions, references=targets, average="micro")["f1"],
            }
        predictions = np.argmax(logits, axis=-1)
        return {
            **modules["accuracy"].compute(predictions=predictions, references=references),
            **modules["f1"].compute(
                predictions=predictions,
                references=references,
                average="macro",
                labels=list(range(self.num_labels)),
            ),
        }
