"""The memory planner's answers as text: one plan in full, a table of plans, the largest model that fits.

planner.py does the arithmetic and never prints; this module only formats what it returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from recipes_lib.config.recipe_spec import TrainingShape
from recipes_lib.memory.planner import (
    BERT_FAMILY,
    PLANNING_ERRORS,
    Encoder,
    MemoryPlan,
    PlanRow,
    Setup,
    error_reason,
    largest_family_member,
    layer_activation_terms,
)
from recipes_lib.units import GIB, MIB, format_table


def _gib(value: int) -> str:
    return f"{value / GIB:.2f}"


def describe_shape(shape: TrainingShape) -> str:
    """What a shape trains, in words: 'full fine-tuning', 'LoRA r=8 on query, value, 4-bit base', ..."""
    parts = []
    if shape.adapters is None:
        parts.append("full fine-tuning")
    else:
        targets = shape.adapters.target_modules
        targets = targets if isinstance(targets, str) else ", ".join(targets)
        parts.append(f"LoRA r={shape.adapters.r} on {targets}")
    if shape.quantized_base:
        parts.append("4-bit base")
    if shape.optimizer_bits == 8:
        embeddings = "8-bit" if shape.embedding_optimizer_bits == 8 else "32-bit embeddings"
        parts.append(f"8-bit AdamW ({embeddings})")
    return ", ".join(parts)


def setup_label(setup: Setup) -> str:
    """The setup's label (the recipe's name), or its shape in words when it has none."""
    return setup.label or describe_shape(setup.shape)


def describe_setup(setup: Setup, budget_gib: float, encoder: Encoder | None = None) -> str:
    """The setup in words; with the planned `encoder`, the attention it really runs."""
    precision = "bf16 mixed precision" if setup.bf16 else "fp32"
    attention = {"sdpa": "SDPA attention", "eager": "eager attention"}[setup.attention]
    if encoder is not None and setup.attention == "sdpa" and not encoder.sdpa:
        attention = f"eager attention ({encoder.model_type} has no SDPA)"
    extras = [precision, attention, setup.device.upper() if setup.device == "cuda" else "CPU"]
    if setup.gradient_checkpointing:
        extras.append("gradient checkpointing")
    if setup.num_processes > 1:
        extras.append(describe_sharding(setup))
    return (
        f"batch {setup.batch_size} x {setup.seq_length} tokens per device, {', '.join(extras)}; "
        f"budget {budget_gib:g} GiB"
    )


def describe_sharding(setup: Setup) -> str:
    """e.g. '4 processes, zero2: each holds 1/4 of the optimizer state and gradients'."""
    parts = [part.replace("_", " ") for part in setup.sharded_parts]
    if not parts:
        return f"{setup.num_processes} processes, {setup.sharding}: each holds all of the training state"
    listed = " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)
    gathered = " (+ one layer gathered)" if "weights" in setup.sharded_parts else ""
    return (
        f"{setup.num_processes} processes, {setup.sharding}: each holds 1/{setup.num_processes} of the "
        f"{listed}{gathered}"
    )


def _shard_label(name: str, part: str, setup: Setup) -> str:
    if part not in setup.sharded_parts:
        return name
    gathered = " + 1 layer" if part == "weights" else ""
    return f"{name} (1/{setup.num_processes}{gathered})"


def format_plan(plan: MemoryPlan, max_batch: int, budget_gib: float) -> str:
    """One model and recipe: every part, the activation arithmetic, the verdict."""
    rows = [
        (_shard_label("weights", "weights", plan.setup), plan.weights),
        (_shard_label("gradients", "gradients", plan.setup), plan.gradients),
        (_shard_label("optimizer state", "optimizer_state", plan.setup), plan.optimizer_state),
        ("activations", plan.activations),
        ("other (input batch)", plan.other),
    ]
    if plan.cuda_overhead:
        rows.append(("CUDA context + workspace (assumed)", plan.cuda_overhead))
    lines = [
        f"{plan.model}, {setup_label(plan.setup)}: {plan.params_total:,} parameters, "
        f"{plan.params_trainable:,} trainable",
        describe_setup(plan.setup, budget_gib, plan.encoder),
        "",
    ]
    lines += [f"  {name:<36} {_gib(value):>8} GiB" for name, value in rows]
    lines.append(f"  {'sum of the parts (upper bound)':<36} {_gib(plan.sum_of_parts):>8} GiB")
    lines.append(f"  {'predicted peak (all at once)':<36} {_gib(plan.total):>8} GiB")
    lines.append("")
    lines.append("  activations, by what forward keeps for backward:")
    lines += [f"    {name:<50} {value / MIB:>10.1f} MiB" for name, value in plan.activation_terms.items()]
    encoder = plan.encoder or (Encoder.from_config(plan.config) if plan.config is not None else None)
    if encoder is not None:
        lines.append(f"  one encoder layer (of {encoder.layers}):")
        layer = layer_activation_terms(encoder, plan.setup)
        lines += [f"    {name:<50} {value / MIB:>10.1f} MiB" for name, value in layer.items()]
    verdict = "fits" if plan.total <= budget_gib * GIB else "does NOT fit"
    lines += ["", f"{verdict} in {budget_gib:g} GiB; largest batch that fits: {max_batch or 'none'}"]
    return "\n".join(lines)


def format_sources(rows: list[PlanRow]) -> str:
    """Where each model's config came from, one line per model: 'bert-base-uncased: built-in copy ...'."""
    sources = {row.model: row.source for row in rows if row.source}
    return "\n".join(f"{model}: {source}" for model, source in sources.items())


