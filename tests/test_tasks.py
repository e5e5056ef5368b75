"""Multi-label classification and regression: read from the labels, trained, scored, predicted.

The tiny data: sentences of noise words with one or two colour words. The multi-label classes are
'warm' and 'cool', for the kinds of colour in the sentence (both, when it holds one of each); the
regression score is the share of warm colours among two slots, plus 0.25 when 'very' is there.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from recipes_lib.config.arguments import DataArguments
from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION, SINGLE_LABEL
from recipes_lib.data.loading import load_classification_data
from recipes_lib.errors import ConfigError, DataError
from tests.helpers.data import (
    multi_label_files,
    read_jsonl,
    regression_files,
    task_rows,
    write_csv,
    write_jsonl,
)
from tests.helpers.repo import REPO_ROOT
from tests.helpers.runs import QUICK, run_args, run_in_process

TOLERANCE = 1e-5


def load(files: dict[str, Path], **options):
    return load_classification_data(
        DataArguments(train_file=str(files["train"]), validation_file=str(files["validation"]), **options)
    )


# -- reading the task from the labels --------------------------------------------------------------


def test_lists_of_classes_are_multi_label_and_a_delimited_column_reads_the_same(tmp_path):
    from_lists = load(multi_label_files(tmp_path / "lists", 40, 20))
    assert from_lists.labels.problem_type == MULTI_LABEL
    assert from_lists.labels.names == ["cool", "warm"]
    rows = task_rows(40, 1)
    delimited = {
        "train": write_csv(tmp_path / "train.csv", [(t, " ; ".join(c)) for t, c, _ in rows]),
        "validation": write_csv(
            tmp_path / "validation.csv", [(t, ";".join(c)) for t, c, _ in task_rows(20, 2)]
        ),
    }
    from_strings = load(delimited, label_delimiter=";")
    assert from_strings.labels.problem_type == MULTI_LABEL
    assert from_strings.labels.names == from_lists.labels.names
    both = next(c for _, c, _ in rows if len(c) == 2)
    assert from_strings.labels.encode(" ; ".join(both)) == from_lists.labels.encode(both) == [1.0, 1.0]
    assert from_lists.labels.encode(["warm"]) == [0.0, 1.0]
    assert from_lists.labels.encode([]) == [0.0, 0.0]  # a row of none of the classes


def test_numbers_with_a_fraction_are_regression_and_integers_can_be_forced_to_it(tmp_path):
    data = load(regression_files(tmp_path / "scores", 40, 20))
    assert data.labels.problem_type == REGRESSION
    assert data.labels.names == ["label"] and data.labels.num_labels == 1
    assert data.labels.encode(0.75) == 0.75
    stars = {
        "train": write_csv(tmp_path / "train.csv", [("great", 5), ("bad", 1), ("fine", 3)]),
        "validation": write_csv(tmp_path / "validation.csv", [("ok", 3), ("awful", 1)]),
    }
    assert load(stars).labels.problem_type == SINGLE_LABEL
    forced = load(stars, problem_type="regression")
    assert forced.labels.problem_type == REGRESSION and forced.labels.encode(5) == 5.0


def test_rows_of_0_1_flags_are_classes_by_position_and_a_blank_delimited_cell_is_no_class(tmp_path):
    flags = write_jsonl(
        tmp_path / "flags.jsonl",
        [{"text": f"row {i}", "label": v} for i, v in enumerate([[1, 0], [0, 1], [1, 1]])],
    )
    data = load({"train": flags, "validation": flags})
    assert data.labels.names == ["0", "1"] and data.labels.encode([0, 1]) == [0.0, 1.0]
    # Delimited classes: a blank cell is none of them; a file whose cells are single numbers still matches.
    train = write_csv(tmp_path / "train.csv", [("a", "1;2"), ("b", ""), ("c", "2")])
    validation = write_csv(tmp_path / "validation.csv", [("d", 1), ("e", 2)])
    delimited = load({"train": train, "validation": validation}, label_delimiter=";")
    assert delimited.labels.names == ["1", "2"]
    assert delimited.labels.encode(None) == [0.0, 0.0] and delimited.labels.encode(2) == [0.0, 1.0]


def test_a_hub_float_test_split_of_minus_ones_is_predicted_not_scored(monkeypatch):
    """GLUE STS-B hides its test scores as -1.0 in a float column."""
    import datasets as hf_datasets
    from datasets import Dataset, DatasetDict

    scored = Dataset.from_dict({"text": ["a", "b", "c"], "label": [0.5, 3.2, 4.8]})
    hidden = Dataset.from_dict({"text": ["d", "e"], "label": [-1.0, -1.0]})
    splits = DatasetDict({"train": scored, "validation": scored, "test": hidden})
    monkeypatch.setattr(hf_datasets, "load_dataset", lambda *args, **kwargs: splits)
    data = load_classification_data(DataArguments(dataset_name="glue", test_split_name="test"))
    assert data.labels.problem_type == REGRESSION and data.test_has_labels is False


def test_an_undefined_correlation_is_written_as_null(tmp_path):
    from recipes_lib.results import RunResults, read_results, write_results

    undefined = {"eval_pearson": float("nan"), "memory_breakdown_gib": {"activations": float("inf")}}
    write_results(tmp_path, RunResults.from_dict(undefined))
    assert json.loads((tmp_path / "results.json").read_text(), parse_constant=float)["eval_pearson"] is None
    results = read_results(tmp_path)
    assert results.eval_pearson is None and results.memory_breakdown_gib == {"activations": None}


def test_a_hub_list_of_class_labels_keeps_its_names_and_order(monkeypatch):
    import datasets as hf_datasets
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value

    names = ["joy", "anger", "surprise"]  # not sorted: the dataset's own order is kept
    features = Features({"text": Value("string"), "labels": Sequence(ClassLabel(names=names))})
    rows = {"text": ["yay", "grr", "oh yay", "hm"], "labels": [[0], [1], [0, 2], []]}
    split = Dataset.from_dict(rows, features=features)
    monkeypatch.setattr(
        hf_datasets,
        "load_dataset",
        lambda *args, **kwargs: DatasetDict({"train": split, "validation": split}),
    )
    data = load_classification_data(DataArguments(dataset_name="emotions", label_column_name="labels"))
    assert data.labels.problem_type == MULTI_LABEL and data.labels.names == names
    assert data.labels.encode([0, 2]) == [1.0, 0.0, 1.0]


@pytest.mark.parametrize(
    "labels, options, error, message",
    [
        ([["warm"], ["cool"]], {"problem_type": "single_label_classification"}, ConfigError, "multi_label"),
        ([["warm"], ["cool"]], {"problem_type": "regression"}, ConfigError, "one label per row"),
        ([0.5, 0.25], {"problem_type": "single_label_classification"}, DataError, "train.jsonl line 1"),
        ([1, 0], {"label_delimiter": ";"}, ConfigError, "not strings"),
        ([["warm", "warm"], ["cool"]], {}, DataError, "name a class twice"),
        ([["warm", 1.5], ["cool"]], {}, DataError, "lists 1.5"),
    ],
)
def test_labels_that_do_not_fit_the_task_are_one_clear_error(tmp_path, labels, options, error, message):
    train = write_jsonl(
        tmp_path / "train.jsonl", [{"text": f"row {i}", "label": v} for i, v in enumerate(labels)]
    )
    with pytest.raises(error, match=message):
        load({"train": train, "validation": train}, **options)


def test_a_validation_row_that_is_not_a_number_or_names_an_unknown_class_is_an_error_with_its_line(tmp_path):
    scores = regression_files(tmp_path / "scores", 30, 10)
    with open(scores["validation"], "a") as handle:
        handle.write("the red cat,high\n")
    with pytest.raises(
        DataError, match=r"validation.csv line 12 has the label 'high', which is not a number"
    ):
        load(scores)
    classes = multi_label_files(tmp_path / "classes", 30, 3)
    with open(classes["validation"], "a") as handle:
        handle.write(json.dumps({"text": "a red bird", "label": ["warm", "bird"]}) + "\n")
    with pytest.raises(DataError, match=r"never uses: 'bird' \(first at validation.jsonl line 4\)"):
        load(classes)


def test_options_for_another_task_fail_before_the_weights_load(tmp_path, tiny_bert):
    files = multi_label_files(tmp_path / "data", 40, 20)
    output_dir = tmp_path / "out"
    scores = regression_files(tmp_path / "scores", 40, 20)
    with pytest.raises(
        ConfigError,
        match="--class_weights balanced weights the classes of a classification task, but this data is regression",
    ):
        run_in_process(
            "full_ft", run_args(tiny_bert, scores, output_dir, "--class_weights", "balanced", **QUICK)
        )
    with pytest.raises(ConfigError, match="--label_smoothing_factor 0.1 smooths a softmax"):
        run_in_process(
            "full_ft", run_args(tiny_bert, files, output_dir, "--label_smoothing_factor", "0.1", **QUICK)
        )
    with pytest.raises(ConfigError, match="'accuracy', which a regression run does not compute"):
        run_in_process(
            "full_ft",
            run_args(tiny_bert, scores, output_dir, "--metric_for_best_model", "accuracy", **QUICK),
        )
    assert not (output_dir / "results.json").exists()


@pytest.mark.parametrize("metric", ["mse", "eval_mse"])
def test_mse_as_the_best_model_metric_means_lower_is_better_from_parsing_on(metric):
    """Parsed so, and never edited afterwards: the task check leaves the parsed arguments as they are."""
    import copy
    import dataclasses

    from recipes_lib.config.parsing import parse_arguments
    from recipes_lib.config.validation import check_task_options
    from recipes_lib.data.labels import LabelMapping
    from recipes_workbench.recipes import RECIPES

    argv = ["--output_dir", "unused", "--metric_for_best_model", metric, "--report_to", "none"]
    training = parse_arguments(RECIPES["full_ft"], argv).training
    assert training.greater_is_better is False
    from recipes_lib.run.preparation import trainer_arguments

    assert trainer_arguments(training, per_device_train_batch_size=4).greater_is_better is False
    before = copy.deepcopy(dataclasses.asdict(training))
    check_task_options(training, LabelMapping(["score"], {}, REGRESSION))
    assert dataclasses.asdict(training) == before
    accuracy = parse_arguments(RECIPES["full_ft"], [*argv[:3], "accuracy", *argv[4:]]).training
    assert accuracy.greater_is_better is True  # the Trainer's own rule for other metrics


# -- training, scoring and predicting --------------------------------------------------------------


def trained(recipe: str, model: Path, files: dict[str, Path], output_dir: Path, *extra: str) -> dict:
    args = run_args(model, files, output_dir, "--max_eval_samples", "64", *extra, **QUICK)
    return run_in_process(recipe, args)


def learn(model: Path, files: dict[str, Path], output_dir: Path, learning_rate: str) -> dict:
    """Enough steps for the tiny BERT to learn the task (about 10 s on 2 cores)."""
    return trained(
        "full_ft", model, files, output_dir, "--max_steps", "160", "--learning_rate", learning_rate,
        "--per_device_train_batch_size", "16", "--text_column_names", "text",
    )  # fmt: skip


@pytest.fixture(scope="module")
def multi_label_run(seeded_bert, tmp_path_factory) -> tuple[Path, dict, dict[str, Path]]:
    files = multi_label_files(tmp_path_factory.mktemp("multi-label-data"))
    output_dir = tmp_path_factory.mktemp("multi-label-run")
    return output_dir, learn(seeded_bert, files, output_dir, "2e-3"), files


@pytest.fixture(scope="module")
def regression_run(seeded_bert, tmp_path_factory) -> tuple[Path, dict, dict[str, Path]]:
    files = regression_files(tmp_path_factory.mktemp("regression-data"))
    output_dir = tmp_path_factory.mktemp("regression-run")
    return output_dir, learn(seeded_bert, files, output_dir, "2e-3"), files


def test_multi_label_learns_tunes_one_threshold_per_class_and_saves_them_with_the_model(multi_label_run):
    output_dir, results, _ = multi_label_run
    assert results["problem_type"] == MULTI_LABEL
    # Measured with tiny BERTs of seeds 0-3: 1.0 each. Predicting both classes always gives micro-F1 0.79.
    assert results["eval_f1_micro"] > 0.9 and results["eval_f1"] > 0.9
    assert results["eval_accuracy"] > 0.8  # exact match: every class of the row right
    thresholds = results["label_thresholds"]
    assert set(thresholds) == {"cool", "warm"} and all(0 < t < 1 for t in thresholds.values())
    saved = json.loads((output_dir / "label_thresholds.json").read_text())
    assert saved["thresholds"] == thresholds and saved["tuned_on"] == "validation.jsonl"
    assert json.loads((output_dir / "results.json").read_text())["label_thresholds"] == thresholds
    # Per class at the tuned thresholds; no confusion matrix (each example has several true classes).
    assert set(results["per_class"]) == {"cool", "warm"} and results["confusion_matrix"] is None
    assert not (output_dir / "confusion_matrix.png").exists()
    rows = read_jsonl(output_dir / "eval_predictions.jsonl")
    assert len(rows) == 64 and all(isinstance(row["prediction"], list) for row in rows)
    for row in rows:  # a class is predicted exactly when its probability reaches its threshold
        assert row["prediction"] == [
            name for name, p in row["probabilities"].items() if p >= thresholds[name]
        ]


def test_multi_label_metrics_are_exact_match_and_f1_at_the_thresholds(multi_label_run):
    """results.json's tuned figures recomputed from the written predictions and the validation labels."""
    from sklearn.metrics import f1_score

    output_dir, results, files = multi_label_run
    names = ["cool", "warm"]
    truth = np.array([[name in row["label"] for name in names] for row in read_jsonl(files["validation"])])
    predicted = np.array(
        [
            [name in row["prediction"] for name in names]
            for row in read_jsonl(output_dir / "eval_predictions.jsonl")
        ]
    )
    assert results["eval_tuned_accuracy"] == pytest.approx(float((truth == predicted).all(axis=1).mean()))
    assert results["eval_tuned_f1"] == pytest.approx(f1_score(truth, predicted, average="macro"))
    assert results["eval_tuned_f1_micro"] == pytest.approx(f1_score(truth, predicted, average="micro"))


