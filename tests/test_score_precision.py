"""A score is a float (issue #55): a regression head computes in fp32 under bf16 autocast, so predictions and
evaluation are not rounded to bf16's 8-bit mantissa; classification heads, saving and reloading are unchanged."""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification

from recipes_lib.modeling.adapters import load_trained_model
from recipes_lib.modeling.score_head import score_head_in_fp32


def regression_model(tiny_bert, **config):
    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_pretrained(
        tiny_bert, ignore_mismatched_sizes=True, **config
    ).eval()


def scores_under_bf16_autocast(model) -> torch.Tensor:
    inputs = torch.randint(5, 40, (64, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        return model(input_ids=inputs).logits


def test_a_regression_score_under_bf16_autocast_is_computed_in_fp32(tiny_bert):
    model = score_head_in_fp32(regression_model(tiny_bert, num_labels=1, problem_type="regression"))
    with torch.no_grad():
        model.classifier.weight.mul_(40)  # a spread of scores, as a trained head gives
    scores = scores_under_bf16_autocast(model)
    assert scores.dtype == torch.float32
    # bf16 keeps 8 bits: 64 scores spread over a range would share values; fp32 gives each its own.
    assert len(torch.unique(scores)) == len(scores)
    plain = scores_under_bf16_autocast(regression_model(tiny_bert, num_labels=1, problem_type="regression"))
    assert plain.dtype == torch.bfloat16  # what the head gave before: the body's autocast reaches it


def test_the_model_a_recipe_loads_for_regression_scores_in_fp32(tiny_bert):
    """What the recipes load (modeling.loading.load_model), not only the helper: the head leaves autocast."""
    from recipes_lib.config.arguments import ModelArguments
    from recipes_lib.modeling.loading import load_model

    model_args = ModelArguments(model_name_or_path=str(tiny_bert))
    config = AutoConfig.from_pretrained(tiny_bert, num_labels=1, problem_type="regression")
    model = load_model(model_args, config).eval()
    assert scores_under_bf16_autocast(model).dtype == torch.float32


def test_classification_heads_and_the_saved_weights_are_unchanged(tiny_bert, tmp_path):
    classifier = score_head_in_fp32(regression_model(tiny_bert, num_labels=2))
    assert type(classifier.classifier) is torch.nn.Linear
    assert scores_under_bf16_autocast(classifier).dtype == torch.bfloat16
    model = score_head_in_fp32(regression_model(tiny_bert, num_labels=1, problem_type="regression"))
    keys = set(model.state_dict())
    model.save_pretrained(tmp_path)
    reloaded = load_trained_model(tmp_path)  # what predict and the gate load: fp32 head again
    assert set(reloaded.state_dict()) == keys
    assert scores_under_bf16_autocast(reloaded).dtype == torch.float32


def test_predict_names_how_the_int8_file_was_made_as_the_export_report_does(tmp_path):
    """Issue #55: predict on model.int8.onnx said 'dynamo exporter' where export_report.json said the int8 model
    was made from the TorchScript trace."""
    from recipes_workbench.export.bundle import ExportedModel

    settings = {"exporter": "dynamo", "run": {"recipe": "full_ft"}}
    report = {"int8": {"made_from": "TorchScript trace, eager attention"}}
    int8 = ExportedModel(tmp_path, tmp_path / "model.int8.onnx", settings, report)
    fp32 = ExportedModel(tmp_path, tmp_path / "model.onnx", settings, report)
    assert int8.describe() == (
        "ONNX export (model.int8.onnx, int8, made from TorchScript trace, eager attention) of a full_ft run"
    )
    assert fp32.describe() == "ONNX export (model.onnx, dynamo exporter) of a full_ft run"


def test_a_score_is_not_called_one_class():
    from recipes_lib.data.labels import LabelMapping
    from recipes_lib.run.preparation import labels_in_words

    assert (
        labels_in_words(LabelMapping(names=["score"], to_id={}, problem_type="regression"))
        == "a score (score)"
    )
    two = LabelMapping(names=["cool", "warm"], to_id={"cool": 0, "warm": 1})
    assert labels_in_words(two) == "2 classes (cool, warm)"
