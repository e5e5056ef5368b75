"""The plan: one model trained one way (a `Setup`), its parts in bytes and the predicted peak
(`MemoryPlan.peak_tensors`: which parts meet at it), and the largest batch that fits a budget.

The batch planned is the longest one, padded, with the optimizer state in place; docs/planner.md
("How good it is", "Memory techniques for the largest encoders") gives what each assumes and what
was measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from recipes_lib.config.recipe_spec import TrainingShape
from recipes_lib.errors import ConfigError, ModelError
from recipes_lib.units import BREAKDOWN_KEYS, GIB
from recipes_workbench.planner.arithmetic import (
    activation_terms,
    gathered_layer_bytes,
    gradient_bytes,
    input_bytes,
    offload_gradient_bytes,
    offloaded_bytes,
    optimizer_bytes,
    paged_optimizer_bytes,
    weight_bytes,
)
from recipes_workbench.planner.encoder import Encoder
from recipes_workbench.planner.parameters import Parameters, count_parameters_on_meta
from recipes_workbench.planner.setup import SHARDED_PARTS, Setup


@dataclass
class MemoryPlan:
    """One model and Setup: every part in bytes, and what the activation arithmetic read and found."""

    model: str
    setup: Setup
    params_total: int
    params_trainable: int
    weights: int
    gradients: int
    optimizer_state: int
    activations: int
    other: int
    activation_terms: dict[str, int]
    encoder: Encoder  # what the activation arithmetic read from the model config
    # Of optimizer_state: what a paged optimizer keeps in CUDA unified memory (evictable to the CPU).
    paged_optimizer_state: int = 0
    # CPU memory of ZeRO-Offload: optimizer state, fp32 master weights and gradients (not in `total`).
    host: int = 0

    @property
    def cuda_overhead(self) -> int:
        return int(self.setup.cuda_overhead_gib * GIB) if self.setup.device == "cuda" else 0

    @property
    def tensor_bytes(self) -> int:
        """Weights + gradients + optimizer state + activations: what tests/workbench/test_planner.py checks."""
        return self.weights + self.gradients + self.optimizer_state + self.activations

    @property
    def peak_tensors(self) -> int:
        """All tensors at once, at the highest moment: what torch.cuda.max_memory_allocated shows.

        The Trainer frees the gradients after each optimizer step (zero_grad sets them to None), so
        they build up in backward as the activations go: the peak holds the larger of the two.
        With gradient accumulation the gradients stay between micro-batches and meet the activations.
        A paged optimizer's state may be on the CPU during forward and backward, and is all on the
        device at the optimizer step, with the weights and gradients.
        """
        if self.setup.gradient_accumulation_steps > 1 or self.setup.optimizer_offload:
            # ZeRO-Offload's gradient buffers exist from the start of backward (the staging buffer
            # from the start of training), when the activations are all there.
            transient = self.activations + self.gradients
        else:
            transient = max(self.activations, self.gradients)
        resident_state = self.optimizer_state - self.paged_optimizer_state
        forward_backward = self.weights + resident_state + transient + self.other
        optimizer_step = self.weights + self.gradients + self.optimizer_state + self.other
        return max(forward_backward, optimizer_step)

    @property
    def sum_of_parts(self) -> int:
        """Every part at its own peak, added up: an upper bound of the peak."""
        return self.tensor_bytes + self.other + self.cuda_overhead

    @property
    def total(self) -> int:
        """The predicted peak on the device: all tensors at once plus the CUDA context."""
        return self.peak_tensors + self.cuda_overhead

    def breakdown_gib(self) -> dict[str, float]:
        """The parts under results.json's memory_breakdown_gib keys, the CUDA context and the peak."""
        parts = {key: getattr(self, key) for key in BREAKDOWN_KEYS}
        parts.update(cuda_overhead=self.cuda_overhead, total=self.total)
        return {key: value / GIB for key, value in parts.items()}


def check_shape(shape: TrainingShape) -> None:
    """Refuse a shape the arithmetic has no answer for, naming the value."""
    for name in ("optimizer_bits", "embedding_optimizer_bits"):
        if getattr(shape, name) not in (8, 32):
            raise ConfigError(
                f"{name} is {getattr(shape, name)}; the planner knows 32-bit and 8-bit AdamW state."
            )
    if shape.quantized_base and shape.base_bits not in (4, 8):
        raise ConfigError(
            f"base_bits is {shape.base_bits}; the planner knows a 4-bit NF4 and an 8-bit LLM.int8 base."
        )
    lora = shape.adapters
    if lora is not None and (lora.r <= 0 or not 0 <= lora.dropout < 1 or not lora.target_modules):
        raise ConfigError(
            f"The adapters {lora} need a positive r, a dropout in [0, 1) and at least one target module."
        )