def test_the_multi_label_test_split_is_scored_at_the_thresholds_tuned_on_validation():
    """The Trainer scores the test split at 0.5; the record keeps its figures at the tuned thresholds."""
    from recipes_lib.evaluation.metrics import TaskMetrics
    from recipes_lib.evaluation.predictions import final_outputs

    truth = np.array([[1, 0], [0, 1], [1, 1], [0, 0]] * 4, dtype=np.float32)
    probabilities = np.where(truth == 1, 0.3, 0.1)  # a class present at 0.3: none reaches 0.5
    logits = np.log(probabilities / (1 - probabilities))
    scorer = TaskMetrics(MULTI_LABEL, 2)
    at_half = {f"test_{name}": value for name, value in scorer.scores(logits, truth).items()}
    assert at_half["test_f1_micro"] == 0.0
    outputs = final_outputs(
        (logits, truth), (logits, truth, dict(at_half)), scorer, ["a", "b"], None, "v.csv"
    )
    assert all(0.1 < threshold <= 0.3 for threshold in outputs.thresholds)
    assert outputs.test_metrics == {"test_accuracy": 1.0, "test_f1": 1.0, "test_f1_micro": 1.0}
    assert outputs.results["eval_tuned_accuracy"] == 1.0


def test_regression_learns_and_reports_mse_pearson_and_spearman(regression_run):
    from scipy.stats import pearsonr

    output_dir, results, files = regression_run
    assert results["problem_type"] == REGRESSION and results["num_labels"] == 1
    assert results["eval_accuracy"] is None and results["per_class"] is None
    assert results["eval_pearson"] > 0.8 and results["eval_spearman"] > 0.7  # measured: 0.90-0.96, 0.84-0.97
    assert results["eval_mse"] == pytest.approx(results["eval_loss"], rel=1e-5)
    rows = read_jsonl(output_dir / "eval_predictions.jsonl")
    scores = [row["prediction"] for row in rows]
    targets = [float(line.rsplit(",", 1)[1]) for line in files["validation"].read_text().splitlines()[1:]]
    assert results["eval_pearson"] == pytest.approx(pearsonr(scores, targets)[0], abs=1e-4)


