"""The script sees what the Trainer gets: parsed arguments are never changed; what the run decides
(the task, the precision, --auto_batch_size's batch) comes back from `prepare` as new values, and the
Trainer's TrainingArguments are built once."""

from __future__ import annotations

import copy
import dataclasses
from unittest import mock

import pytest

from tests.helpers.repo import load_recipe
from tests.helpers.runs import QUICK, run_args


def _parse(argv):
    from recipes_lib.config.parsing import parse_arguments
    from recipes_workbench.recipes import RECIPES

    return parse_arguments(RECIPES["full_ft"], ["--output_dir", "unused", *argv])


def snapshot(arguments) -> dict:
    """Every parsed dataclass, field by field, as deep copies."""
    parts = {"model": arguments.model, "data": arguments.data, "training": arguments.training}
    parts.update({cls.__name__: options for cls, options in arguments.recipe_options.items()})
    return {name: copy.deepcopy(dataclasses.asdict(part)) for name, part in parts.items()}


def test_the_trainers_copy_holds_the_decision_and_shares_nothing_with_the_parsed_arguments():
    """`dataclasses.replace` on a transformers 5 TrainingArguments runs __post_init__ again: the copy
    prepare builds must hold what was decided and nothing else changed, and share no mutable value."""
    from accelerate.state import PartialState

    from recipes_lib.run.preparation import trainer_arguments

    training = _parse(["--early_stopping_patience", "2", "--report_to", "none"]).training
    before = copy.deepcopy(dataclasses.asdict(training))
    built = trainer_arguments(
        training, bf16=False, fp16=False, per_device_train_batch_size=4, gradient_accumulation_steps=8
    )
    assert built is not training
    assert dataclasses.asdict(training) == before
    changed = {key for key, value in dataclasses.asdict(built).items() if value != before[key]}
    assert changed == {"per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "fp16"}
    assert (training.bf16, training.fp16, built.mixed_precision) == (None, None, "no")
    assert built.accelerator_config is not training.accelerator_config
    assert built.load_best_model_at_end and built.metric_for_best_model == "loss"
    assert PartialState().device == built.device  # the accelerator state is still this process's


def test_an_explicit_choice_the_machine_emulates_warns_once_when_decided(monkeypatch, caplog):
    import recipes_lib.config.precision as precision
    from recipes_lib.config.precision import DeviceCapability, decide_precision

    avx2 = DeviceCapability("cpu", "CPU, AVX2 kernels", native_bf16=False, native_fp16=False)
    monkeypatch.setattr(precision, "detect_capability", lambda use_cpu: avx2)  # bf16 only emulated
    with caplog.at_level("WARNING", logger="recipes_lib"):
        training = _parse(["--bf16", "true"]).training
        assert not [r for r in caplog.records if "emulated" in r.message]  # parsing decides nothing
        choice, settings = decide_precision(training, "bert")
    assert len([r for r in caplog.records if "emulated" in r.message]) == 1
    assert choice.explicit and (settings["bf16"], settings["fp16"]) == (True, False)


def test_the_parsed_arguments_are_unchanged_after_the_run_has_trained(tiny_bert, learnable_data, tmp_path):
    """full_ft with --auto_batch_size (4 x 4 asked: it trains 16 x 1) and the task left `auto`: the
    Trainer trains with the resolved copy; every parsed field stays as parsed."""
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
    args[args.index("--per_device_train_batch_size") + 1] = "4"
    args += ["--gradient_accumulation_steps", "4"]
    from recipes_lib.config.arguments import RecipeTrainingArguments

    built, post_init = [], RecipeTrainingArguments.__post_init__

    def count_builds(self):
        built.append(self)
        post_init(self)

    with (
        mock.patch.object(recipe, "parse_arguments", parse_and_keep),
        mock.patch.object(recipe, "RecipeTrainer", trainer_and_keep),
        mock.patch.object(RecipeTrainingArguments, "__post_init__", count_builds),
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
    ) == (4, 4)
    # The Trainer got a copy with what the run decided, built once; results.json's config says what ran.
    assert handed["args"] is not arguments.training
    assert built == [arguments.training, handed["args"]]
    assert (handed["args"].per_device_train_batch_size, handed["args"].gradient_accumulation_steps) == (16, 1)
    assert results.config["problem_type"] == "single_label_classification"
    assert (
        results.config["per_device_train_batch_size"],
        results.config["gradient_accumulation_steps"],
    ) == (16, 1)
    assert results.train_steps == QUICK["steps"]


@pytest.mark.parametrize("module", ["full_ft", "lora", "adamw_8bit", "qlora", "distill"])
def test_every_recipe_hands_the_trainer_what_prepare_decided_in_view(module):
    from tests.helpers.repo import recipe_script

    text = recipe_script(module).read_text()
    assert "prepared = prepare(args" in text and "prepared.training_args" in text
    assert "args=training_args," in text and "args=args.training" not in text


def test_nothing_writes_into_prepared_after_it_is_built(tiny_bert, learnable_data, tmp_path):
    """prepare's values stay as built through training and write_results: its fields, the data record
    (frozen; tokenize returns the splits and their truncation report instead of writing them in), the
    tokenized splits and the metric function's settings (built whole, not set afterwards). Its
    `last_predictions`, which the Trainer's calls fill, is the one exception left (run/metrics.py)."""
    recipe = load_recipe("full_ft")
    prepare, built = recipe.prepare, {}

    def prepare_and_keep(*args, **kwargs):
        prepared = prepare(*args, **kwargs)
        built.update(prepared=prepared, snapshot=_prepared_values(prepared))
        return prepared

    with mock.patch.object(recipe, "prepare", prepare_and_keep):
        recipe.main(run_args(tiny_bert, learnable_data, tmp_path / "run", **QUICK))
    prepared = built["prepared"]
    after = _prepared_values(prepared)
    for name, value in built["snapshot"].items():
        assert after[name] is value, f"{name} was replaced after prepare built it"
    with pytest.raises(dataclasses.FrozenInstanceError):
        prepared.data.truncation = {}


def _prepared_values(prepared) -> dict:
    values = {f"prepared.{f.name}": getattr(prepared, f.name) for f in dataclasses.fields(prepared)}
    values |= {f"data.{f.name}": getattr(prepared.data, f.name) for f in dataclasses.fields(prepared.data)}
    values |= {f"data.tokenized[{split}]": dataset for split, dataset in prepared.data.tokenized.items()}
    settings = {name: value for name, value in vars(prepared.metrics).items() if name != "last_predictions"}
    return values | {f"metrics.{name}": value for name, value in settings.items()}
