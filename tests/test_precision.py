"""The one precision decision (precision.py): automatic choices per device, explicit ones honoured or
refused with both sides named, and results.json reporting what the layers really computed in."""

from __future__ import annotations

import json

import pytest

from recipes_lib.config.precision import DeviceCapability, choose_precision, emulation_warning
from recipes_lib.errors import ConfigError
from tests.helpers.runs import QUICK, run_args, run_in_process

AVX2_CPU = DeviceCapability("cpu", "CPU, AVX2 kernels", native_bf16=False, native_fp16=False)
AVX512_BF16_CPU = DeviceCapability("cpu", "CPU, AVX512 kernels", native_bf16=True, native_fp16=False)
AMPERE = DeviceCapability("cuda", "NVIDIA A100 (compute capability 8.0)", native_bf16=True, native_fp16=True)
TURING = DeviceCapability("cuda", "Tesla T4 (compute capability 7.5)", native_bf16=False, native_fp16=True)


@pytest.mark.parametrize(
    "capability, model_type, expected",
    [
        (AVX2_CPU, "bert", "fp32"),
        # bf16 autocast where the CPU has it natively, except for a family that fails under it.
        (AVX512_BF16_CPU, "bert", "bf16"),
        (AVX512_BF16_CPU, "deberta-v2", "bf16"),
        (AVX512_BF16_CPU, "deberta", "fp32"),
        (AVX2_CPU, "deberta", "fp32"),
        (AMPERE, "bert", "bf16"),
        (AMPERE, "deberta-v2", "bf16"),
        (TURING, "bert", "fp16"),
        (TURING, "deberta-v2", "fp32"),  # overflows in fp16
        (TURING, "deberta", "fp32"),
    ],
)
def test_automatic_precision_is_what_the_device_does_natively(capability, model_type, expected):
    choice = choose_precision(capability, bf16=None, fp16=None, launcher=None, model_type=model_type)
    assert choice.precision == expected and not choice.explicit
    assert capability.name in choice.reason


@pytest.mark.parametrize(
    "flags, launcher, expected",
    [
        ({"bf16": True}, None, "bf16"),
        ({"fp16": True}, "no", "fp16"),
        ({}, "bf16", "bf16"),
        ({}, "fp16", "fp16"),
        ({"bf16": True}, "bf16", "bf16"),  # both ask for the same: fine
        ({"bf16": False, "fp16": False}, None, "fp32"),
        ({"fp16": False}, "bf16", "bf16"),  # a lone false only rules fp16 out
        ({"fp16": True, "bf16": False}, "fp16", "fp16"),
    ],
)
def test_explicit_choices_win_over_the_device(flags, launcher, expected):
    for capability in (AVX2_CPU, TURING, AMPERE) if expected != "fp16" else (TURING, AMPERE):
        choice = choose_precision(
            capability, bf16=flags.get("bf16"), fp16=flags.get("fp16"), launcher=launcher
        )
        assert choice.precision == expected and choice.explicit


@pytest.mark.parametrize(
    "capability, flags, expected",
    [
        (AMPERE, {"fp16": False}, "bf16"),  # `fp16: false` in a Hugging Face config changes nothing here
        (AMPERE, {"bf16": False}, "fp16"),  # no bf16: the next mixed precision the GPU has
        (TURING, {"fp16": False}, "fp32"),
        (TURING, {"bf16": False}, "fp16"),
        (AVX2_CPU, {"bf16": False}, "fp32"),
    ],
)
def test_a_lone_false_rules_out_one_precision_and_leaves_the_rest_automatic(capability, flags, expected):
    choice = choose_precision(capability, bf16=flags.get("bf16"), fp16=flags.get("fp16"), launcher=None)
    assert choice.precision == expected and not choice.explicit