def assert_same_predictions(actual: list[dict], expected: list[dict]) -> None:
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        if isinstance(want["prediction"], float):
            assert got["prediction"] == pytest.approx(want["prediction"], abs=TOLERANCE)
            continue
        assert got["prediction"] == want["prediction"]
        assert got["probabilities"] == pytest.approx(want["probabilities"], abs=TOLERANCE)


@pytest.mark.parametrize("task", ["multi_label", "regression"])
def test_predict_gives_the_evaluation_predictions_for_a_full_model_and_a_merged_adapter(
    task, multi_label_run, regression_run, tiny_bert, tmp_path
):
    from recipes_workbench.tools.predict import predict

    output_dir, _, files = multi_label_run if task == "multi_label" else regression_run
    assert_same_predictions(
        predict(output_dir, files["validation"], progress=False),
        read_jsonl(output_dir / "eval_predictions.jsonl"),
    )
    lora_dir = tmp_path / "lora"
    results = trained("lora", tiny_bert, files, lora_dir, "--merge_adapter", "true", "--max_steps", "4")
    # The merged model is scored on its own, and a LoRA merge gives the adapter model's figures.
    assert results["merged_model"].startswith(
        "a plain fp32 model, the adapter folded into the base's weights"
    )
    for name in ("f1_micro", "accuracy") if task == "multi_label" else ("mse", "pearson"):
        assert results[f"merged_eval_{name}"] == pytest.approx(results[f"eval_{name}"], abs=1e-4)
    evaluated = read_jsonl(lora_dir / "eval_predictions.jsonl")
    for run_dir in (lora_dir, lora_dir / "merged"):
        assert_same_predictions(predict(run_dir, files["validation"], progress=False), evaluated)


