"""The script sees what the Trainer gets: parsed arguments are never changed; what the run resolves
(the task, the precision, --auto_batch_size's batch) comes back as copies (`dataclasses.replace`)."""

from __future__ import annotations

import copy
import dataclasses
from unittest import mock

import pytest

import recipes_lib.training.autofit as autofit
from recipes_lib.config.recipe_spec import TrainingShape
from recipes_lib.memory.planner import Setup, load_config, plan_memory
from tests.helpers.repo import load_recipe
from tests.helpers.runs import QUICK, run_args


def _parse(argv):
    from recipes_lib.config.parsing import parse_arguments
    from recipes_lib.config.registry import RECIPES

    return parse_arguments(RECIPES["full_ft"], ["--output_dir", "unused", *argv])


def snapshot(arguments) -> dict:
    """Every parsed dataclass, field by field, as deep copies."""
    parts = {"model": arguments.model, "data": arguments.data, "training": arguments.training}
    parts.update({cls.__name__: options for cls, options in arguments.recipe_options.items()})
    return {name: copy.deepcopy(dataclasses.asdict(part)) for name, part in parts.items()}


def test_a_resolved_copy_keeps_the_precision_decision_and_shares_nothing_with_the_parsed_arguments():
    """`dataclasses.replace` on a transformers 5 TrainingArguments runs __post_init__ again: bf16/fp16,
    mixed_precision, the device and the reason for the precision must come out as decided."""
    from accelerate.state import PartialState

    training = _parse(["--early_stopping_patience", "2", "--report_to", "none"]).training
    before = copy.deepcopy(dataclasses.asdict(training))
    resolved = training.resolved(per_device_train_batch_size=4, gradient_accumulation_steps=8)
    assert resolved is not training
    assert dataclasses.asdict(training) == before
    changed = {key for key, value in dataclasses.asdict(resolved).items() if value != before[key]}
    assert changed == {"per_device_train_batch_size", "gradient_accumulation_steps"}
    for name in ("bf16", "fp16", "mixed_precision", "precision_choice", "device", "use_cpu", "capability"):
        assert getattr(resolved, name) == getattr(training, name), name
    assert resolved.precision_choice.explicit is False  # still the automatic choice, not "--bf16 false"
    assert resolved.accelerator_config is not training.accelerator_config
    assert resolved.load_best_model_at_end and resolved.metric_for_best_model == "loss"
    assert PartialState().device == resolved.device  # the accelerator state is still this process's


def test_a_resolved_copy_takes_the_familys_precision_and_the_parsed_arguments_keep_theirs(monkeypatch):
    import recipes_lib.config.arguments as config
    from recipes_lib.config.precision import DeviceCapability

    turing = DeviceCapability(
        "cuda", "Tesla T4 (compute capability 7.5)", native_bf16=False, native_fp16=True
    )
    monkeypatch.setattr(config, "detect_capability", lambda use_cpu: turing)  # automatic fp16
    training = _parse([]).training
    assert (training.precision, training.fp16) == ("fp16", True)
    resolved = training.resolved(training.precision_for("deberta-v2"))
    assert (resolved.precision, resolved.fp16, resolved.bf16, resolved.mixed_precision) == (
        "fp32",
        False,
        False,
        "no",
    )
    assert (training.precision, training.fp16, training.mixed_precision) == ("fp16", True, "fp16")


def test_an_explicit_choice_stays_explicit_in_the_copy_and_its_warning_is_not_repeated(monkeypatch, caplog):
    import recipes_lib.config.arguments as config
    from recipes_lib.config.precision import DeviceCapability

    avx2 = DeviceCapability("cpu", "CPU, AVX2 kernels", native_bf16=False, native_fp16=False)
    monkeypatch.setattr(config, "detect_capability", lambda use_cpu: avx2)  # bf16 only emulated
    with caplog.at_level("WARNING", logger="recipes_lib"):
        training = _parse(["--bf16", "true"]).training
        warned = [r.message for r in caplog.records if "emulated" in r.message]
        resolved = training.resolved()
    assert len(warned) == 1
    assert [r.message for r in caplog.records if "emulated" in r.message] == warned  # none from the copy
    assert resolved.precision_choice == training.precision_choice and resolved.precision_choice.explicit
    assert (resolved.bf16, resolved.mixed_precision) == (True, "bf16")


def test_the_parsed_arguments_are_unchanged_after_the_run_has_trained(tiny_bert, learnable_data, tmp_path):
    """full_ft with --auto_batch_size (the planner's batch 4 x 4 for the 16 asked) and the task left
    `auto`: the Trainer trains with the resolved copy; every parsed field stays as parsed."""
    config = load_config(str(tiny_bert))
    four = Setup(
        shape=TrainingShape(), batch_size=4, seq_length=32, device="cpu", gradient_accumulation_steps=4
    )
    recipe = load_recipe("full_ft")
    parse = recipe.parse_arguments
    parsed = {}

    def parse_and_keep(spec, argv):
        parsed["arguments"] = parse(spec, argv)
        parsed["as_parsed"] = snapshot(parsed["arguments"])
        return parsed["arguments"]

    handed = {}
    trainer_class = recipe.RecipeTrainer

    def trainer_and_keep(*args, **kwargs):
        handed["args"] = kwargs["args"]
        return trainer_class(*args, **kwargs)

    args = run_args(tiny_bert, learnable_data, tmp_path / "run", "--auto_batch_size", "true", **QUICK)
    args[args.index("--per_device_train_batch_size") + 1] = "16"
    with (
        mock.patch.object(autofit, "device_budget_bytes", lambda device: plan_memory(config, four).total),
        mock.patch.object(recipe, "parse_arguments", parse_and_keep),
        mock.patch.object(recipe, "RecipeTrainer", trainer_and_keep),
    ):
        results = recipe.main(args)

    arguments = parsed["arguments"]
    after = snapshot(arguments)
    for name, fields in parsed["as_parsed"].items():
        assert after[name] == fields, name  # field by field, after training
    assert arguments.data.problem_type == "auto"
    assert (
        arguments.training.per_device_train_batch_size,
        arguments.training.gradient_accumulation_steps,
    ) == (16, 1)
    # The Trainer got a copy with what the run resolved; results.json's config says what ran.
    assert handed["args"] is not arguments.training
    assert (handed["args"].per_device_train_batch_size, handed["args"].gradient_accumulation_steps) == (4, 4)
    assert results["config"]["problem_type"] == "single_label_classification"
    assert (
        results["config"]["per_device_train_batch_size"],
        results["config"]["gradient_accumulation_steps"],
    ) == (
        4,
        4,
    )
    assert results["train_steps"] == QUICK["steps"]


@pytest.mark.parametrize("module", ["full_ft", "lora", "adamw_8bit", "qlora"])
def test_every_recipe_hands_the_trainer_the_resolved_copy_in_view(module):
    from tests.helpers.repo import recipe_script

    text = recipe_script(module).read_text()
    assert "training_args = run.resolve(args.training)" in text
    assert "args=training_args," in text and "args=args.training" not in text
