"""Which floating-point precision a run computes in: decided once (`PrecisionChoice`), from what the device
does natively. Every recipe and QLoRA's 4-bit compute dtype follow it; docs/precision.md has the rule
(an explicit choice wins; else what the device runs natively, fp32 for a family that fails in it).
"""

from __future__ import annotations

import functools
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from recipes_lib.config.family_registry import FAMILIES
from recipes_lib.errors import ConfigError

logger = logging.getLogger("recipes_lib")

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# The families whose scores overflow fp16's range (DeBERTa: a NaN loss in the first epochs is a known
# failure under fp16), by their entries' fp16_overflows. Automatic precision keeps them in fp32.
FP16_UNSAFE_MODEL_TYPES = frozenset(
    model_type for family in FAMILIES if family.fp16_overflows for model_type in family.model_types
)
# The families that fail under bf16 autocast (their entries' bf16_autocast_fails): fp32 on a bf16 CPU.
BF16_UNSAFE_MODEL_TYPES = frozenset(
    model_type for family in FAMILIES if family.bf16_autocast_fails for model_type in family.model_types
)
# CPU flags with which oneDNN runs bf16 matmuls natively: AVX-512 BF16 (Cooper Lake, Zen 4) and AMX
# (Sapphire Rapids). Without them a bf16 matmul is converted to fp32 and back, many times slower.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
CPUINFO = Path("/proc/cpuinfo")
# The environment variable `accelerate launch` sets from its config's `mixed_precision`.
LAUNCHER_VARIABLE = "ACCELERATE_MIXED_PRECISION"


@dataclass(frozen=True)
class DeviceCapability:
    """What one device computes natively. `name` says which hardware was read, for the log."""

    kind: str  # "cpu" or "cuda"
    name: str
    native_bf16: bool
    native_fp16: bool

    def is_native(self, precision: str) -> bool:
        return precision == "fp32" or {"bf16": self.native_bf16, "fp16": self.native_fp16}[precision]


def detect_capability(use_cpu: bool) -> DeviceCapability:
    """The training device's native precisions, read from torch (never from the CPU's model name)."""
    if not use_cpu and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return DeviceCapability(
            kind="cuda",
            name=f"{torch.cuda.get_device_name()} (compute capability {major}.{minor})",
            # including_emulation=False: T4/V100 report bf16 "supported" through slow emulation.
            native_bf16=torch.cuda.is_bf16_supported(including_emulation=False),
            native_fp16=(major, minor) >= (5, 3),
        )
    return cpu_capability(
        cpu_flags(),
        onednn_bf16=bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
        onednn_fp16=bool(torch.ops.mkldnn._is_mkldnn_fp16_supported()),
        kernels=torch.backends.cpu.get_cpu_capability(),
    )


@functools.cache
def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str] | None:
    """The CPU's feature flags, from Linux's /proc/cpuinfo; None where it cannot be read."""
    try:
        match = re.search(r"^flags\s*:(.*)$", cpuinfo.read_text(), re.MULTILINE)
    except OSError:
        return None
    return frozenset(match.group(1).split()) if match else None


def cpu_capability(
    flags: frozenset[str] | None, *, onednn_bf16: bool, onednn_fp16: bool, kernels: str
) -> DeviceCapability:
    """Native bf16 where the flags say so and oneDNN, which runs the matmuls, uses them (ONEDNN_MAX_CPU_ISA
    can cap it below them); without readable flags (not Linux), oneDNN's word alone."""
    found = [flag for flag in BF16_CPU_FLAGS if flags is not None and flag in flags]
    if flags is None:
        said = "oneDNN has bf16" if onednn_bf16 else "no native bf16 in oneDNN"
    elif found and not onednn_bf16:
        said = f"{', '.join(found)} but oneDNN capped below it by ONEDNN_MAX_CPU_ISA"
    else:
        said = ", ".join(found) or "no avx512_bf16 or amx_bf16"
    return DeviceCapability(
        kind="cpu",
        name=f"CPU ({kernels} kernels, {said})",
        native_bf16=onednn_bf16 and (flags is None or bool(found)),
        native_fp16=onednn_fp16,
    )


@dataclass(frozen=True)
class PrecisionChoice:
    precision: str  # "fp32", "bf16" or "fp16"
    reason: str  # why, in a few words, for the log line and results.json
    explicit: bool