def test_predict_decides_a_multi_label_run_at_the_thresholds_saved_with_it(multi_label_run, tmp_path):
    """label_thresholds.json beside the model, not 0.5: at 1.0 for every class, no row gets a class."""
    import shutil

    from recipes_workbench.tools.predict import predict

    output_dir, results, files = multi_label_run
    assert any(row["prediction"] for row in read_jsonl(output_dir / "eval_predictions.jsonl"))
    run = shutil.copytree(output_dir, tmp_path / "run")
    every_class = dict.fromkeys(results["label_thresholds"], 1.0)
    (run / "label_thresholds.json").write_text(json.dumps({"thresholds": every_class}))
    rows = predict(run, files["validation"], progress=False)
    assert rows and all(row["prediction"] == [] for row in rows)


def test_a_multi_label_model_loads_in_a_transformers_pipeline_with_sigmoid_scores(multi_label_run):
    from transformers import pipeline

    output_dir, _, files = multi_label_run
    classifier = pipeline("text-classification", model=str(output_dir), top_k=None, device="cpu")
    text = read_jsonl(files["validation"])[0]["text"]
    (result,) = classifier([text])
    scores = {item["label"]: item["score"] for item in result}
    expected = read_jsonl(output_dir / "eval_predictions.jsonl")[0]["probabilities"]
    assert scores == pytest.approx(expected, abs=TOLERANCE)


