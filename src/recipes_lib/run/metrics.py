"""The run's `compute_metrics`, the hook every Trainer calls with each evaluation's gathered predictions:
the task's metrics (`TaskMetrics`), the task's `loss` over the gathered predictions, and the latest
predictions (`last_predictions`, in the Trainer's order: `RecipeRun.final_evaluation` hands them on).

Why its own loss: the Trainer's `eval_loss` averages each batch's mean loss, taken before accelerate
drops the examples repeated to give every process an equal share, so a repeat counts. The Trainer
files a `loss` returned here under `eval_loss` in place of its own (tests/test_trainer_surface.py).
"""

from __future__ import annotations

from typing import Any

import torch

from recipes_lib.evaluation.metrics import TaskMetrics
from recipes_lib.training.losses import evaluation_loss


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
        self.last_predictions = None  # the latest EvalPrediction: one row per row (or window) evaluated

    def __call__(self, eval_prediction) -> dict[str, Any]:
        self.last_predictions, logits = eval_prediction, eval_prediction.predictions
        loss = evaluation_loss(
            torch.as_tensor(logits[0] if isinstance(logits, tuple) else logits, dtype=torch.float32),
            torch.as_tensor(eval_prediction.label_ids),
            problem_type=self.problem_type,
            class_weights=self.class_weights,
            label_smoothing=self.label_smoothing,
        )
        return {**super().__call__(eval_prediction), "loss": loss}
