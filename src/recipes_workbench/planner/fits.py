"""What trains in a memory budget: every catalogue model against every recipe and the memory techniques
the largest encoders need on one GPU (TECHNIQUES), with and without activation checkpointing, as
`recipes-lib plan --fits` prints it. Every figure is predicted from the config alone, none measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from recipes_lib.config.recipe_spec import TrainingShape
from recipes_lib.units import GIB
from recipes_workbench.planner.catalogue import CATALOGUE
from recipes_workbench.planner.parameters import count_parameters_on_meta
from recipes_workbench.planner.plan import largest_batch
from recipes_workbench.planner.report import PLANNING_ERRORS, PrecisionFor, describe_setup, error_reason
from recipes_workbench.planner.setup import Setup
from recipes_workbench.shared import format_table

# The largest batch the table looks for: past it, a cell says "1024+" (a bigger batch fits too).
# Searching further would only slow the table down for the small models.
BATCH_LIMIT = 1024


@dataclass(frozen=True)
class Technique:
    """A recipe with one memory technique added: its shape's and its Setup's changes."""

    recipe: str
    shape_changes: Mapping[str, Any] = field(default_factory=dict)
    setup_changes: Mapping[str, Any] = field(default_factory=dict)
    # Its column comes before the recipe's when it gives up less (an 8-bit base is closer to the
    # full-precision one than NF4), after it otherwise (the same results, more time).
    before: bool = False


# In the order of `cheapest`: a technique that costs only time sits after its recipe.
TECHNIQUES: dict[str, Technique] = {
    # DeepSpeed ZeRO-Offload: AdamW's state and the fp32 master weights in CPU memory; exact AdamW.
    "full_ft+offload": Technique("full_ft", setup_changes={"optimizer_offload": True}),
    # PagedAdamW8bit: the 8-bit state may leave the GPU while the activations need the room.
    "adamw_8bit+paged": Technique("adamw_8bit", shape_changes={"paged_optimizer": True}),
    # LoRA on an 8-bit LLM.int8 base: twice NF4's weight bytes, closer to the full-precision base.
    "qlora+int8": Technique("qlora", shape_changes={"base_bits": 8}, before=True),
}


TECHNIQUES_LEGEND = (
    "Techniques: full_ft+offload is full_ft under accelerate_configs/deepspeed_zero2_offload.yaml (DeepSpeed "
    "ZeRO-Offload: AdamW's state, fp32 master weights and gradients in CPU memory, 16 B per parameter there; "
    "the GPU holds bf16 weights); adamw_8bit+paged is adamw_8bit --paged_optimizer true (the state may page "
    "out to CPU memory while the activations need the room, and is back for the optimizer step); qlora+int8 "
    "is qlora --base_bits 8 (an 8-bit LLM.int8 base, 1 B per weight). A technique that costs only time comes "
    "right after its recipe in the cheapest order, the 8-bit base before NF4. Offload and paging run on a GPU "
    "only; the 8-bit base's CPU path was checked against a CPU run, its CUDA path (int8 matmuls) was not; none "
    "of the three has been measured on a GPU yet"
)


def fits_columns(recipes: Iterable[str]) -> list[str]:
    """The recipes with each technique of theirs beside them, in the order `cheapest` tries them."""
    columns = []
    for recipe in recipes:
        if recipe in TECHNIQUES:  # already a column: the list was expanded before
            continue
        mine = [name for name, technique in TECHNIQUES.items() if technique.recipe == recipe]
        before = [name for name in mine if TECHNIQUES[name].before]
        columns += before + [recipe] + [name for name in mine if name not in before]
    return columns


def with_techniques(
    shapes: Mapping[str, TrainingShape | Exception],
) -> dict[str, tuple[TrainingShape | Exception, Mapping[str, Any]]]:
    """{column: (shape, Setup changes)}: the recipes' shapes, and each technique's from its recipe's."""
    columns = {}
    for name in fits_columns(shapes):
        technique = TECHNIQUES.get(name)
        if technique is None:
            columns[name] = (shapes[name], {})
            continue
        shape = shapes[technique.recipe]
        if not isinstance(shape, Exception):
            shape = replace(shape, **technique.shape_changes)
        columns[name] = (shape, technique.setup_changes)
    return columns


@dataclass
class ModelFits:
    """One model against every recipe: the largest batch per (recipe, checkpointing), or why none."""

    model: str
    params: int = 0
    # (recipe, activation checkpointing) -> the largest batch that fits (0: not even batch 1).
    max_batch: dict[tuple[str, bool], int] = field(default_factory=dict)
    # (recipe, activation checkpointing) -> why there is no plan (e.g. ALBERT has no checkpointing).
    errors: dict[tuple[str, bool], str] = field(default_factory=dict)
    # The precision it was planned in, with why (its family's own choice), where it is not the table's.
    other_precision: str = ""

    def cheapest(self, recipes: Iterable[str], batch: int) -> str:
        """The first way to train at `batch` that fits, in the order that gives up least: the recipes
        in the registry's order (each trades more for memory than the one before), each without
        activation checkpointing, then with it (which costs time, about a third more compute, not results)."""
        for recipe in recipes:
            for checkpointing in (False, True):
                # The predicted peak grows with the batch: every batch up to the largest fits.
                if self.max_batch.get((recipe, checkpointing), 0) >= batch:
                    return f"{recipe} + ckpt" if checkpointing else recipe
        return "none"


