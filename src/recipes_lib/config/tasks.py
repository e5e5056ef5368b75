"""The three kinds of task, as transformers names them (`config.problem_type`): the data decides the kind
(data/labels.py), `--problem_type` overrides it; everything downstream branches on these.
"""

from __future__ import annotations

SINGLE_LABEL = "single_label_classification"
MULTI_LABEL = "multi_label_classification"
REGRESSION = "regression"
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
