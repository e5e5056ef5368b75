"""The run's bookkeeping with a stock `transformers.Trainer`: a copy of recipes/full_ft.py whose only
change is `RecipeTrainer(` -> `transformers.Trainer(` still trains and writes results.json, the
prediction files and the model card, with the keys and metrics RecipeTrainer's run writes.

The stock Trainer evaluates in length-grouped order under the recipes' default
train_sampling_strategy (group_by_length); the prediction files must still follow the rows.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.data import read_jsonl
from tests.helpers.models import build_tiny_bert
from tests.helpers.repo import recipe_script
from tests.helpers.runs import QUICK, run_args, run_in_process

RECIPE_TRAINER_IMPORT = "from recipes_lib.training.trainer import RecipeTrainer\n"


def stock_trainer_copy_of_full_ft(directory: Path) -> Path:
    """recipes/full_ft.py with transformers.Trainer in place of RecipeTrainer, and nothing else changed."""
    text = recipe_script("full_ft").read_text()
    assert text.count(RECIPE_TRAINER_IMPORT) == 1 and text.count("RecipeTrainer(") == 1
    text = text.replace(RECIPE_TRAINER_IMPORT, "import transformers\n")
    text = text.replace("RecipeTrainer(", "transformers.Trainer(")
    assert "RecipeTrainer" not in text.replace("# transformers.Trainer plus safeguards", "")
    path = directory / "full_ft_stock_trainer.py"
    path.write_text(text)
    return path


def run_script(path: Path, args: list[str]) -> dict:
    spec = importlib.util.spec_from_file_location("_full_ft_stock_trainer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(args)


def validation_probabilities(output_dir: Path, validation_file: Path, rows: int) -> np.ndarray:
    """The saved model's class probabilities for the first `rows` validation rows, in file order."""
    import pandas
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    texts = pandas.read_csv(validation_file)["text"].tolist()[:rows]
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    with torch.no_grad():
        batch = tokenizer(texts, padding=True, truncation=True, max_length=32, return_tensors="pt")
        return model(**batch).logits.softmax(-1).numpy()


@pytest.fixture(scope="module")
def spread_bert(tmp_path_factory) -> Path:
    """A tiny BERT whose head is 200x its initial scale: its probabilities differ from row to row by
    far more than the 6 digits the prediction files keep, so rows written in another order show."""
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)
    directory = build_tiny_bert(tmp_path_factory.mktemp("spread-bert"))
    model = AutoModelForSequenceClassification.from_pretrained(directory)
    with torch.no_grad():
        model.classifier.weight.mul_(200)
    model.save_pretrained(directory)
    return directory


@pytest.mark.slow
def test_a_stock_trainer_in_full_ft_writes_the_same_results_card_and_predictions(
    spread_bert, learnable_data, tmp_path
):
    from huggingface_hub import ModelCard

    tiny_bert = spread_bert
    script = stock_trainer_copy_of_full_ft(tmp_path)
    extra = ("--test_file", str(learnable_data["validation"]))  # the validation file again
    stock_dir, recipe_dir = tmp_path / "stock", tmp_path / "recipe_trainer"
    stock = run_script(script, run_args(tiny_bert, learnable_data, stock_dir, *extra, **QUICK))
    reference = run_in_process("full_ft", run_args(tiny_bert, learnable_data, recipe_dir, *extra, **QUICK))

    written = json.loads((stock_dir / "results.json").read_text())
    assert written == json.loads(json.dumps(stock.to_dict()))  # what main() returned is what it wrote
    assert written.keys() == reference.keys()
    assert written["config"]["train_sampling_strategy"] == "group_by_length"
    assert written["eval_samples"] == QUICK["max_eval_samples"]
    for key in ("eval_accuracy", "eval_f1", "eval_loss", "test_accuracy", "train_loss", "train_tokens_per_s"):
        assert np.isfinite(written[key]), key
    assert written["train_steps"] == reference["train_steps"] == QUICK["steps"]
    assert written["precision"] == reference["precision"] == "fp32"

    # The card: README.md in output_dir, its model-index scores are results.json's.
    card = ModelCard.load(stock_dir / "README.md")
    scores = [m["value"] for r in card.data.to_dict()["model-index"][0]["results"] for m in r["metrics"]]
    assert written["eval_accuracy"] in scores and written["test_accuracy"] in scores

    # The predictions follow the validation rows, although the stock Trainer evaluated them in
    # length-grouped order: each row is the saved model's prediction for that row of the file.
    rows = read_jsonl(stock_dir / "eval_predictions.jsonl")
    assert len(rows) == written["eval_samples"]
    expected = validation_probabilities(stock_dir, learnable_data["validation"], len(rows))
    names = list(rows[0]["probabilities"])
    written_probabilities = np.array([[row["probabilities"][name] for name in names] for row in rows])
    assert np.ptp(expected[:, 0]) > 1e-3  # the rows differ by far more than the tolerance
    np.testing.assert_allclose(written_probabilities, expected, atol=1e-5)
    test_rows = read_jsonl(stock_dir / "test_predictions.jsonl")
    assert [row["prediction"] for row in test_rows[: len(rows)]] == [row["prediction"] for row in rows]


def test_any_trainer_takes_a_recipe_models_loss_as_the_mean_it_is(tiny_bert, tmp_path):
    """A classifier's forward takes **kwargs, so the stock Trainer would treat its mean loss as a sum
    (times the processes, not divided over accumulation); load_model's model says it is not."""
    from transformers import Trainer, TrainingArguments

    from recipes_lib.config.arguments import ModelArguments
    from recipes_lib.modeling.loading import load_model, load_model_config

    model_args = ModelArguments(model_name_or_path=str(tiny_bert))
    model = load_model(model_args, load_model_config(model_args))
    arguments = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    assert Trainer(model=model, args=arguments).model_accepts_loss_kwargs is False