def model_fits(
    model: str,
    config,
    columns: Mapping[str, tuple[TrainingShape | Exception, Mapping[str, Any]]],
    setup: Setup,
    budget_gib: float,
) -> ModelFits:
    """`config` (named `model`) trained every way in `columns` (with_techniques': each a shape and what
    it changes in `setup`), without and with activation checkpointing."""
    row = ModelFits(model)
    for recipe, (shape, changes) in columns.items():
        try:
            if isinstance(shape, Exception):
                raise shape
            # One count per recipe serves both checkpointing settings and every batch of the search.
            parameters = count_parameters_on_meta(config, shape)
        except PLANNING_ERRORS as error:
            row.errors.update({(recipe, ckpt): error_reason(error) for ckpt in (False, True)})
            continue
        row.params = row.params or parameters.total
        for checkpointing in (False, True):
            labelled = replace(
                setup, shape=shape, label=recipe, gradient_checkpointing=checkpointing, **changes
            )
            try:
                row.max_batch[recipe, checkpointing] = largest_batch(
                    config, labelled, int(budget_gib * GIB), limit=BATCH_LIMIT, parameters=parameters
                )
            except PLANNING_ERRORS as error:
                row.errors[recipe, checkpointing] = error_reason(error)
    return row


def catalogue_fits(
    shapes: Mapping[str, TrainingShape | Exception],
    setup: Setup,
    budget_gib: float,
    models: Iterable[str] | None = None,
    num_labels: int = 2,
    precision_for: PrecisionFor | None = None,
) -> list[ModelFits]:
    """`model_fits` for each catalogue model (all of them by default), built from the catalogue's own
    values, never a cached or downloaded config, so the table is the same on every machine. Every
    recipe of `shapes` is planned with its techniques (`with_techniques`); `precision_for` as in plan_models."""
    columns = with_techniques(shapes)
    rows = []
    for name in models or CATALOGUE:
        config = CATALOGUE[name].config(num_labels)
        model_setup = (
            setup if precision_for is None else setup.with_precision(*precision_for(config.model_type))
        )
        row = model_fits(name, config, columns, model_setup, budget_gib)
        if model_setup.precision != setup.precision:
            row.other_precision = f"{model_setup.precision} ({model_setup.precision_reason})"
        rows.append(row)
    return rows


def _params(count: int) -> str:
    return f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.0f}M"


def _batch_cell(row: ModelFits, recipe: str) -> str:
    """'41 / 160': the largest batch without / with checkpointing; '-' where there is no plan."""
    cells = []
    for checkpointing in (False, True):
        batch = row.max_batch.get((recipe, checkpointing))
        if batch is None:
            cells.append("-")
        else:
            cells.append(f"{BATCH_LIMIT}+" if batch >= BATCH_LIMIT else str(batch))
    return " / ".join(cells)


def format_fits(
    rows: list[ModelFits], recipes: Iterable[str], setup: Setup, budget_gib: float, markdown: bool = False
) -> str:
    """One row per model: its parameters, the cheapest recipe that fits at the setup's batch, and
    each recipe's (and technique's, `fits_columns`) largest batch; then what the cells mean and which
    rows had no plan."""
    recipes = fits_columns(recipes)
    batch = setup.batch_size
    header = ["model", "params", f"cheapest at batch {batch}", *recipes, "figures"]
    body = [
        [row.model, _params(row.params), row.cheapest(recipes, batch)]
        + [_batch_cell(row, recipe) for recipe in recipes]
        + ["predicted"]
        for row in rows
    ]
    bullet = "- " if markdown else ""
    lines = [
        f"What trains in {budget_gib:g} GiB, predicted by the planner from each config (not measured): "
        f"{describe_setup(replace(setup, gradient_checkpointing=False), budget_gib)}.",  # the cells say which
        "",
        format_table(header, body, markdown),
        "",
        f"{bullet}Each recipe's cell: the largest batch per device that fits, without / with activation "
        f"checkpointing ({BATCH_LIMIT}+: at least {BATCH_LIMIT}; 0: not even batch 1; -: not planned).",
        f"{bullet}Cheapest: the first that fits batch {batch}, in the order {', '.join(recipes)}, each "
        "without activation checkpointing (ckpt) before with it: checkpointing costs time, not results; "
        "each later recipe changes what or how precisely the model trains.",
    ]
    techniques = [name for name in recipes if name in TECHNIQUES]
    if techniques:
        lines.append(f"{bullet}{TECHNIQUES_LEGEND}.")
    reasons: dict[str, dict[str, None]] = {}  # reason -> the models it stopped (an ordered set)
    for row in rows:
        for reason in row.errors.values():
            reasons.setdefault(reason, {})[row.model] = None
    lines += [f"{bullet}{row.model}: planned in {row.other_precision}" for row in rows if row.other_precision]
    lines += [f"{bullet}Not planned for {', '.join(models)}: {reason}" for reason, models in reasons.items()]
    return "\n".join(lines)
