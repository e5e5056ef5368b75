"""`recipes-lib plan` plans the precision the recipe will use: choose_precision's answer per family, on this
machine's GPU, or with none here on the project's target (a bf16-capable 24 GB GPU); --precision (and --bf16)
ask for one instead."""

from __future__ import annotations

import re

import pytest

import recipes_workbench.tools.plan as plan_tool
from recipes_lib.config.precision import DeviceCapability
from recipes_lib.errors import ConfigError
from recipes_lib.units import GIB
from recipes_workbench.cli.main import main
from recipes_workbench.planner import Setup, load_config, plan_memory

NO_GPU = DeviceCapability("cpu", "CPU, AVX2 kernels", native_bf16=False, native_fp16=False)
H200 = DeviceCapability("cuda", "NVIDIA H200 (compute capability 9.0)", native_bf16=True, native_fp16=True)
T4 = DeviceCapability("cuda", "Tesla T4 (compute capability 7.5)", native_bf16=False, native_fp16=True)


def _device(monkeypatch, capability: DeviceCapability) -> None:
    """Plan as if this machine had `capability` (its GPU, or no GPU: the CPU, which detection falls back to)."""
    monkeypatch.setattr(plan_tool, "detect_capability", lambda use_cpu: NO_GPU if use_cpu else capability)


def _plan(capsys, *arguments: str) -> str:
    assert main(["plan", *arguments]) == 0
    return capsys.readouterr().out


def _figures(output: str) -> list[str]:
    """The breakdown's figure lines (everything but the setup line, which says why)."""
    return [
        line for line in output.splitlines() if line.startswith("  ") and re.search(r"\d (GiB|MiB)$", line)
    ]


def test_with_no_gpu_the_default_plan_is_the_bf16_plan_and_says_why(monkeypatch, capsys):
    _device(monkeypatch, NO_GPU)
    arguments = ("--model", "bert-base-uncased", "--recipe", "full_ft", "--no_family")
    default, asked = _plan(capsys, *arguments), _plan(capsys, *arguments, "--bf16")
    assert _figures(default) == _figures(asked)
    assert "  predicted peak (all at once)             3.40 GiB" in _figures(default)
    assert (
        "bf16 mixed precision (what the recipe picks on a bf16-capable GPU, none here; "
        "--precision fp32 to plan otherwise)" in default
    )
    assert "bf16 mixed precision (asked for by --bf16)" in asked
    assert _figures(_plan(capsys, *arguments, "--precision", "bf16")) == _figures(asked)


def test_an_explicit_fp32_plans_what_plan_printed_before(monkeypatch, capsys):
    _device(monkeypatch, NO_GPU)
    output = _plan(
        capsys, "--model", "bert-base-uncased", "--recipe", "full_ft", "--no_family", "--precision", "fp32"
    )
    fp32 = plan_memory(load_config("bert-base-uncased"), Setup(), model_name="bert-base-uncased")
    assert "fp32 (asked for by --precision fp32)" in output
    assert f"predicted peak (all at once)             {fp32.total / GIB:.2f} GiB" in output
    assert f"{fp32.total / GIB:.2f}" == "4.13"


def test_on_this_machines_gpu_the_plan_names_it(monkeypatch, capsys):
    _device(monkeypatch, H200)
    output = _plan(capsys, "--model", "bert-base-uncased", "--recipe", "lora", "--no_family")
    assert "bf16 mixed precision (what the recipe picks here: native bf16 on NVIDIA H200" in output


def test_with_device_cpu_the_default_is_the_cpus_fp32(monkeypatch, capsys):
    _device(monkeypatch, H200)  # a GPU here changes nothing: --device cpu plans a CPU run
    output = _plan(
        capsys, "--model", "bert-base-uncased", "--recipe", "full_ft", "--no_family", "--device", "cpu"
    )
    assert (
        "fp32 (what the recipe picks on the CPU; --precision bf16 to plan otherwise), SDPA attention, CPU"
        in output
    )


