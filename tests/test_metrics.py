"""Metrics come from the shipped `evaluate` modules and agree with scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score
from transformers import EvalPrediction

from recipes_lib.metrics import build_compute_metrics, load_metric


def test_shipped_modules_load_offline_through_evaluate():
    import evaluate

    accuracy = load_metric("accuracy")
    assert isinstance(accuracy, evaluate.EvaluationModule)
    assert accuracy.compute(predictions=[0, 1, 2, 2], references=[0, 1, 1, 2]) == {"accuracy": 0.75}


def test_unknown_metric_names_the_available_ones():
    with pytest.raises(ValueError, match="available: accuracy, f1"):
        load_metric("bleu")


def test_compute_metrics_matches_sklearn_macro_f1_including_never_predicted_classes():
    rng = np.random.default_rng(0)
    references = rng.integers(0, 4, size=200)
    logits = rng.normal(size=(200, 4))
    logits[:, 3] -= 10  # class 3 is never predicted: macro-F1 must still count it (as 0)
    metrics = build_compute_metrics(num_labels=4)(EvalPrediction(predictions=logits, label_ids=references))
    predictions = logits.argmax(-1)
    assert metrics["accuracy"] == pytest.approx(accuracy_score(references, predictions))
    assert metrics["f1"] == pytest.approx(
        f1_score(references, predictions, average="macro", labels=[0, 1, 2, 3], zero_division=0)
    )
