"""A run or a command outside the supported transformers range fails at its start, naming the range."""

from __future__ import annotations

import pytest

from recipes_lib.config import versions


def test_the_supported_range_is_read_from_the_installed_metadata():
    specifier = versions.supported_range("transformers")
    assert specifier is not None and ">=" in specifier and "<6" in specifier


@pytest.mark.parametrize("installed", ["5.0.0", "6.0.0"])
def test_an_unsupported_transformers_fails_with_one_line_naming_the_range(installed, monkeypatch):
    real_version = versions.metadata.version
    monkeypatch.setattr(
        versions.metadata, "version", lambda name: installed if name == "transformers" else real_version(name)
    )
    with pytest.raises(ImportError) as error:
        versions.check_supported_versions()
    message = str(error.value)
    assert "\n" not in message
    assert f"transformers {installed} is installed" in message
    assert versions.supported_range("transformers") in message


@pytest.mark.parametrize("start", ["a recipe's parsing", "a recipes-lib command"])
def test_a_run_and_a_command_check_the_range_where_they_start(start, monkeypatch):
    """Not at import (tests/test_import_side_effects.py): where a recipe parses its arguments, and in
    the `recipes-lib` entry point before any command runs."""
    from recipes_lib.config.parsing import parse_arguments
    from recipes_workbench.cli.main import main
    from recipes_workbench.recipes import RECIPES

    real_version = versions.metadata.version
    monkeypatch.setattr(
        versions.metadata, "version", lambda name: "5.0.0" if name == "transformers" else real_version(name)
    )
    with pytest.raises(versions.UnsupportedVersion, match="transformers 5.0.0 is installed"):
        if start == "a recipes-lib command":
            main(["show", "no-such-run"])
        else:
            parse_arguments(RECIPES["full_ft"], ["--output_dir", "unused"])


def test_the_installed_transformers_is_supported_and_the_check_reads_it(monkeypatch):
    from packaging.specifiers import SpecifierSet

    installed = versions.metadata.version("transformers")
    assert SpecifierSet(versions.supported_range("transformers")).contains(installed, prereleases=True)
    looked_up = []
    real_version = versions.metadata.version
    monkeypatch.setattr(
        versions.metadata, "version", lambda name: looked_up.append(name) or real_version(name)
    )
    assert versions.check_supported_versions() is None  # no error for what is installed
    assert "transformers" in looked_up  # and it did look at the installed transformers


@pytest.mark.parametrize("flag", ["activation_checkpointing", "gradient_checkpointing"])
def test_activation_checkpointing_by_either_name_on_every_supported_release(flag, tmp_path):
    """transformers 5.23 renamed gradient_checkpointing; on older releases the recipes add the new name."""
    from recipes_lib.config.arguments import RecipeTrainingArguments

    args = RecipeTrainingArguments(output_dir=str(tmp_path), report_to="none", **{flag: True})
    assert args.activation_checkpointing and args.gradient_checkpointing  # the Trainer reads either
    assert not RecipeTrainingArguments(output_dir=str(tmp_path), report_to="none").activation_checkpointing


def test_a_checkpoint_head_of_another_shape_is_initialised_afresh_even_where_quantized_loading_kept_it():
    """transformers 5.6 loads a 2-class head into a 1-output head under a quantization config
    (ignore_mismatched_sizes skipped); the loader resets it, as later releases do themselves."""
    import torch
    from torch import nn
    from transformers import BertConfig, BertForSequenceClassification

    from recipes_lib.modeling.loading import reset_wrong_shaped_linears

    config = BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=1,
    )
    model = BertForSequenceClassification(config)
    assert reset_wrong_shaped_linears(model) == []  # a model loaded right is left as it is
    model.classifier.weight = nn.Parameter(torch.full((2, 16), 7.0))  # the checkpoint's 2-class head
    model.classifier.bias = nn.Parameter(torch.full((2,), 7.0))
    assert reset_wrong_shaped_linears(model) == [("classifier.weight", (2, 16), (1, 16))]
    assert model.classifier.weight.shape == (1, 16) and model.classifier.bias.shape == (1,)
    assert model.classifier.weight.abs().max() < 1 and torch.all(model.classifier.bias == 0)
    logits = model(input_ids=torch.tensor([[2, 5, 3]])).logits
    assert logits.shape == (1, 1)