def _flag_choice(bf16: bool | None, fp16: bool | None) -> tuple[str | None, set[str]]:
    """(the precision the flags choose, or None; the precisions a lone `false` rules out)."""
    if bf16 and fp16:
        raise ConfigError(
            "Both --bf16 and --fp16 are true; a run computes in one precision. Keep one of them "
            "(bf16 where the GPU has it natively, Ampere or newer; fp16 on older GPUs)."
        )
    if bf16:
        return "bf16", set()
    if fp16:
        return "fp16", set()
    if bf16 is False and fp16 is False:
        return "fp32", set()
    # `fp16: false` alone (common in Hugging Face configs) rules fp16 out and chooses nothing else.
    return None, {name for name, flag in (("bf16", bf16), ("fp16", fp16)) if flag is False}


def _launcher_choice(launcher: str | None) -> str | None:
    value = (launcher or "no").lower()
    if value == "no":
        return None
    if value not in ("bf16", "fp16"):
        raise ConfigError(
            f"The accelerate config sets mixed_precision: {value}, which these recipes do not support. "
            "Set it to bf16, fp16 or no (no lets the recipe choose from what the device does natively)."
        )
    return value


def choose_precision(
    capability: DeviceCapability,
    *,
    bf16: bool | None,
    fp16: bool | None,
    launcher: str | None,
    model_type: str | None = None,
) -> PrecisionChoice:
    """The precision a run computes in (the rule: docs/precision.md)."""
    (from_flags, excluded), from_launcher = _flag_choice(bf16, fp16), _launcher_choice(launcher)
    flag = {"bf16": "--bf16 true", "fp16": "--fp16 true", "fp32": "--bf16 false --fp16 false"}.get(from_flags)
    if from_launcher in excluded:
        flag, from_flags = f"--{from_launcher} false", f"not {from_launcher}"
    if from_flags and from_launcher and from_flags != from_launcher:
        raise ConfigError(
            f"The run asks for {from_flags} ({flag}) but the accelerate config asks for {from_launcher} "
            f"(mixed_precision: {from_launcher}). Make them agree: drop the flag to use the config's "
            f"{from_launcher}, or launch with a config whose mixed_precision is 'no', which leaves the choice "
            "to the recipe (accelerate_configs/single_gpu.yaml does)."
        )
    explicit = from_flags or from_launcher
    if explicit == "fp16" and capability.kind == "cpu":
        # accelerate has no fp16 autocast on CPU: such a run would compute in fp32 while its flags and
        # results said fp16, so refuse it (tests/test_precision.py checks the layers' real precision).
        asked = "--fp16" if from_flags else "the accelerate config's mixed_precision: fp16"
        raise ConfigError(
            f"fp16 was asked for ({asked}), but this run is on the CPU, where accelerate does not run fp16 "
            "mixed precision: it would train in fp32 while saying fp16. Drop it to train in fp32, or use "
            "bf16 (--bf16 true), which CPUs with AVX-512 BF16 or AMX run natively."
        )
    if explicit:
        source = "--bf16/--fp16" if from_flags else "the accelerate config's mixed_precision"
        return PrecisionChoice(explicit, f"asked for by {source}", explicit=True)
    ruled_out = f" ({', '.join(sorted(excluded))} ruled out by its flag)" if excluded else ""
    device = capability.name if capability.kind == "cuda" else f"the {capability.name}"

    def automatic(precision: str, why: str) -> PrecisionChoice:
        return PrecisionChoice(precision, f"automatic: {why}", explicit=False)

    if capability.kind == "cuda":
        if capability.native_bf16 and "bf16" not in excluded:
            return automatic("bf16", f"native bf16 on {device}")
        if model_type in FP16_UNSAFE_MODEL_TYPES:
            return automatic("fp32", f"{model_type} overflows in fp16 on {device}{ruled_out}")
        if "fp16" not in excluded:
            return automatic("fp16", f"fp16 with loss scaling on {device}{ruled_out}")
        return automatic("fp32", f"fp32 on {device}{ruled_out}")
    if not capability.native_bf16 or "bf16" in excluded:
        return automatic("fp32", f"fp32 on {device}{ruled_out}")
    if model_type in BF16_UNSAFE_MODEL_TYPES:
        return automatic("fp32", f"{model_type} fails under bf16 autocast; fp32 on {device}")
    return automatic("bf16", f"bf16 autocast, native on {device}; --bf16 false for fp32")


