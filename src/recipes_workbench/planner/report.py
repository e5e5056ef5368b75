"""The planner's answers for `recipes-lib plan`: rows of plans for several models and recipes, and
every answer as text (one plan in full, a table of plans, the largest model that fits).

A row that cannot be planned keeps its place and says why, so one table shows every model and
recipe asked for. The other modules of the planner do the arithmetic and never print.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from recipes_lib.config.recipe_spec import TrainingShape
from recipes_lib.errors import RecipeError
from recipes_lib.units import BREAKDOWN_KEYS, GIB, MIB
from recipes_workbench.planner.arithmetic import attention_kernel, layer_activation_terms
from recipes_workbench.planner.configs import BERT_FAMILY, load_config_and_source
from recipes_workbench.planner.encoder import Encoder
from recipes_workbench.planner.inference import InferencePlan
from recipes_workbench.planner.plan import MemoryPlan, largest_batch, plan_memory
from recipes_workbench.planner.setup import Setup
from recipes_workbench.shared import format_table

# What plan_models and the CLI report as a reason a row has no plan rather than stop on: errors the
# user can fix (RecipeError) and transformers' or peft's ValueError for a model or target they lack.
PLANNING_ERRORS = (RecipeError, ValueError)


# (precision, why) for a model type: how the caller decides each family's precision (tools/plan.py).
PrecisionFor = Callable[[str | None], tuple[str, str]]


# --- rows of plans -----------------------------------------------------------------------------------


@dataclass
class PlanRow:
    """One (model, recipe) of `plan_models`: the plan and the largest batch that fits, or why there is none."""

    model: str
    label: str
    source: str = ""  # where the model's config came from, in words
    plan: MemoryPlan | None = None
    max_batch: int = 0
    error: str | None = None  # set when there is no plan


def error_reason(error: Exception) -> str:
    """An error as one line: a RecipeError's message is written for the user; anything else is named."""
    text = str(error).strip()
    if isinstance(error, RecipeError):
        return text or type(error).__name__
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def plan_models(
    models: Iterable[str],
    shapes: Mapping[str, TrainingShape | Exception],
    setup: Setup,
    budget_gib: float,
    num_labels: int = 2,
    precision_for: PrecisionFor | None = None,
) -> list[PlanRow]:
    """A plan and the largest batch that fits, for every model and every {label: shape}, each model in
    the precision `precision_for(model_type)` gives (without it, the setup's). A row that cannot be
    planned says why in its `error`: a config that does not load, a model the planner does not know,
    adapters that name no layer, or a shape given as the exception that stopped it."""
    rows = []
    for model in models:
        try:
            config, source = load_config_and_source(model, num_labels)
        except PLANNING_ERRORS as error:
            rows += [PlanRow(model, label, error=error_reason(error)) for label in shapes]
            continue
        model_setup = (
            setup if precision_for is None else setup.with_precision(*precision_for(config.model_type))
        )
        for label, shape in shapes.items():
            row = PlanRow(model, label, source)
            try:
                if isinstance(shape, Exception):
                    raise shape
                labelled = replace(model_setup, shape=shape, label=label)
                row.plan = plan_memory(config, labelled, model_name=model)
                row.max_batch = largest_batch(config, labelled, int(budget_gib * GIB))
            except PLANNING_ERRORS as error:
                row.plan, row.error = None, error_reason(error)
            rows.append(row)
    return rows


def largest_family_member(setup: Setup, budget_gib: float) -> tuple[str, MemoryPlan, int] | None:
    """The largest BERT_FAMILY configuration whose plan fits the budget at the setup's batch size:
    (its name, its plan, its largest batch), or None when even the smallest does not fit."""
    from transformers import BertConfig

    best = None
    for name, values in BERT_FAMILY:
        config = BertConfig(**values, num_labels=2)
        plan = plan_memory(config, setup, model_name=name)
        if plan.total > budget_gib * GIB:
            break
        best = (name, plan, largest_batch(config, setup, int(budget_gib * GIB)))
    return best


# --- the answers as text ---------------------------------------------------------------------------


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
        parts.append("8-bit LLM.int8 base" if shape.base_bits == 8 else "4-bit base")
    if shape.optimizer_bits == 8:
        embeddings = "8-bit" if shape.embedding_optimizer_bits == 8 else "32-bit embeddings"
        parts.append(f"{'paged ' if shape.paged_optimizer else ''}8-bit AdamW ({embeddings})")
    return ", ".join(parts)


