"""`recipes-lib plan`: peak training memory predicted from the model config alone (no weights, no GPU).

The command's body: the parsed arguments (cli/plan.py) become the planner's Setup and each recipe's
TrainingShape (its registry entry, with the command line's LoRA and optimizer overrides), and the
planner (memory/planner/) predicts and formats. Nothing here imports torch: the planner counts
parameters on the meta device, and only when a model's config asks for it.
"""

from __future__ import annotations

import logging
import sys
import warnings
from dataclasses import replace

from recipes_lib.config.recipe_options import TEACHER_BATCH_SIZE
from recipes_lib.config.registry import recipe_specs
from recipes_lib.errors import ConfigError, RecipeError
from recipes_lib.memory.planner.catalogue import catalogue_entry
from recipes_lib.memory.planner.fits import catalogue_fits, format_fits
from recipes_lib.memory.planner.inference import load_teacher, plan_inference
from recipes_lib.memory.planner.plan import Setup
from recipes_lib.memory.planner.report import (
    PLANNING_ERRORS,
    describe_setup,
    format_distillation,
    format_family,
    format_not_planned,
    format_plan,
    format_plan_table,
    format_sources,
    plan_models,
)


def recipe_shapes(recipe: str, args) -> dict:
    """{name: TrainingShape} of the recipes to plan, from the recipe registry (config/registry.py), with the command
    line's LoRA and optimizer overrides applied; a recipe whose shape cannot be made maps to the error."""
    specs = recipe_specs()
    if recipe != "all" and recipe not in specs:
        raise ConfigError(
            f"--recipe {recipe} is not a recipe of recipes/; use one of {', '.join(specs)}, or all."
        )
    lora_changes = {
        field: value
        for field, value in (
            ("r", args.lora_r),
            ("target_modules", _target_modules(args.lora_target_modules)),
            ("dropout", args.lora_dropout),
        )
        if value is not None
    }
    shapes = {}
    for name, spec in specs.items():
        if recipe not in ("all", name):
            continue
        try:
            shape = spec.default_shape()
        except PLANNING_ERRORS as error:
            shapes[name] = error
            continue
        if shape.adapters is not None and lora_changes:
            shape = replace(shape, adapters=replace(shape.adapters, **lora_changes))
        if shape.optimizer_bits == 8 and args.embedding_optimizer_bits is not None:
            shape = replace(shape, embedding_optimizer_bits=args.embedding_optimizer_bits)
        if shape.optimizer_bits == 8 and args.paged_optimizer:
            shape = replace(shape, paged_optimizer=True)
        if shape.quantized_base and args.base_bits is not None:
            shape = replace(shape, base_bits=args.base_bits)
        shapes[name] = shape
    return shapes


def _target_modules(names: list[str] | None) -> tuple[str, ...] | str | None:
    """--lora_target_modules as a LoraShape holds them: names (commas split too), or 'all-linear'."""
    if names is None:
        return None
    names = [name.strip() for item in names for name in item.split(",") if name.strip()]
    return "all-linear" if [name.lower() for name in names] == ["all-linear"] else tuple(names)


def plan(args) -> int:
    """`recipes-lib plan`: the table (or one model's breakdown) for the parsed arguments; returns the exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    warnings.filterwarnings("ignore", category=FutureWarning)  # peft/transformers deprecation notes
    for name, value in (("per_device_train_batch_size", args.per_device_train_batch_size),
                        ("max_seq_length", args.max_seq_length), ("num_processes", args.num_processes)):  # fmt: skip
        if value <= 0:
            print(f"error: --{name} is {value}; it must be a positive integer.", file=sys.stderr)
            return 2
    setup = Setup(
        batch_size=args.per_device_train_batch_size,
        seq_length=args.max_seq_length,
        bf16=args.bf16,
        gradient_checkpointing=args.gradient_checkpointing,
        device=args.device,
        attention=args.attn_implementation,
        cuda_overhead_gib=args.cuda_overhead_gib,
        num_processes=args.num_processes,
        sharding=args.sharding,
        optimizer_offload=args.optimizer_offload,
    )
    try:
        shapes = recipe_shapes(args.recipe, args)
    except RecipeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.fits:
        return plan_fits(args, shapes, setup)
    if not args.model:
        print("error: plan needs --model (or --fits, for every catalogue model).", file=sys.stderr)
        return 2
    teacher = getattr(args, "teacher", None)
    if args.recipe == "distill" and teacher is None:
        print(
            "error: plan --recipe distill needs --teacher: the output_dir of the teacher's run, or a model name "
            "(its pass is planned apart from the student's training, which --model names).",
            file=sys.stderr,
        )
        return 2
    rows = plan_models(args.model, shapes, setup, args.budget_gib, num_labels=args.num_labels)
    not_planned = format_not_planned(rows)
    if all(row.plan is None for row in rows):  # nothing to show: say why (naming the rows if they differ)
        reasons = {row.error for row in rows}
        for line in [rows[0].error] if len(reasons) == 1 else not_planned:
            print(f"error: {line}", file=sys.stderr)
        return 2
    if format_sources(rows):
        print(format_sources(rows))
    if len(rows) == 1:
        print(format_plan(rows[0].plan, rows[0].max_batch, args.budget_gib))
    else:
        print(f"Predicted peak training memory: {describe_setup(setup, args.budget_gib)}")
        print(format_plan_table(rows, args.budget_gib, markdown=args.markdown))
        for line in not_planned:
            print(f"{'- ' if args.markdown else ''}{line}")
    if teacher is not None and "distill" in shapes:
        code = print_distillation(teacher, rows, shapes, setup, args)
        if code:
            return code
    if not args.no_family:
        print()
        print(format_family(shapes, setup, args.budget_gib))
    return 2 if not_planned else 0


def print_distillation(teacher: str, rows, shapes: dict, setup: Setup, args) -> int:
    """distill's teacher pass beside each student's training (the rows planned for distill)."""
    try:
        found = load_teacher(teacher, args.num_labels, shapes)
        pass_setup = replace(setup, shape=found.shape, batch_size=TEACHER_BATCH_SIZE, label="teacher pass",
                             seq_length=found.seq_length or setup.seq_length)  # fmt: skip
        teacher_plan = plan_inference(found.config, pass_setup, model_name=teacher)
    except PLANNING_ERRORS as error:
        print(f"error: --teacher {teacher}: {error}", file=sys.stderr)
        return 2
    print(f"\nteacher {teacher}: {found.source}")
    for row in rows:
        if row.label == "distill" and row.plan is not None:
            print(format_distillation(teacher_plan, row.plan, args.budget_gib))
    return 0


def plan_fits(args, shapes: dict, setup) -> int:
    """`plan --fits`: the catalogue models (or those of --model) against every recipe, as one table."""
    models = []
    for name in args.model or ():
        entry = catalogue_entry(name)
        if entry is None:
            print(f"error: --fits lists catalogue models; '{name}' is not one (plan --fits shows them).",
                  file=sys.stderr)  # fmt: skip
            return 2
        models.append(entry.hub_id)
    # distill is left out: its peak depends on a teacher, one model per plan (plan --recipe distill --teacher
    # T), and its student trains as full_ft does, whose column answers for the student.
    shapes = {name: shape for name, shape in shapes.items() if name != "distill"}
    rows = catalogue_fits(shapes, setup, args.budget_gib, models=models or None, num_labels=args.num_labels)
    print(format_fits(rows, list(shapes), setup, args.budget_gib, markdown=args.markdown))
    return 0
