"""Evaluation metrics through the `evaluate` library, from modules shipped with this package: a local
module directory loads offline (`evaluate.load("accuracy")` fetches its script from the Hub)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import evaluate
import numpy as np

from recipes_lib.config.tasks import DEFAULT_THRESHOLD, MULTI_LABEL, REGRESSION
from recipes_lib.evaluation.collapse import output_variation
from recipes_lib.evaluation.thresholds import binary_decisions, predicted_labels, sigmoid

METRIC_MODULES = Path(__file__).parent / "metric_modules"


def load_metric(name: str, config_name: str | None = None) -> evaluate.EvaluationModule:
    """The shipped module `name`; `config_name="multilabel"` (accuracy, f1) takes one 0/1 row per example."""
    module_dir = METRIC_MODULES / name
    if not module_dir.is_dir():
        available = ", ".join(sorted(p.name for p in METRIC_MODULES.iterdir() if p.is_dir()))
        raise ValueError(f"No shipped metric module '{name}'; available: {available}.")
    return evaluate.load(str(module_dir), config_name)


class TaskMetrics:
    """`compute_metrics` for the Trainer: the task's metrics (tasks.TASK_METRICS; docs/results-format.md says
    each), multi-label at `thresholds` (0.5 until the tuned ones are set); `output_std` and
    `distinct_predictions` (evaluation/collapse.py); and `samples`, the predictions gathered from every
    process (the validation split's size when each example counted once). Under --long_text
    sliding_window, `document_ids` combines the windows into one prediction per document first
    (evaluation/windows.py), so the metrics and `samples` count documents.
    """

    def __init__(self, problem_type: str, num_labels: int):
        self.problem_type, self.num_labels = problem_type, num_labels
        self.thresholds = [DEFAULT_THRESHOLD] * num_labels
        self.document_ids, self.window_pooling = None, "mean"  # sliding_window: the evaluated split's windows
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
        logits = logits[0] if isinstance(logits, tuple) else logits  # a model's other outputs dropped
        logits, references = self.per_document(np.asarray(logits), np.asarray(references))
        variation = output_variation(logits, self.problem_type, references)
        return {
            **self.scores(logits, references),
            "output_std": variation["output_std"],
            "distinct_predictions": variation["distinct_predictions"],
            "samples": len(references),
        }

    def per_document(self, logits: np.ndarray, references=None):
        """Window predictions (and labels) combined into one per document; unchanged without windows."""
        if self.document_ids is None:
            return logits, references
        # Only --long_text sliding_window runs (document_ids set) get here and load the windows module.
        from recipes_lib.evaluation.windows import combine_windows

        combined, first_windows = combine_windows(logits, self.document_ids, self.window_pooling)
        return combined, None if references is None else np.asarray(references)[first_windows]

    @contextmanager
    def scoring(self, document_ids):
        """Score another split's windows (the test split's) for the time of the block."""
        saved, self.document_ids = self.document_ids, document_ids
        try:
            yield self
        finally:
            self.document_ids = saved

    def scores(self, logits: np.ndarray, references: np.ndarray, thresholds=None) -> dict[str, float]:
        """The task's metrics from raw logits and the encoded labels (multi-label: at `thresholds`, default
        the current ones)."""
        if self.problem_type == REGRESSION:
            scores, targets = logits.reshape(len(logits), -1)[:, 0], references.reshape(-1)
            return {name: self._compute(name, scores, targets) for name in ("mse", "pearson", "spearman")}
        if self.problem_type == MULTI_LABEL:
            predictions = predicted_labels(
                sigmoid(logits), self.thresholds if thresholds is None else thresholds
            )
            targets = references.round().astype(np.int64)  # the 0.0/1.0 rows the model trained on
            return {
                "accuracy": self._compute("accuracy", predictions, targets),
                "f1": self._compute("f1", predictions, targets, average="macro"),
                "f1_micro": self._compute("f1", predictions, targets, average="micro"),
            }
        predictions = np.argmax(logits, axis=-1)
        scores = {
            "accuracy": self._compute("accuracy", predictions, references),
            "f1": self._compute(  # over all classes: one never predicted still counts
                "f1", predictions, references, average="macro", labels=list(range(self.num_labels))
            ),
        }
        if self.num_labels == 2:  # the positive class's (id 1) own F1, as paraphrase benchmarks report
            scores["f1_positive"] = self._compute("f1", predictions, references, average="binary")
        return scores

    def binary_scores(self, logits: np.ndarray, references: np.ndarray, threshold: float) -> dict[str, float]:
        """A two-class model decided at `threshold` on the positive class (label id 1, --decision_threshold):
        accuracy, macro-F1 and the positive class's own F1 (`f1_positive`), which the threshold moves most."""
        predictions = binary_decisions(logits, threshold)
        return {
            "accuracy": self._compute("accuracy", predictions, references),
            "f1": self._compute("f1", predictions, references, average="macro", labels=[0, 1]),
            "f1_positive": self._compute("f1", predictions, references, average="binary"),
        }

    def _compute(self, name: str, predictions, references, **options) -> float:
        return self.modules[name].compute(predictions=predictions, references=references, **options)[name]
