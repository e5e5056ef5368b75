"""The three kinds of task a recipe trains, named as transformers names them (`config.problem_type`).

- single-label classification: one class per example; softmax over the classes, cross-entropy.
- multi-label classification: any number of classes per example (a list, or a delimited string);
  one sigmoid per class, binary cross-entropy; a class is predicted when its probability reaches
  its threshold, one threshold per class, tuned on the validation split
  (evaluation/thresholds.py).
- regression: one number per example; one output, mean squared error.

The data decides the kind (data/labels.py), `--problem_type` overrides it. Everything downstream (loss,
metrics, prediction rows, predict) branches on these three names.
"""

from __future__ import annotations

SINGLE_LABEL = "single_label_classification"
MULTI_LABEL = "multi_label_classification"
REGRESSION = "regression"
PROBLEM_TYPES = (SINGLE_LABEL, MULTI_LABEL, REGRESSION)
AUTO = "auto"

# The metrics each kind reports, as compute_metrics returns them (the Trainer prefixes "eval_").
# Multi-label: exact-match accuracy (every class right), macro-F1 (every class counts the same) and
# micro-F1 (every decision counts the same). Regression: mean squared error, Pearson and Spearman.
TASK_METRICS = {
    SINGLE_LABEL: ("accuracy", "f1"),
    MULTI_LABEL: ("accuracy", "f1", "f1_micro"),
    REGRESSION: ("mse", "pearson", "spearman"),
}

DEFAULT_THRESHOLD = 0.5
TUNE = "tune"  # --decision_threshold tune: the positive class's threshold tuned on validation
