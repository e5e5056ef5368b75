"""What a run prints that is not the user's business: no library warning a recipe can answer itself.

Each test runs the code path that used to print the line and checks it is gone, and that what the
line was about still works.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch

from tests.helpers.data import learnable_rows, write_csv
from tests.helpers.models import FAMILIES, build_tiny_bert, build_tiny_family, logits
from tests.helpers.runs import QUICK, run_args, run_in_process

# A base model named by a Hub id, as `make demo` names all-MiniLM-L6-v2: no directory of that name
# exists here, and the tests map it to a tiny BERT the way modeling/sources.py maps a pip-installed copy.
HUB_ID = "tiny-org/tiny-bert"
# What LoRA runs printed: peft's warning when save_pretrained(save_embedding_layers="auto") cannot ask the
# Hub about the base, and transformers' deprecation of an attribute peft reads when it wraps a model.
LORA_LINES = ("Could not find a config file in", "`is_gradient_checkpointing` is deprecated")
# The run's own findings about its model, not a library's noise (issue #42): a 2-step run predicts one class,
# and its training loss is still near chance.
RUN_FINDINGS = (
    "The model never predicts",
    "The model almost never predicts",
    "Training loss at the end",
    "The model collapsed",  # a tiny random model's outputs barely depend on its input (evaluation/collapse.py)
)


@pytest.fixture
def hub_id_base(tmp_path, monkeypatch) -> Path:
    """HUB_ID resolves to a tiny BERT, offline; returns its directory."""
    from recipes_lib.modeling import sources

    directory = build_tiny_bert(tmp_path / "tiny-bert")
    original = sources.packaged_model_dir
    monkeypatch.setattr(
        sources, "packaged_model_dir", lambda name: directory if name == HUB_ID else original(name)
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # peft reads it at each save
    return directory


@pytest.fixture
def load_messages(caplog, monkeypatch):
    """What loading logs: transformers' and recipes_lib's loggers, which do not propagate once set up."""
    for name in ("transformers", "recipes_lib"):
        monkeypatch.setattr(logging.getLogger(name), "propagate", True)
    caplog.set_level(logging.INFO)
    return caplog


def tiny_data(directory: Path) -> dict[str, Path]:
    return {
        "train": write_csv(directory / "train.csv", learnable_rows(16, seed=1)),
        "validation": write_csv(directory / "validation.csv", learnable_rows(8, seed=2)),
    }


@pytest.mark.parametrize("recipe", ["lora", "qlora"])
def test_a_lora_save_of_a_hub_id_base_offline_asks_no_hub_and_reloads_to_the_same_logits(
    recipe, hub_id_base, tmp_path, load_messages
):
    """peft's save asked the Hub whether the base's vocabulary changed and, offline, warned at every
    save; the recipe knows it did not (adapters.saving_embeddings_only_if_adapted). peft's wrapping
    read an attribute transformers 5 deprecated (adapters.peft_wrapping), in training and at reload."""
    from recipes_lib.modeling.adapters import load_trained_model
    from recipes_lib.run import RecipeRun

    output_dir = tmp_path / "run"
    evaluated = {}
    write_results = RecipeRun.write_results

    def keep_the_evaluated_model(run, trainer, *args):
        evaluated["model"] = trainer.model
        return write_results(run, trainer, *args)

    # A checkpoint on the way (--save_steps 1) as well as the final model: every save goes through peft.
    args = run_args(
        HUB_ID, tiny_data(tmp_path), output_dir, "--save_steps", "1", **QUICK, save_strategy="steps"
    )
    with (
        warnings.catch_warnings(record=True) as caught,
        mock.patch.object(RecipeRun, "write_results", keep_the_evaluated_model),
    ):
        warnings.simplefilter("always")
        run_in_process(recipe, args)
        reloaded = load_trained_model(output_dir)
    # Nothing a user would see: no log record from a warning up, no warning Python shows by default
    # (it hides DeprecationWarnings outside __main__; torch's TorchScript notes are among them).
    shown = [
        str(warning.message) for warning in caught if not issubclass(warning.category, DeprecationWarning)
    ]
    shown += [
        record.getMessage()
        for record in load_messages.records
        if record.levelno >= logging.WARNING and not record.getMessage().startswith(RUN_FINDINGS)
    ]
    assert not [line for line in shown if line.startswith(LORA_LINES)], shown
    assert not shown, shown
    # The checkpoints kept (save_total_limit 1 keeps the last) hold the adapter.
    assert [(path / "adapter_model.safetensors").is_file() for path in output_dir.glob("checkpoint-*")] == [
        True
    ]

    assert reloaded.peft_config["default"].base_model_name_or_path == HUB_ID
    torch.testing.assert_close(
        logits(reloaded, output_dir), logits(evaluated["model"], output_dir), atol=1e-5, rtol=0
    )


@pytest.fixture(scope="module")
def family_bases(tmp_path_factory) -> dict[str, Path]:
    """Each family's base checkpoint, without the classification head (as published)."""
    root = tmp_path_factory.mktemp("family-bases")
    return {family: build_tiny_family(family, root / family) for family in FAMILIES}


