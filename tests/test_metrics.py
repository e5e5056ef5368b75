"""Metrics come from the shipped `evaluate` modules and agree with scikit-learn."""

from __future__ import annotations

import warnings

import evaluate
import numpy as np
import pytest
from scipy.stats import ConstantInputWarning, pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, mean_squared_error
from transformers import EvalPrediction

from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from recipes_lib.evaluation.metrics import TaskMetrics, load_metric
from recipes_lib.evaluation.threshold_tuning import tune_thresholds

# Multi-hot rows, one column per label: rows 0 and 2 are exactly right, row 1 misses label 2.
MULTILABEL_REFERENCES = [[1, 0, 1], [0, 1, 1], [1, 1, 0]]
MULTILABEL_PREDICTIONS = [[1, 0, 1], [0, 1, 0], [1, 1, 0]]


def test_shipped_modules_load_offline_through_evaluate():
    accuracy = load_metric("accuracy")
    assert isinstance(accuracy, evaluate.EvaluationModule)
    assert accuracy.compute(predictions=[0, 1, 2, 2], references=[0, 1, 1, 2]) == {"accuracy": 0.75}


def test_unknown_metric_names_the_available_ones():
    with pytest.raises(ValueError, match="available: accuracy, correlation, f1, mse"):
        load_metric("bleu")


def test_compute_metrics_matches_sklearn_macro_f1_including_never_predicted_classes():
    rng = np.random.default_rng(0)
    references = rng.integers(0, 4, size=200)
    logits = rng.normal(size=(200, 4))
    logits[:, 3] -= 10  # class 3 is never predicted: macro-F1 must still count it (as 0)
    metrics = TaskMetrics(SINGLE_LABEL, 4)(EvalPrediction(predictions=logits, label_ids=references))
    predictions = logits.argmax(-1)
    assert metrics["accuracy"] == pytest.approx(accuracy_score(references, predictions))
    assert metrics["f1"] == pytest.approx(
        f1_score(references, predictions, average="macro", labels=[0, 1, 2, 3], zero_division=0)
    )


def test_single_label_accuracy_and_f1_are_unchanged_by_the_multilabel_config():
    predictions, references = [0, 1, 2, 2, 1], [0, 1, 1, 2, 0]
    assert load_metric("accuracy").compute(predictions=predictions, references=references) == {
        "accuracy": 0.6
    }
    f1 = load_metric("f1")
    assert f1.compute(predictions=predictions, references=references)["f1"] == pytest.approx(
        f1_score(references, predictions, average="macro", zero_division=0)
    )
    assert f1.compute(predictions=[0, 1, 1, 0], references=[0, 1, 0, 0], average="binary") == {"f1": 2 / 3}


def test_multilabel_accuracy_is_exact_match():
    result = load_metric("accuracy", "multilabel").compute(
        predictions=MULTILABEL_PREDICTIONS, references=MULTILABEL_REFERENCES
    )
    assert result["accuracy"] == pytest.approx(2 / 3)
    assert result["accuracy"] == accuracy_score(
        np.array(MULTILABEL_REFERENCES), np.array(MULTILABEL_PREDICTIONS)
    )


@pytest.mark.parametrize("average", ["micro", "macro"])
def test_multilabel_f1_matches_sklearn_on_indicator_arrays(average):
    result = load_metric("f1", "multilabel").compute(
        predictions=MULTILABEL_PREDICTIONS, references=MULTILABEL_REFERENCES, average=average
    )
    expected = f1_score(
        np.array(MULTILABEL_REFERENCES), np.array(MULTILABEL_PREDICTIONS), average=average, zero_division=0
    )
    assert result == {"f1": pytest.approx(expected)}
    assert isinstance(result["f1"], float)


REGRESSION_REFERENCES = np.array([0.0, 0.3, 0.3, 0.9, 2.5, -1.2])
REGRESSION_PREDICTIONS = np.array([0.1, 0.2, 0.35, 1.0, 2.0, -0.7])


@pytest.mark.parametrize(
    ("name", "config", "reference_fn"),
    [
        ("mse", None, mean_squared_error),
        ("correlation", "pearson", lambda references, predictions: pearsonr(references, predictions)[0]),
        ("correlation", "spearman", lambda references, predictions: spearmanr(references, predictions)[0]),
    ],
)
def test_regression_modules_load_offline_and_match_sklearn_and_scipy(name, config, reference_fn):
    metric = load_metric(name, config)
    assert isinstance(metric, evaluate.EvaluationModule)
    result = metric.compute(predictions=REGRESSION_PREDICTIONS.tolist(), references=REGRESSION_REFERENCES)
    key = config or name
    assert list(result) == [key]
    assert type(result[key]) is float
    assert result[key] == pytest.approx(reference_fn(REGRESSION_REFERENCES, REGRESSION_PREDICTIONS))