def test_a_family_that_overflows_in_fp16_keeps_its_own_precision_on_a_gpu_without_bf16(monkeypatch, capsys):
    """On a T4 the recipes pick fp16, except DeBERTa, which stays fp32: each row is planned as its run trains."""
    _device(monkeypatch, T4)
    output = _plan(capsys, "--model", "bert-base-uncased", "microsoft/deberta-v3-large", "--recipe", "full_ft",
                   "--no_family")  # fmt: skip
    assert "fp16 mixed precision (what the recipe picks here: fp16 with loss scaling on Tesla T4" in output
    assert re.search(r"microsoft/deberta-v3-large: planned in fp32 \(what the recipe picks here: deberta-v2 "
                     r"overflows in fp16 on Tesla T4", output)  # fmt: skip
    assert "bert-base-uncased: planned in" not in output  # planned in the table's fp16: no line of its own
    peaks = {line.split()[0]: line.split()[10] for line in output.splitlines() if " full_ft " in line}
    deberta = load_config("microsoft/deberta-v3-large")
    assert peaks["microsoft/deberta-v3-large"] == f"{plan_memory(deberta, Setup()).total / GIB:.2f}"  # fp32
    bert = load_config("bert-base-uncased")
    # fp16 autocast keeps the same 2-byte copies bf16 does: the same bytes.
    assert peaks["bert-base-uncased"] == f"{plan_memory(bert, Setup(bf16=True)).total / GIB:.2f}"
    assert plan_memory(bert, Setup(fp16=True)).total == plan_memory(bert, Setup(bf16=True)).total


def test_fits_plans_each_catalogue_model_in_its_recipes_precision(monkeypatch, capsys):
    _device(monkeypatch, NO_GPU)
    models = ("--fits", "--model", "bert-base-uncased", "microsoft/deberta-v3-large")
    default, asked = _plan(capsys, *models), _plan(capsys, *models, "--bf16")
    rows = [line for line in default.splitlines() if line.endswith("predicted")]
    assert len(rows) == 2 and rows == [line for line in asked.splitlines() if line.endswith("predicted")]
    assert "bf16 mixed precision (what the recipe picks on a bf16-capable GPU, none here" in default
    _device(monkeypatch, T4)
    on_t4 = _plan(capsys, *models)
    assert (
        "microsoft/deberta-v3-large: planned in fp32 (what the recipe picks here: deberta-v2 overflows"
        in on_t4
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("--bf16", "--precision", "fp32"), "--bf16 asks for bf16 but --precision asks for fp32"),
        (("--precision", "fp16", "--device", "cpu"), "accelerate has no fp16 mixed precision on the CPU"),
    ],
)
def test_precisions_that_contradict_are_refused(capsys, arguments, message):
    assert main(["plan", "--model", "bert-base-uncased", "--no_family", *arguments]) == 2
    assert message in capsys.readouterr().err


def test_a_setup_refuses_two_precisions():
    with pytest.raises(ConfigError, match="one precision"):
        Setup(bf16=True, fp16=True)


def test_with_device_cpu_on_a_cpu_with_native_bf16_the_plan_is_the_recipes_bf16(monkeypatch, capsys):
    bf16_cpu = DeviceCapability(
        "cpu", "CPU (AVX512 kernels, avx512_bf16)", native_bf16=True, native_fp16=False
    )
    monkeypatch.setattr(plan_tool, "detect_capability", lambda use_cpu: bf16_cpu if use_cpu else H200)
    arguments = ("--model", "bert-base-uncased", "--recipe", "full_ft", "--no_family", "--device", "cpu")
    output = _plan(capsys, *arguments)
    assert (
        "bf16 mixed precision (what the recipe picks on the CPU; --precision fp32 to plan otherwise)"
        in output
    )
    assert _figures(output) == _figures(_plan(capsys, *arguments, "--precision", "bf16"))
    assert _figures(output) != _figures(_plan(capsys, *arguments, "--precision", "fp32"))
    # DeBERTa v1 fails under bf16 autocast: its recipe, and so its plan, stays fp32 on this CPU.
    planned = plan_tool.PlannedPrecision("auto", "--precision auto", bf16_cpu, on_this_machine=True)
    assert [planned.choose(t)[0] for t in ("bert", "deberta", "deberta-v2")] == ["bf16", "fp32", "bf16"]