def load(model_dir: Path, **config_changes):
    from recipes_lib.config.arguments import ModelArguments
    from recipes_lib.modeling.loading import load_model, load_model_config

    model_args = ModelArguments(model_name_or_path=str(model_dir))
    config = load_model_config(model_args)
    for key, value in config_changes.items():
        setattr(config, key, value)
    return load_model(model_args, config)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_new_head_is_one_line_of_ours_not_transformers_load_report(family, family_bases, load_messages):
    from recipes_lib.modeling.loading import LOAD_REPORT_MARK

    model = load(family_bases[family])
    messages = [record.getMessage() for record in load_messages.records]
    assert not [message for message in messages if LOAD_REPORT_MARK in message], messages
    new = [
        message for message in messages if message.startswith("Not in the checkpoint, initialised afresh: ")
    ]
    assert len(new) == 1 and all(module in new[0] for module in model.newly_initialized_modules), messages


def test_a_checkpoint_missing_encoder_weights_still_prints_transformers_load_report(
    family_bases, load_messages
):
    """A model whose body did not come from the checkpoint (here a third layer the 2-layer checkpoint
    lacks) is not the pretrained model: transformers' report says which weights, as it always did."""
    from recipes_lib.modeling.loading import LOAD_REPORT_MARK

    load(family_bases["bert"], num_hidden_layers=3)
    reports = [
        record.getMessage() for record in load_messages.records if LOAD_REPORT_MARK in record.getMessage()
    ]
    assert len(reports) == 1 and "encoder.layer.2." in reports[0]


def test_a_load_that_fails_prints_the_report_it_held_and_later_reports_pass(load_messages):
    """What transformers found explains a failed load, so the held report is printed when the block
    raises; once the block is left, transformers' reports reach the log again."""
    from recipes_lib.modeling.loading import LOAD_REPORT_MARK, TRANSFORMERS_LOADING_LOGGER, HeldLoadReport

    transformers_logger = logging.getLogger(TRANSFORMERS_LOADING_LOGGER)
    with pytest.raises(RuntimeError, match="size mismatch"), HeldLoadReport():
        transformers_logger.warning("%s: encoder.layer.0.output.dense.weight MISSING", LOAD_REPORT_MARK)
        raise RuntimeError("size mismatch")
    transformers_logger.warning("%s: after the block", LOAD_REPORT_MARK)
    reports = [
        record.getMessage() for record in load_messages.records if LOAD_REPORT_MARK in record.getMessage()
    ]
    assert reports == [
        f"{LOAD_REPORT_MARK}: encoder.layer.0.output.dense.weight MISSING",
        f"{LOAD_REPORT_MARK}: after the block",
    ]


def test_a_pip_installed_copy_is_announced_once_however_often_the_name_resolves(
    hub_id_base, load_messages, monkeypatch
):
    from recipes_lib.modeling import sources

    monkeypatch.setattr(sources, "_announced", set())
    for _ in range(3):  # config, tokenizer, weights
        assert sources.resolve_model_path(HUB_ID) == str(hub_id_base)
    announced = [record for record in load_messages.records if "pip-installed copy" in record.getMessage()]
    assert len(announced) == 1 and HUB_ID in announced[0].getMessage()


def test_checkpoints_saved_within_a_second_rotate_by_step_without_transformers_mtime_warning(
    tiny_bert, tmp_path, load_messages
):
    from transformers.utils.logging import warning_once

    warning_once.cache_clear()  # transformers prints it once per process: another test may have
    output_dir = tmp_path / "run"
    extra = ("--save_steps", "1", "--save_total_limit", "1")
    run_in_process(
        "full_ft",
        run_args(tiny_bert, tiny_data(tmp_path), output_dir, *extra, **QUICK, save_strategy="steps"),
    )
    assert sorted(path.name for path in output_dir.glob("checkpoint-*")) == ["checkpoint-2"]
    assert not [record for record in load_messages.records if "mtime" in record.getMessage()]


def test_a_full_ft_run_and_a_student_distilled_from_it_show_the_user_nothing(
    family_bases, tmp_path, load_messages
):
    """A base checkpoint without the head, as published: transformers' load report stays held back, and
    nothing else from a warning up, nor a warning Python shows by default, reaches the terminal."""
    data = tiny_data(tmp_path)
    teacher_dir, student_dir = tmp_path / "teacher", tmp_path / "student"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_in_process("full_ft", run_args(family_bases["bert"], data, teacher_dir, **QUICK))
        run_in_process(
            "distill",
            run_args(family_bases["bert"], data, student_dir, "--teacher", str(teacher_dir), **QUICK),
        )
    shown = [
        str(warning.message) for warning in caught if not issubclass(warning.category, DeprecationWarning)
    ]
    shown += [
        record.getMessage()
        for record in load_messages.records
        if record.levelno >= logging.WARNING and not record.getMessage().startswith(RUN_FINDINGS)
    ]
    assert not shown, shown
    assert (student_dir / "results.json").is_file()
