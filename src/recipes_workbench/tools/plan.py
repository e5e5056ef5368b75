"""`recipes-lib plan`: peak training memory predicted from the model config alone (no weights, no GPU).

The parsed arguments (cli/plan.py) become the planner's Setup and each recipe's TrainingShape; the
planner (recipes_workbench/planner/) predicts and formats. Torch only counts parameters on the meta
device and reads the GPU the precision is chosen for (PlannedPrecision; docs/memory.md says why).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, replace

from recipes_lib.config.distill_options import TEACHER_BATCH_SIZE
from recipes_lib.config.family_registry import family_for
from recipes_lib.config.precision import DeviceCapability, choose_precision, detect_capability
from recipes_lib.errors import ConfigError, RecipeError
from recipes_lib.modeling.families import flash_attention_available
from recipes_workbench.planner.arithmetic import FLASH_ATTENTION
from recipes_workbench.planner.catalogue import catalogue_entry
from recipes_workbench.planner.fits import catalogue_fits, format_fits
from recipes_workbench.planner.inference import load_teacher, plan_inference
from recipes_workbench.planner.report import (
    PLANNING_ERRORS,
    describe_setup,
    format_distillation,
    format_family,
    format_not_planned,
    format_other_precisions,
    format_plan,
    format_plan_table,
    format_sources,
    plan_models,
)
from recipes_workbench.planner.setup import Setup
from recipes_workbench.recipes import RECIPES
from recipes_workbench.shared import print_error

# What `recipes-lib plan` plans for on a machine without a GPU (a laptop planning a GPU run): the
# project's target, a 24 GB consumer GPU with native bf16 and fp16 (an RTX 3090 or 4090).
TARGET_GPU = DeviceCapability(
    kind="cuda", name="a bf16-capable 24 GB GPU (RTX 3090/4090)", native_bf16=True, native_fp16=True
)


def recipe_shapes(recipe: str, args) -> dict:
    """{name: TrainingShape} of the recipes to plan, from the recipe registry (recipes_workbench/recipes.py), with the command
    line's LoRA and optimizer overrides applied; a recipe whose shape cannot be made maps to the error."""
    if recipe != "all" and recipe not in RECIPES:
        raise ConfigError(
            f"--recipe {recipe} is not a recipe of recipes/; use one of {', '.join(RECIPES)}, or all."
        )
    target_modules = _target_modules(args.lora_target_modules)
    given = {"r": args.lora_r, "target_modules": target_modules, "dropout": args.lora_dropout}
    lora_changes = {field: value for field, value in given.items() if value is not None}
    shapes = {}
    for name, spec in RECIPES.items():
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


@dataclass(frozen=True)
class PlannedPrecision:
    """The precision each model is planned in: the one asked for, or what its recipe would pick."""

    asked: str  # "auto", "fp32", "bf16" or "fp16"
    flag: str  # how it was asked for, for the reports: "--precision fp32", "--bf16"
    capability: DeviceCapability  # the device the recipe would choose on
    on_this_machine: bool  # the capability was read here (a GPU, or the CPU), not assumed (TARGET_GPU)

    def choose(self, model_type: str | None) -> tuple[str, str]:
        """(precision, why) for a model of `model_type` (None: any family but those that overflow in fp16)."""
        if self.asked != "auto":
            return self.asked, f"asked for by {self.flag}"
        choice = choose_precision(self.capability, bf16=None, fp16=None, launcher=None, model_type=model_type)
        if self.capability.kind == "cpu":
            where = "on the CPU"
        elif self.on_this_machine:
            where = f"here: {choice.reason.removeprefix('automatic: ')}"
        else:
            where = "on a bf16-capable GPU, none here"
        other = "bf16" if choice.precision == "fp32" else "fp32"
        return choice.precision, f"what the recipe picks {where}; --precision {other} to plan otherwise"


