"""Importing the library outside the supported transformers range fails at once, naming the range."""

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


def test_the_installed_transformers_is_supported():
    versions.check_supported_versions()


@pytest.mark.parametrize("flag", ["activation_checkpointing", "gradient_checkpointing"])
def test_activation_checkpointing_by_either_name_on_every_supported_release(flag, tmp_path):
    """transformers 5.23 renamed gradient_checkpointing; on older releases the recipes add the new name."""
    from recipes_lib.config.arguments import RecipeTrainingArguments

    args = RecipeTrainingArguments(output_dir=str(tmp_path), report_to="none", **{flag: True})
    assert args.activation_checkpointing and args.gradient_checkpointing  # the Trainer reads either
    assert not RecipeTrainingArguments(output_dir=str(tmp_path), report_to="none").activation_checkpointing
