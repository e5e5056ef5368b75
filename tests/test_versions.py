"""A run or a command outside the supported transformers range fails at its start, naming the range."""

from __future__ import annotations

import pytest

from recipes_lib.config import versions


def test_the_checked_range_is_setup_cfgs():
    import configparser

    from tests.helpers.repo import REPO_ROOT

    setup = configparser.ConfigParser()
    setup.read(REPO_ROOT / "setup.cfg")
    assert versions.TRANSFORMERS in setup["options"]["install_requires"].split()


def unsupported(monkeypatch, installed="5.0.0"):
    import importlib.metadata

    real_version = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata,
        "version",
        lambda name: installed if name == "transformers" else real_version(name),
    )


@pytest.mark.parametrize("installed", ["5.0.0", "6.0.0"])
def test_an_unsupported_transformers_fails_naming_the_range_and_the_fix(installed, monkeypatch):
    unsupported(monkeypatch, installed)
    with pytest.raises(ImportError) as error:
        versions.check_supported_versions()
    message = str(error.value)
    assert f"found transformers=={installed}" in message
    assert f'pip install "{versions.TRANSFORMERS}"' in message


@pytest.mark.parametrize("start", ["a recipe's parsing", "a recipes-lib command"])
def test_a_run_and_a_command_check_the_range_where_they_start(start, monkeypatch):
    """Not at import (tests/test_import_side_effects.py): where a recipe parses its arguments, and in
    the `recipes-lib` entry point before a command that loads transformers runs."""
    from recipes_lib.config.parsing import parse_arguments
    from recipes_workbench.cli.main import main
    from recipes_workbench.recipes import RECIPES

    unsupported(monkeypatch)
    with pytest.raises(ImportError, match="found transformers==5.0.0"):
        if start == "a recipes-lib command":
            main(["families"])
        else:
            parse_arguments(RECIPES["full_ft"], ["--output_dir", "unused"])


@pytest.mark.parametrize("command", [["show", "no-such-run"], ["compare", "no-such-run", "--no_chart"]])
def test_a_command_that_reads_finished_runs_does_not_load_transformers_for_the_check(command, tmp_path):
    """show, compare and label-issues never load transformers; the check would cost its import."""
    import subprocess
    import sys

    probe = (
        "import sys; from recipes_workbench.cli.main import main; main(sys.argv[1:]); "
        "print('transformers' in sys.modules)"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe, *command], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    assert ran.stdout.splitlines()[-1] == "False", ran.stderr


def test_the_installed_transformers_is_supported():
    assert versions.check_supported_versions() is None


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