@pytest.mark.parametrize(
    "config, problem_type",
    [("demo_multilabel.yaml", MULTI_LABEL), ("demo_regression.yaml", REGRESSION)],
)
def test_the_shipped_task_data_reads_as_its_task_with_evaluation_texts_training_never_shows(
    config, problem_type
):
    import yaml

    settings = yaml.safe_load((REPO_ROOT / "recipes" / "configs" / config).read_text())
    files = {split: REPO_ROOT / settings[f"{split}_file"] for split in ("train", "validation", "test")}
    data = load_classification_data(
        DataArguments(
            train_file=str(files["train"]),
            validation_file=str(files["validation"]),
            test_file=str(files["test"]),
            label_column_name=settings["label_column_name"],
        )
    )
    assert data.labels.problem_type == problem_type and data.test_has_labels
    sizes = {split: len(data.raw[split]) for split in ("train", "validation", "test")}
    assert sizes == {"train": 1200, "validation": 300, "test": 300}
    train_texts = set(data.raw["train"]["text"])
    assert not train_texts & set(data.raw["validation"]["text"])
    assert not set(data.raw["test"]["text"]) & (train_texts | set(data.raw["validation"]["text"]))


@pytest.mark.parametrize("recipe", ["adamw_8bit", "qlora"])
def test_the_other_recipes_train_both_tasks_and_predict_what_they_evaluated(recipe, tiny_bert, tmp_path):
    from recipes_workbench.tools.predict import predict

    for task, files in (
        (MULTI_LABEL, multi_label_files(tmp_path / "multi", 32, 16)),
        (REGRESSION, regression_files(tmp_path / "scores", 32, 16)),
    ):
        output_dir = tmp_path / f"{recipe}-{task}"
        results = trained(recipe, tiny_bert, files, output_dir)
        assert results["problem_type"] == task
        assert_same_predictions(
            predict(output_dir, files["validation"], progress=False),
            read_jsonl(output_dir / "eval_predictions.jsonl"),
        )