def plan_memory(
    config, setup: Setup, model_name: str = "", parameters: Parameters | None = None
) -> MemoryPlan:
    """The plan of `config` trained as `setup`; `parameters`, when given, are its counts on the meta
    device (count_parameters_on_meta for setup.shape), so many batch sizes count them once."""
    setup = _checked_setup(config, setup)
    encoder = Encoder.from_config(config, setup.adapters)
    if setup.gradient_checkpointing and not encoder.checkpointing:
        raise ModelError(
            f"{type(config).__name__.removesuffix('Config')} models do not support activation checkpointing "
            "in transformers; plan without --gradient_checkpointing."
        )
    from recipes_lib.modeling.families import check_sequence_length

    check_sequence_length(config, setup.seq_length)  # as the recipe refuses it, before anything loads
    parameters = parameters or count_parameters_on_meta(config, setup.shape)
    terms = activation_terms(encoder, setup)
    return MemoryPlan(
        model=model_name or getattr(config, "_name_or_path", "") or encoder.model_type,
        setup=setup,
        params_total=parameters.total,
        params_trainable=parameters.trainable,
        **_training_state(encoder, parameters, setup),
        activations=sum(terms.values()),
        other=input_bytes(setup, encoder),
        activation_terms=terms,
        encoder=encoder,
    )


def _checked_setup(config, setup: Setup) -> Setup:
    """The setup, refused if the arithmetic has no answer for it, with "auto" LoRA targets resolved
    to the family's own, so the plan says what it planned."""
    check_shape(setup.shape)
    if setup.sharding not in SHARDED_PARTS or setup.num_processes < 1:
        raise ValueError(
            f"sharding must be one of {', '.join(SHARDED_PARTS)} (not {setup.sharding!r}) and "
            f"num_processes at least 1 (not {setup.num_processes})"
        )
    if setup.optimizer_offload:
        check_offload(setup)
    if setup.adapters is not None:
        from recipes_lib.modeling.adapters import resolve_lora_targets

        lora = resolve_lora_targets(setup.adapters, config.model_type)
        setup = replace(setup, shape=replace(setup.shape, adapters=lora))
    return setup


def check_offload(setup: Setup) -> None:
    """Refuse what DeepSpeed ZeRO-Offload cannot do, naming the fix."""
    if setup.device != "cuda":
        raise ConfigError(
            "Optimizer offload is DeepSpeed ZeRO-Offload, which needs a CUDA GPU (the recipes refuse DeepSpeed "
            "without one); plan it with --device cuda, or plan this CPU run without --optimizer_offload."
        )
    if setup.shape.optimizer_bits == 8 or setup.shape.paged_optimizer:
        raise ConfigError(
            "8-bit (or paged) AdamW cannot be offloaded: under ZeRO-Offload accelerate replaces a recipe's own "
            "optimizer with DeepSpeed's CPU Adam (accelerate's map_pytorch_optim_to_deepspeed), whose state is "
            "32-bit on the CPU, so adamw_8bit's 8-bit state would never exist. Offload full_ft instead (its state "
            "leaves the GPU either way), or train adamw_8bit without the offload config (--paged_optimizer lets "
            "its state make room for the activations)."
        )
    if setup.num_processes > 1 and not setup.sharding.startswith("zero"):
        raise ConfigError(
            f"Optimizer offload is DeepSpeed's; with {setup.num_processes} processes plan it with --sharding zero1, "
            f"zero2 or zero3, not {setup.sharding}."
        )


def _training_state(encoder: Encoder, parameters: Parameters, setup: Setup) -> dict[str, int]:
    """Weights, gradients and optimizer state on one process: the sharded parts divided among the
    processes, and with sharded weights, the one layer each process gathers to compute. With
    ZeRO-Offload the optimizer state (and the fp32 gradients it steps on) are on the CPU (`host`)."""
    parts = {
        "weights": weight_bytes(parameters, setup),
        "gradients": gradient_bytes(parameters),
        "optimizer_state": optimizer_bytes(parameters, setup),
        "paged_optimizer_state": paged_optimizer_bytes(parameters, setup),
    }
    for part in setup.sharded_parts:
        parts[part] = math.ceil(parts[part] / setup.num_processes)
    if "weights" in setup.sharded_parts:
        parts["weights"] += gathered_layer_bytes(encoder, parameters, setup)
    if setup.optimizer_offload:
        processes = setup.num_processes if setup.sharded_parts else 1
        parts["host"] = math.ceil(offloaded_bytes(parameters, setup) / processes)
        parts["gradients"] = offload_gradient_bytes(parameters, setup)
        parts["optimizer_state"] = 0
    return parts


def largest_batch(
    config, setup: Setup, budget_bytes: int, limit: int = 4096, parameters: Parameters | None = None
) -> int:
    """The largest per-device batch whose predicted peak fits the budget (0: not even batch 1), up to
    `limit` (`parameters`: as in plan_memory). Only the activations grow with the batch, so doubling
    then bisecting finds the edge in a few dozen evaluations of the arithmetic."""
    parameters = parameters or count_parameters_on_meta(config, setup.shape)

    def fits(batch: int) -> bool:
        return (
            plan_memory(config, replace(setup, batch_size=batch), parameters=parameters).total <= budget_bytes
        )

    if not fits(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