@pytest.mark.parametrize(
    "flags, launcher, named",
    [
        ({"bf16": False}, "bf16", ["--bf16 false", "mixed_precision: bf16"]),
        ({"fp16": True}, "bf16", ["--fp16 true", "mixed_precision: bf16"]),
        ({"bf16": True}, "fp16", ["--bf16 true", "mixed_precision: fp16"]),
        ({"bf16": True, "fp16": True}, None, ["--bf16", "--fp16"]),
        ({}, "fp8", ["mixed_precision: fp8"]),
    ],
)
def test_contradicting_choices_stop_with_both_named(flags, launcher, named):
    with pytest.raises(ConfigError) as error:
        choose_precision(AMPERE, bf16=flags.get("bf16"), fp16=flags.get("fp16"), launcher=launcher)
    for text in named:
        assert text in str(error.value)


@pytest.mark.parametrize("flags, launcher", [({"fp16": True}, None), ({}, "fp16")])
def test_fp16_on_a_cpu_is_refused_since_accelerate_would_run_fp32(flags, launcher):
    with pytest.raises(ConfigError, match="fp16 was asked for .* it would train in fp32"):
        choose_precision(AVX512_BF16_CPU, bf16=None, fp16=flags.get("fp16"), launcher=launcher)


def test_fp16_flag_on_this_cpu_stops_before_anything_is_written(tiny_bert, learnable_data, tmp_path):
    output_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match="--fp16"):
        run_in_process("full_ft", run_args(tiny_bert, learnable_data, output_dir, "--fp16", **QUICK))
    assert not output_dir.exists()


def test_an_explicit_choice_the_hardware_emulates_runs_with_a_warning():
    choice = choose_precision(AVX2_CPU, bf16=True, fp16=None, launcher=None)
    assert "no native bf16" in emulation_warning(choice, AVX2_CPU)
    assert (
        emulation_warning(
            choose_precision(AVX512_BF16_CPU, bf16=True, fp16=None, launcher=None), AVX512_BF16_CPU
        )
        is None
    )
    assert "only emulates" in emulation_warning(
        choose_precision(TURING, bf16=True, fp16=None, launcher=None), TURING
    )


def _parse(argv, **kwargs):
    from recipes_lib.config.parsing import parse_arguments
    from recipes_lib.config.recipe_spec import RecipeSpec

    return parse_arguments(RecipeSpec("full_ft"), ["--output_dir", "unused", *argv], **kwargs).training


def _decided(argv, model_type="bert"):
    """What the run decides (config/precision.py), and the Trainer's arguments built with it."""
    from recipes_lib.config.precision import decide_precision
    from recipes_lib.run.preparation import trainer_arguments

    parsed = _parse(argv)
    choice, settings = decide_precision(parsed, model_type)
    return choice, trainer_arguments(parsed, **settings)


def _on(monkeypatch, capability):
    import recipes_lib.config.precision as precision

    monkeypatch.setattr(precision, "detect_capability", lambda use_cpu: capability)