def planned_precision(args) -> PlannedPrecision:
    """--precision and --bf16 as one choice, and the device an automatic one is made for."""
    asked, flag = args.precision, f"--precision {args.precision}"
    if args.bf16:
        if asked not in ("auto", "bf16"):
            raise ConfigError(
                f"--bf16 asks for bf16 but --precision asks for {asked}; give one of them "
                "(--bf16 is the same as --precision bf16)."
            )
        asked, flag = "bf16", "--bf16"
    on_cpu = args.device == "cpu"
    if asked == "fp16" and on_cpu:
        raise ConfigError(
            "--precision fp16 with --device cpu: accelerate has no fp16 mixed precision on the CPU, so a "
            "recipe there refuses it. Plan --precision fp32 (the CPU's default) or bf16, or drop --device cpu."
        )
    capability = detect_capability(use_cpu=on_cpu)  # as the recipe reads it: the CPU when there is no GPU
    if on_cpu or capability.kind == "cuda":
        return PlannedPrecision(asked, flag, capability, on_this_machine=True)
    return PlannedPrecision(asked, flag, TARGET_GPU, on_this_machine=False)


def planned_attention(args) -> str:
    """--attn_implementation as the recipe resolves it: auto is flash_attention_2 where this machine runs it
    (a CUDA GPU with flash-attn, planning --device cuda), else sdpa; a family without the kernel asked for
    is planned with the next it has (the plan's setup line names it)."""
    if args.attn_implementation == FLASH_ATTENTION and args.device == "cpu":
        raise ConfigError(
            f"--attn_implementation {FLASH_ATTENTION} with --device cpu: FlashAttention runs on CUDA GPUs only. "
            "Plan --attn_implementation sdpa (or auto) for the CPU."
        )
    if args.attn_implementation != "auto":
        return args.attn_implementation
    return FLASH_ATTENTION if args.device == "cuda" and flash_attention_available() else "sdpa"


def print_flash_attention_note(args, attention: str, model_types) -> None:
    """One line when a planned family loses much without FlashAttention (ModernBERT) and it is planned for a
    GPU with SDPA because flash-attn is not installed here."""
    if args.attn_implementation != "auto" or args.device != "cuda" or attention == FLASH_ATTENTION:
        return
    families = {
        family for family in map(family_for, model_types) if family and family.without_flash_attention
    }
    for family in sorted(families, key=lambda family: family.name):
        print(
            f"Planned with SDPA: flash-attn is not installed here, and {family.without_flash_attention}. On a GPU "
            f"with flash-attn the recipes run {FLASH_ATTENTION}: --attn_implementation {FLASH_ATTENTION} plans that."
        )