@pytest.mark.parametrize("config", ["pearson", "spearman"])
def test_correlation_of_a_constant_input_is_nan_without_a_warning(config):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConstantInputWarning)
        result = load_metric("correlation", config).compute(
            predictions=[0.5, 0.5, 0.5], references=[0.0, 0.3, 0.9]
        )
    assert type(result[config]) is float
    assert np.isnan(result[config])


def test_multi_label_task_metrics_decide_each_class_by_its_threshold():
    logits = np.log(
        np.array([[0.9, 0.4, 0.2], [0.6, 0.7, 0.45]]) / (1 - np.array([[0.9, 0.4, 0.2], [0.6, 0.7, 0.45]]))
    )
    references = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    metrics = TaskMetrics(MULTI_LABEL, 3)
    at_half = metrics(EvalPrediction(predictions=logits, label_ids=references))
    assert at_half["accuracy"] == 0.0  # row 0 misses class 1, row 1 misses class 2
    # Macro-F1 (1, 2/3 and 0 per class) and micro-F1 (3 of 5 true labels found, none wrong) differ here.
    decided = np.array([[1, 0, 0], [1, 1, 0]])
    assert at_half["f1"] == pytest.approx(f1_score(references, decided, average="macro"))
    assert at_half["f1_micro"] == pytest.approx(f1_score(references, decided, average="micro"))
    metrics.thresholds = [0.5, 0.35, 0.4]
    tuned = metrics(EvalPrediction(predictions=logits, label_ids=references))
    assert tuned["accuracy"] == 1.0 and tuned["f1"] == 1.0 and tuned["f1_micro"] == 1.0
    assert tuned["samples"] == 2


def test_binary_scores_decide_at_the_threshold_and_report_the_positive_class_f1_apart_from_macro():
    positive = np.array([0.2, 0.4, 0.6, 0.8, 0.35])  # the positive class's softmax probability
    logits = np.stack([np.zeros(5), np.log(positive / (1 - positive))], axis=1)
    references = np.array([0, 1, 1, 0, 0])
    scores = TaskMetrics(SINGLE_LABEL, 2).binary_scores(logits, references, threshold=0.3)
    decided = np.array([0, 1, 1, 1, 1])  # at or above 0.3; positive F1 2/3, macro-F1 7/12
    assert scores == pytest.approx(
        {
            "accuracy": accuracy_score(references, decided),
            "f1": f1_score(references, decided, average="macro"),
            "f1_positive": f1_score(references, decided, average="binary"),
        }
    )


def test_regression_task_metrics_score_the_single_output():
    scores = np.array([0.1, 0.4, 0.35, 0.8])
    targets = np.array([0.0, 0.5, 0.3, 1.0])
    metrics = TaskMetrics(REGRESSION, 1)(EvalPrediction(predictions=scores[:, None], label_ids=targets))
    assert metrics["mse"] == pytest.approx(float(np.mean((scores - targets) ** 2)))
    assert metrics["pearson"] == pytest.approx(float(np.corrcoef(scores, targets)[0, 1]))
    assert metrics["spearman"] == pytest.approx(1.0)


def test_thresholds_are_tuned_per_class_for_f1_and_a_class_without_positives_keeps_half():
    probabilities = np.array([[0.30, 0.9, 0.8], [0.32, 0.2, 0.7], [0.10, 0.6, 0.9], [0.05, 0.1, 0.6]])
    references = np.array([[1, 1, 0], [1, 0, 0], [0, 1, 0], [0, 0, 0]])
    thresholds = tune_thresholds(probabilities, references)
    # Class 0: positives at 0.30 and 0.32, negatives at 0.10 and below; any cut in (0.10, 0.30] is perfect,
    # and the one nearest 0.5 is 0.30. Class 1: any cut in (0.2, 0.6] is perfect; nearest 0.5 is 0.5.
    assert thresholds == [0.3, 0.5, 0.5]