def describe_setup(setup: Setup, budget_gib: float, encoder: Encoder | None = None) -> str:
    """The setup in words; with the planned `encoder`, the attention it really runs."""
    precision = f"{setup.precision} mixed precision" if setup.half_precision else "fp32"
    if setup.precision_reason:
        precision = f"{precision} ({setup.precision_reason})"
    names = {"flash_attention_2": "FlashAttention 2", "sdpa": "SDPA attention", "eager": "eager attention"}
    attention = names[setup.attention]
    if encoder is not None and attention_kernel(encoder, setup) != setup.attention:
        kernel = attention_kernel(encoder, setup)
        attention = f"{names[kernel]} ({encoder.model_type} has no {names[setup.attention].split(' ')[0]})"
    extras = [precision, attention, setup.device.upper() if setup.device == "cuda" else "CPU"]
    if setup.gradient_checkpointing:
        extras.append("gradient checkpointing")
    if setup.num_processes > 1:
        extras.append(describe_sharding(setup))
    if setup.optimizer_offload:
        extras.append("optimizer offloaded to CPU (DeepSpeed ZeRO-Offload)")
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
    if plan.paged_optimizer_state:
        rows[2] = (f"{rows[2][0]}, paged", plan.optimizer_state)
    if plan.cuda_overhead:
        rows.append(("CUDA context + workspace (assumed)", plan.cuda_overhead))
    lines = [
        f"{plan.model}, {plan.setup.label or describe_shape(plan.setup.shape)}: {plan.params_total:,} parameters, "
        f"{plan.params_trainable:,} trainable",
        describe_setup(plan.setup, budget_gib, plan.encoder),
        "",
    ]
    lines += [f"  {name:<36} {_gib(value):>8} GiB" for name, value in rows]
    lines.append(f"  {'sum of the parts (upper bound)':<36} {_gib(plan.sum_of_parts):>8} GiB")
    lines.append(f"  {'predicted peak (all at once)':<36} {_gib(plan.total):>8} GiB")
    lines += _technique_lines(plan)
    lines.append("")
    lines.append("  activations, by what forward keeps for backward:")
    lines += [f"    {name:<50} {value / MIB:>10.1f} MiB" for name, value in plan.activation_terms.items()]
    lines.append(f"  one encoder layer (of {plan.encoder.layers}):")
    layer = layer_activation_terms(plan.encoder, plan.setup)
    lines += [f"    {name:<50} {value / MIB:>10.1f} MiB" for name, value in layer.items()]
    verdict = "fits" if plan.total <= budget_gib * GIB else "does NOT fit"
    lines += ["", f"{verdict} in {budget_gib:g} GiB; largest batch that fits: {max_batch or 'none'}"]
    return "\n".join(lines)


def _technique_lines(plan: MemoryPlan) -> list[str]:
    """What paging and offload do to the figures above, in words and GiB."""
    lines = []
    if plan.paged_optimizer_state:
        lines.append(
            f"  of the optimizer state, {_gib(plan.paged_optimizer_state)} GiB is paged (CUDA unified memory): "
            "it may be on the CPU during forward and backward, and is back at the optimizer step; "
            "torch.cuda.max_memory_allocated does not count it"
        )
    if plan.setup.optimizer_offload:
        lines.append(
            f"  in CPU memory (ZeRO-Offload): {_gib(plan.host)} GiB of fp32 master weights, AdamW state and "
            "gradients; gradients above are DeepSpeed's GPU buffers"
        )
    return lines


def format_sources(rows: list[PlanRow]) -> str:
    """Where each model's config came from, one line per model: 'bert-base-uncased: catalogue: ...'."""
    sources = {row.model: row.source for row in rows if row.source}
    return "\n".join(f"{model}: {source}" for model, source in sources.items())


def format_other_precisions(rows: list[PlanRow], setup: Setup) -> list[str]:
    """A line per model planned in another precision than the table's header says (a family's own choice)."""
    lines = {  # an ordered set: every row of a model is planned in the model's precision
        f"{row.model}: planned in {row.plan.setup.precision} ({row.plan.setup.precision_reason})": None
        for row in rows
        if row.plan is not None and row.plan.setup.precision != setup.precision
    }
    return list(lines)


def format_plan_table(rows: list[PlanRow], budget_gib: float, markdown: bool = False) -> str:
    """One row per (model, recipe), in GiB, or MiB when every plan is under 1 GiB (small models); a row
    that could not be planned keeps its place, "-" for every figure and "not planned" for the verdict."""
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
                *(size(getattr(plan, part)) for part in (*BREAKDOWN_KEYS, "cuda_overhead", "total")),
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
    """For every {label: shape}: the largest BERT_FAMILY configuration that fits the budget (a shape
    given as an exception, one that could not be made, is reported as not planned, as in plan_models)."""
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


def format_distillation(teacher: InferencePlan, student: MemoryPlan, budget_gib: float) -> str:
    """distill's two phases, which never overlap (the teacher is freed before the student loads), and
    the run's peak: the larger of the two."""
    setup = teacher.setup
    precision = f"{setup.precision} autocast" if setup.half_precision else "fp32"
    context = f" + CUDA context {_gib(teacher.cuda_overhead)}" if teacher.cuda_overhead else ""
    peak, phase = max((teacher.total, "the teacher pass"), (student.total, "the student's training"))
    verdict = "fits" if peak <= budget_gib * GIB else "does NOT fit"
    return "\n".join(
        [
            "distill: two phases, one after the other (the teacher is freed before the student loads)",
            f"  teacher pass       {teacher.model}: inference only (no gradients, no optimizer), batch "
            f"{setup.batch_size} x {setup.seq_length}, {precision}: weights {_gib(teacher.weights)} + activations "
            f"{_gib(teacher.activations)} + batch {_gib(teacher.other)}{context} = {_gib(teacher.total)} GiB",
            f"  student training   {student.model}: {describe_shape(student.setup.shape)}, batch "
            f"{student.setup.batch_size} x {student.setup.seq_length}: {_gib(student.total)} GiB",
            f"  the run's peak     {_gib(peak)} GiB ({phase}): {verdict} in {budget_gib:g} GiB",
        ]
    )