def emulation_warning(choice: PrecisionChoice, capability: DeviceCapability) -> str | None:
    """A warning when an explicit choice runs on hardware that only emulates it (it still runs)."""
    if capability.is_native(choice.precision):
        return None
    if capability.kind == "cpu":
        return (
            f"{choice.precision} was asked for, but this CPU ({capability.name}) has no native bf16 (AVX-512 "
            "BF16 or AMX): its bf16 matmuls are emulated, many times slower than fp32 (python "
            "benchmarks/precision.py measures how much on this machine). Drop the flag to train in fp32."
        )
    return (
        f"{choice.precision} was asked for, but {capability.name} only emulates it: expect it to be "
        "slower than fp16 (drop the flag and the recipe picks fp16 with loss scaling)."
    )


def accelerator_available() -> bool:  # a function: tests stand in a machine with or without a GPU
    return torch.cuda.is_available() or torch.backends.mps.is_available()


def refuse_sharding_without_gpu() -> None:
    """FSDP and DeepSpeed need CUDA GPUs: accelerate 1.15 keeps CPU processes MULTI_CPU (DDP over gloo),
    ignoring the config's sharding."""
    launched_with = [
        name
        for name, variable in (("FSDP", "ACCELERATE_USE_FSDP"), ("DeepSpeed", "ACCELERATE_USE_DEEPSPEED"))
        if os.environ.get(variable, "false").lower() == "true"
    ]
    if launched_with and not torch.cuda.is_available():
        raise ConfigError(
            f"This run was launched with {launched_with[0]} (the accelerate --config_file asks for it), but "
            "this machine has no CUDA GPU. On CPU processes accelerate ignores the sharding and runs plain "
            "DDP, so the run would not be what the config says. On a CPU, launch with --config_file "
            "accelerate_configs/multi_cpu.yaml (or cpu.yaml); use the FSDP and DeepSpeed configs on GPUs."
        )


def decide_precision(training, model_type: str | None) -> tuple[PrecisionChoice, dict]:
    """The run's precision (from the flags, the launcher's mixed_precision, the machine and the family) and the
    TrainingArguments values that go with it: bf16, fp16, use_cpu, and tf32 and pin_memory where automatic."""
    # No accelerator: the CPU, said to the Trainer, whose bf16 check would otherwise look for a GPU
    # (and, under several processes, would run DDP over gloo anyway).
    on_cpu = (
        training.use_cpu
        or not accelerator_available()
        or os.environ.get("ACCELERATE_USE_CPU", "false").lower() == "true"
    )
    capability = detect_capability(use_cpu=on_cpu)
    choice = choose_precision(
        capability,
        bf16=training.bf16,
        fp16=training.fp16,
        launcher=os.environ.get(LAUNCHER_VARIABLE),
        model_type=model_type,
    )
    warning = emulation_warning(choice, capability) if choice.explicit else None
    if warning:
        logger.warning(warning)
    gpu = torch.cuda.is_available() and not on_cpu
    settings = {
        "bf16": choice.precision == "bf16",
        "fp16": choice.precision == "fp16",
        "use_cpu": training.use_cpu or not accelerator_available(),
        # TF32 from Ampere (compute capability 8) on; None leaves torch's setting.
        "tf32": training.tf32
        if training.tf32 is not None
        else (torch.cuda.get_device_capability()[0] >= 8 if gpu else None),
        "dataloader_pin_memory": training.dataloader_pin_memory
        if training.dataloader_pin_memory is not None
        else gpu,
    }
    return choice, settings


def autocast_for(precision: str, device_type: str):
    """The autocast a run's bf16/fp16 evaluation ran under, for inference outside the Trainer; fp32: none."""
    import contextlib

    if precision not in ("bf16", "fp16"):
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=TORCH_DTYPES[precision])


def dtype_name(dtype: torch.dtype) -> str:
    """'bf16', 'fp16', 'fp32' for a torch dtype (its str for any other)."""
    return next((name for name, known in TORCH_DTYPES.items() if known == dtype), str(dtype))