def format_plan_table(rows: list[PlanRow], budget_gib: float, markdown: bool = False) -> str:
    """One row per (model, recipe), in GiB, or MiB when every plan is under 1 GiB (small models).

    A row that could not be planned keeps its place, with "-" for every figure and "not planned"
    where the verdict goes (`format_not_planned` says why).
    """
    planned = [row.plan.total for row in rows if row.plan is not None]
    unit, scale = ("GiB", 1 / GIB) if max(planned, default=0) >= GIB else ("MiB", 1 / MIB)

    def size(value: int) -> str:
        return f"{value * scale:.2f}" if unit == "GiB" else f"{value * scale:.1f}"

    header = [
        "model",
        "recipe",
        "params",
        "trainable",
        f"weights {unit}",
        "gradients",
        "optimizer",
        "activations",
        "other",
        "CUDA ctx",
        f"peak {unit}",
        f"fits {budget_gib:g} GiB",
        "max batch",
    ]
    body = []
    for row in rows:
        plan = row.plan
        if plan is None:
            body.append([row.model, row.label, *["-"] * 9, "not planned", "-"])
            continue
        body.append(
            [
                row.model,
                row.label,
                f"{plan.params_total / 1e6:.1f}M",
                f"{plan.params_trainable / 1e6:.2f}M",
                size(plan.weights),
                size(plan.gradients),
                size(plan.optimizer_state),
                size(plan.activations),
                size(plan.other),
                size(plan.cuda_overhead),
                size(plan.total),
                "yes" if plan.total <= budget_gib * GIB else "NO",
                str(row.max_batch),
            ]
        )
    return format_table(header, body, markdown)


def format_not_planned(rows: list[PlanRow]) -> list[str]:
    """Why each row without a plan has none: one line per model and reason, naming its rows
    ('bert-base-uncased, lora, qlora: not planned: lora_target_modules ... names no layer ...')."""
    labels: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        if row.plan is None:
            labels.setdefault((row.model, row.error), []).append(row.label)
    return [f"{model}, {', '.join(names)}: not planned: {error}" for (model, error), names in labels.items()]


def format_family(shapes: Mapping[str, TrainingShape | Exception], setup: Setup, budget_gib: float) -> str:
    """For every {label: shape}: the largest BERT_FAMILY configuration that fits the budget.

    A shape given as an exception (it could not be made) is reported as not planned, as in plan_models.
    """
    lines = [
        f"Largest BERT-family configuration that fits {budget_gib:g} GiB at batch {setup.batch_size} x "
        f"{setup.seq_length} (family: {', '.join(name.split(' (')[0] for name, _ in BERT_FAMILY)}):"
    ]
    for label, shape in shapes.items():
        try:
            if isinstance(shape, Exception):
                raise shape
            found = largest_family_member(replace(setup, shape=shape, label=label), budget_gib)
        except PLANNING_ERRORS as error:
            lines.append(f"  {label:<11} not planned: {error_reason(error)}")
            continue
        if found is None:
            lines.append(f"  {label:<11} none (even {BERT_FAMILY[0][0]} does not fit)")
            continue
        name, plan, max_batch = found
        lines.append(
            f"  {label:<11} {name:<24} {plan.params_total / 1e6:>8.1f}M params  {_gib(plan.total):>6} GiB  "
            f"largest batch {max_batch}"
        )
    return "\n".join(lines)