def test_bf16_false_under_a_bf16_launcher_config_is_an_error_naming_both(monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    with pytest.raises(ConfigError, match=r"--bf16 false.*mixed_precision: bf16"):
        _decided(["--bf16", "false"])
    # Without the flag the launcher's bf16 is what the Trainer's accelerator gets.
    choice, training = _decided([])
    assert (choice.precision, training.precision, training.mixed_precision, training.bf16) == (
        "bf16",
        "bf16",
        "bf16",
        True,
    )


def test_fp32_by_default_on_an_avx2_cpu_even_under_a_launcher_that_set_no(monkeypatch):
    _on(monkeypatch, AVX2_CPU)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    choice, training = _decided([])
    assert (choice.precision, training.mixed_precision, training.bf16, training.fp16) == (
        "fp32",
        "no",
        False,
        False,
    )


def test_bf16_by_default_on_a_cpu_with_native_bf16_unless_refused_or_the_family_fails_in_it(monkeypatch):
    _on(monkeypatch, AVX512_BF16_CPU)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    choice, training = _decided([])
    assert (training.precision, training.mixed_precision, training.bf16, training.use_cpu) == (
        "bf16",
        "bf16",
        True,
        True,
    )
    assert not choice.explicit and "--bf16 false" in choice.reason
    choice, settled = _decided([], model_type="deberta")
    assert (settled.precision, settled.mixed_precision, settled.bf16) == ("fp32", "no", False)
    assert "deberta fails under bf16 autocast" in choice.reason
    choice, refused = _decided(["--bf16", "false"])
    assert (refused.precision, refused.mixed_precision, refused.bf16) == ("fp32", "no", False)
    assert "bf16 ruled out" in choice.reason


def test_a_gpu_that_only_emulates_bf16_gets_fp16_and_deberta_fp32(monkeypatch):
    _on(monkeypatch, TURING)
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    choice, _ = _decided([])
    assert choice.precision == "fp16" and not choice.explicit
    choice, _ = _decided([], model_type="deberta-v2")
    assert choice.precision == "fp32" and "overflows in fp16" in choice.reason
    # An explicit fp16 stays fp16 for DeBERTa too: the user asked for it.
    choice, _ = _decided(["--fp16"], model_type="deberta-v2")
    assert choice.precision == "fp16" and choice.explicit


def test_the_parsed_arguments_hold_the_request_and_the_trainers_copy_the_decision(monkeypatch):
    """--bf16 alone parses on a machine without a bf16 GPU (TrainingArguments would check it against
    one): the parsed arguments keep what was asked, None where automatic."""
    _on(monkeypatch, AVX2_CPU)
    parsed = _parse(["--bf16", "true"])
    assert (parsed.bf16, parsed.fp16, parsed.tf32, parsed.dataloader_pin_memory) == (True, None, None, None)
    choice, training = _decided(["--bf16", "true"])
    assert choice.explicit and (training.bf16, training.fp16, training.mixed_precision) == (
        True,
        False,
        "bf16",
    )
    assert training.use_cpu and training.dataloader_pin_memory is False


def test_save_steps_alone_switches_to_step_saving_and_a_contradiction_is_an_error():
    training = _parse(["--save_steps", "20"])
    assert (str(training.save_strategy.value), training.save_steps) == ("steps", 20)
    with pytest.raises(ConfigError, match="save_steps 20 was given with save_strategy 'epoch'"):
        _parse(["--save_steps", "20", "--save_strategy", "epoch"])
    training = _parse(["--eval_steps", "5"])
    assert str(training.eval_strategy.value) == "steps"


@pytest.mark.parametrize(
    "recipe, extra, launcher, expected",
    [
        # The suite runs with oneDNN capped below bf16 (conftest.py): fp32 on every CPU.
        ("full_ft", [], "no", ("fp32", None)),
        ("full_ft", [], "bf16", ("bf16", None)),  # a bf16 launcher config on CPU: bf16, as asked
        ("qlora", [], None, ("fp32", "fp32")),  # 4-bit matmuls follow the run: fp32 on CPU
        ("qlora", ["--bf16", "true"], None, ("bf16", "bf16")),
    ],
)
def test_results_report_the_precision_the_layers_ran_in(
    recipe, extra, launcher, expected, tiny_bert, learnable_data, tmp_path, monkeypatch
):
    if launcher is None:
        monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    else:
        monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", launcher)
    results = run_in_process(recipe, run_args(tiny_bert, learnable_data, tmp_path, *extra, **QUICK))
    assert (results["precision"], results["quantized_compute_dtype"]) == expected
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["precision"] == expected[0] and saved["precision_reason"]


def test_inference_outside_the_trainer_autocasts_like_the_run():
    import torch

    from recipes_lib.config.precision import autocast_for

    with autocast_for("bf16", "cpu"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with autocast_for("fp32", "cpu"):
        assert not torch.is_autocast_enabled("cpu")