def plan(args) -> int:
    """`recipes-lib plan`: the table (or one model's breakdown) for the parsed arguments; returns the exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    warnings.filterwarnings("ignore", category=FutureWarning)  # peft/transformers deprecation notes
    try:
        return _plan(args)
    except RecipeError as error:
        print_error(error)
        return 2


def _plan(args) -> int:
    for name, value in (("per_device_train_batch_size", args.per_device_train_batch_size),
                        ("max_seq_length", args.max_seq_length), ("num_processes", args.num_processes)):  # fmt: skip
        if value <= 0:
            raise ConfigError(f"--{name} is {value}; it must be a positive integer.")
    precision = planned_precision(args)
    attention = planned_attention(args)
    setup = Setup(
        batch_size=args.per_device_train_batch_size,
        seq_length=args.max_seq_length,
        gradient_checkpointing=args.gradient_checkpointing,
        device=args.device,
        attention=attention,
        cuda_overhead_gib=args.cuda_overhead_gib,
        num_processes=args.num_processes,
        sharding=args.sharding,
        optimizer_offload=args.optimizer_offload,
    ).with_precision(*precision.choose(None))
    shapes = recipe_shapes(args.recipe, args)
    if args.fits:
        return plan_fits(args, shapes, setup, precision)
    if not args.model:
        raise ConfigError("plan needs --model (or --fits, for every catalogue model).")
    teacher = getattr(args, "teacher", None)
    if args.recipe == "distill" and teacher is None:
        raise ConfigError(
            "plan --recipe distill needs --teacher: the output_dir of the teacher's run, or a model name "
            "(its pass is planned apart from the student's training, which --model names)."
        )
    rows = plan_models(
        args.model, shapes, setup, args.budget_gib, num_labels=args.num_labels, precision_for=precision.choose
    )
    not_planned = format_not_planned(rows)
    if all(row.plan is None for row in rows):  # nothing to show: say why (naming the rows if they differ)
        reasons = {row.error for row in rows}
        for line in [rows[0].error] if len(reasons) == 1 else not_planned:
            print_error(line)
        return 2
    if format_sources(rows):
        print(format_sources(rows))
    if len(rows) == 1:
        print(format_plan(rows[0].plan, rows[0].max_batch, args.budget_gib))
    else:
        print(f"Predicted peak training memory: {describe_setup(setup, args.budget_gib)}")
        print(format_plan_table(rows, args.budget_gib, markdown=args.markdown))
        for line in format_other_precisions(rows, setup):
            print(f"{'- ' if args.markdown else ''}{line}")
        for line in not_planned:
            print(f"{'- ' if args.markdown else ''}{line}")
    if teacher is not None and "distill" in shapes:
        print_distillation(teacher, rows, shapes, setup, args)
    print_flash_attention_note(args, attention, [row.plan.encoder.model_type for row in rows if row.plan])
    if not args.no_family:
        print()
        print(format_family(shapes, setup, args.budget_gib))
    return 2 if not_planned else 0


def print_distillation(teacher: str, rows, shapes: dict, setup: Setup, args) -> None:
    """distill's teacher pass beside each student's training (the rows planned for distill)."""
    try:
        found = load_teacher(teacher, args.num_labels, shapes)
        pass_setup = replace(setup, shape=found.shape, batch_size=TEACHER_BATCH_SIZE, label="teacher pass",
                             seq_length=found.seq_length or setup.seq_length)  # fmt: skip
        students = [row for row in rows if row.label == "distill" and row.plan is not None]
        # The teacher's pass runs in the run's precision, which the student's family decides.
        teacher_plans = [
            plan_inference(
                found.config,
                pass_setup.with_precision(row.plan.setup.precision, row.plan.setup.precision_reason),
                model_name=teacher,
            )
            for row in students
        ]
    except PLANNING_ERRORS as error:
        raise ConfigError(f"--teacher {teacher}: {error}") from None
    print(f"\nteacher {teacher}: {found.source}")
    for row, teacher_plan in zip(students, teacher_plans, strict=True):
        print(format_distillation(teacher_plan, row.plan, args.budget_gib))


def plan_fits(args, shapes: dict, setup, precision: PlannedPrecision) -> int:
    """`plan --fits`: the catalogue models (or those of --model) against every recipe, as one table."""
    models = []
    for name in args.model or ():
        entry = catalogue_entry(name)
        if entry is None:
            raise ConfigError(f"--fits lists catalogue models; '{name}' is not one (plan --fits shows them).")
        models.append(entry.hub_id)
    # distill is left out: its peak depends on a teacher, one model per plan (plan --recipe distill --teacher
    # T), and its student trains as full_ft does, whose column answers for the student.
    shapes = {name: shape for name, shape in shapes.items() if name != "distill"}
    rows = catalogue_fits(
        shapes, setup, args.budget_gib, models=models or None, num_labels=args.num_labels,
        precision_for=precision.choose,
    )  # fmt: skip
    print(format_fits(rows, list(shapes), setup, args.budget_gib, markdown=args.markdown))
    print_flash_attention_note(
        args,
        setup.attention,
        [catalogue_entry(row.model).model_type for row in rows if catalogue_entry(row.model)],
    )
    return 0