def test_the_end_of_a_multi_label_run_shows_its_weakest_labels_and_keeps_them_all(caplog):
    """Issue #50 item 6: the five labels of lowest validation F1 on the terminal (a tie: more rows first),
    every label's precision, recall, F1 and support in results.json's per_class."""
    import logging

    from recipes_lib.evaluation.metrics import TaskMetrics
    from recipes_lib.evaluation.predictions import final_outputs

    names = [f"label{i}" for i in range(7)]
    rng = np.random.default_rng(0)
    references = (rng.random((60, 7)) < 0.3).astype(np.float32)
    references[:, 5] = 0
    references[:10, 5] = 1  # label5: 10 rows, never predicted
    references[:, 6] = 0
    references[:2, 6] = 1  # label6: 2 rows, never predicted either: F1 0 too, fewer rows missed
    # Logits that get labels 0-4 right more or less often: label i flipped on a share i/10 of the rows.
    logits = np.where(references == 1, 3.0, -3.0)
    for i in range(5):
        flipped = rng.random(60) < i / 10
        logits[flipped, i] *= -1
    logits[:, 5:] = -3.0
    with caplog.at_level(logging.INFO, logger="recipes_lib"):
        outputs = final_outputs(
            (logits, references), None, TaskMetrics(MULTI_LABEL, 7), names, None, "dev.jsonl"
        )
    per_class = outputs.results["per_class"]
    assert list(per_class) == names and all(
        set(s) == {"precision", "recall", "f1", "support"} for s in per_class.values()
    )
    assert per_class["label5"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 10}
    table = caplog.text[caplog.text.index("The 5 weakest of 7 labels") :]
    shown = [line.split()[0] for line in table.splitlines()[2:7]]
    by_f1 = sorted(names[:5], key=lambda name: per_class[name]["f1"])
    assert shown == ["label5", "label6", *by_f1[:3]]
