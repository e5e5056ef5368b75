"""The run's `compute_metrics`, the hook every Trainer calls with each evaluation's gathered predictions:
the task's metrics (`TaskMetrics`), the task's `loss` over the gathered predictions, and the latest
predictions (`last_predictions`, in the Trainer's order: run/record.py reads the final pass from it).

Why its own loss: the Trainer's `eval_loss` averages each batch's mean loss, taken before accelerate
drops the examples repeated to give every process an equal share, so a repeat counts. The Trainer
files a `loss` returned here under `eval_loss` in place of its own (tests/test_trainer_surface.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from recipes_lib.evaluation.metrics import TaskMetrics
from recipes_lib.training.losses import evaluation_loss


class Predictions(NamedTuple):
    logits: np.ndarray  # one row per evaluated row (a window, under --long_text sliding_window)
    references: np.ndarray


class RunMetrics(TaskMetrics):
    """`TaskMetrics` plus the evaluation loss over the gathered predictions and the latest predictions."""

    def __init__(
        self,
        problem_type: str,
        num_labels: int,
        class_weights: list[float] | None = None,
        label_smoothing: float = 0.0,
        document_ids=None,
        test_document_ids=None,
        window_pooling: str = "mean",
    ):
        super().__init__(problem_type, num_labels)
        self.class_weights, self.label_smoothing = class_weights, label_smoothing
        # sliding_window: the validation split's windows (and the test split's, which record.py scores).
        self.document_ids, self.window_pooling = document_ids, window_pooling
        self.test_document_ids = test_document_ids
        self.last_predictions: Predictions | None = None

    def __call__(self, eval_prediction) -> dict[str, Any]:
        logits = eval_prediction.predictions
        if isinstance(logits, tuple):
            logits = logits[0]
        self.last_predictions = Predictions(np.asarray(logits), np.asarray(eval_prediction.label_ids))
        loss = evaluation_loss(
            torch.as_tensor(self.last_predictions.logits, dtype=torch.float32),
            torch.as_tensor(self.last_predictions.references),
            problem_type=self.problem_type,
            class_weights=self.class_weights,
            label_smoothing=self.label_smoothing,
        )
        return {**super().__call__(eval_prediction), "loss": loss}