def test_tuning_refuses_a_threshold_that_marks_nearly_every_row_with_a_rare_class():
    """A rare class (4 of 100) whose probability barely ranks its rows: the best F1 on the grid would be
    0.05, marking 96 of 100 rows. Refused: no allowed threshold beats marking every row, so it keeps 0.5."""
    from recipes_lib.evaluation.threshold_tuning import NEARLY_EVERY_ROW, choose_thresholds

    rng = np.random.default_rng(0)
    truth = np.zeros((100, 1), dtype=int)
    truth[:4] = 1
    probabilities = rng.uniform(0.06, 0.12, size=(100, 1))
    probabilities[:4] = 0.07  # the positives: under every cut but the lowest
    probabilities[4:8] = 0.01  # four negatives below the lowest cut: the 0.05 cut marks 96 rows, F1 0.08
    [choice] = choose_thresholds(probabilities, truth)
    assert choice == {
        "threshold": 0.5,
        "tuned": False,
        "why": "each threshold marks nearly every row or scores no better than marking every row (F1 0.077)",
    }
    assert (probabilities >= 0.05).mean() >= NEARLY_EVERY_ROW  # what the old rule would have picked
    # The same class with a probability that ranks its rows: tuned, to a cut that marks them only.
    probabilities[:4] = 0.3
    [choice] = choose_thresholds(probabilities, truth)
    assert choice["tuned"] and 0.12 < choice["threshold"] <= 0.3


def test_tuning_refuses_a_class_whose_probability_does_not_vary():
    from recipes_lib.evaluation.threshold_tuning import choose_thresholds

    truth = np.array([[1, 1], [0, 1], [1, 0], [0, 0]] * 5)
    probabilities = np.column_stack([np.full(20, 0.3), np.where(truth[:, 1] == 1, 0.4, 0.1)])
    flat, ranked = choose_thresholds(probabilities, truth)
    assert flat == {"threshold": 0.5, "tuned": False, "why": "its probability does not vary across rows"}
    assert ranked["tuned"] and 0.1 < ranked["threshold"] <= 0.4


def test_the_tuned_score_stands_beside_the_half_score_with_the_share_each_threshold_marks():
    from recipes_lib.evaluation.predictions import final_outputs

    truth = np.array([[1, 0], [0, 1], [1, 1], [0, 0]] * 4, dtype=np.float32)
    probabilities = np.where(truth == 1, 0.3, 0.1)
    logits = np.log(probabilities / (1 - probabilities))
    scorer = TaskMetrics(MULTI_LABEL, 2)
    outputs = final_outputs((logits, truth), None, scorer, ["a", "b"], None, "v.csv")
    tuning = outputs.results["threshold_tuning"]
    assert tuning["a"]["tuned"] and tuning["a"]["prevalence"] == 0.5
    assert tuning["a"]["marked_at_threshold"] == 0.5 and tuning["a"]["marked_at_0.5"] == 0.0
    assert outputs.results["eval_tuned_f1"] == 1.0 and outputs.results["model_collapsed"] is False
    # The same rows from a model whose outputs do not vary: collapsed, nothing tuned, no tuned figure.
    constant = np.tile(logits[0], (len(logits), 1))
    outputs = final_outputs((constant, truth), None, TaskMetrics(MULTI_LABEL, 2), ["a", "b"], None, "v.csv")
    assert outputs.results["model_collapsed"] is True and outputs.thresholds == [0.5, 0.5]
    assert not any(key.startswith("eval_tuned_") for key in outputs.results)
    assert not any(entry["tuned"] for entry in outputs.results["threshold_tuning"].values())


def test_evaluation_metrics_carry_how_much_the_outputs_vary():
    logits = np.array([[2.0, -1.0], [2.0, -1.0], [2.0, -1.0]])
    metrics = TaskMetrics(SINGLE_LABEL, 2)(EvalPrediction(predictions=logits, label_ids=np.array([0, 1, 0])))
    assert metrics["output_std"] == 0.0 and metrics["distinct_predictions"] == 1
    logits[0] = [-1.0, 2.0]
    metrics = TaskMetrics(SINGLE_LABEL, 2)(EvalPrediction(predictions=logits, label_ids=np.array([0, 1, 0])))
    assert metrics["output_std"] > 0.3 and metrics["distinct_predictions"] == 2


def test_a_binary_task_reports_the_positive_class_f1_beside_accuracy_and_macro_f1():
    rng = np.random.default_rng(1)
    references = rng.integers(0, 2, size=100)
    logits = rng.normal(size=(100, 2))
    metrics = TaskMetrics(SINGLE_LABEL, 2)(EvalPrediction(predictions=logits, label_ids=references))
    predictions = logits.argmax(-1)
    assert metrics["f1_positive"] == pytest.approx(f1_score(references, predictions, pos_label=1))
    assert metrics["f1_positive"] != pytest.approx(metrics["f1"])  # not macro-F1 under another name
    three = TaskMetrics(SINGLE_LABEL, 3)(
        EvalPrediction(predictions=rng.normal(size=(9, 3)), label_ids=[0, 1, 2] * 3)
    )
    assert "f1_positive" not in three  # no positive class among three
