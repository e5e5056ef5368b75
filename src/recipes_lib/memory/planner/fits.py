"""What trains in a memory budget: every catalogue model against every recipe, with and without
activation checkpointing, as `recipes-lib plan --fits` prints it (the README's "What trains in
24 GB" table).

For each model and recipe: the largest per-device batch that fits, without and with activation
checkpointing, and the cheapest way to train it at the asked batch (32 by default). Every figure is
the planner's prediction from the config alone; nothing here has run on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from recipes_lib.config.recipe_spec import TrainingShape
from recipes_lib.memory.planner.catalogue import CATALOGUE
from recipes_lib.memory.planner.parameters import count_parameters_on_meta
from recipes_lib.memory.planner.plan import Setup, largest_batch
from recipes_lib.memory.planner.report import PLANNING_ERRORS, describe_setup, error_reason
from recipes_lib.units import GIB, format_table

# The largest batch the table looks for: past it, a cell says "1024+" (a bigger batch fits too).
# Searching further would only slow the table down for the small models.
BATCH_LIMIT = 1024


@dataclass
class ModelFits:
    """One model against every recipe: the largest batch per (recipe, checkpointing), or why none."""

    model: str
    params: int = 0
    # (recipe, activation checkpointing) -> the largest batch that fits (0: not even batch 1).
    max_batch: dict[tuple[str, bool], int] = field(default_factory=dict)
    # (recipe, activation checkpointing) -> why there is no plan (e.g. ALBERT has no checkpointing).
    errors: dict[tuple[str, bool], str] = field(default_factory=dict)

    def fits(self, recipe: str, checkpointing: bool, batch: int) -> bool:
        """Whether `batch` fits: the predicted peak grows with the batch, so up to the largest one does."""
        return self.max_batch.get((recipe, checkpointing), 0) >= batch

    def cheapest(self, recipes: Iterable[str], batch: int) -> str:
        """The first way to train at `batch` that fits, in the order that gives up least: the recipes
        in the registry's order (each trades more for memory than the one before), each without
        activation checkpointing, then with it (which costs time, about a third more compute, not results)."""
        for recipe in recipes:
            for checkpointing in (False, True):
                if self.fits(recipe, checkpointing, batch):
                    return f"{recipe} + ckpt" if checkpointing else recipe
        return "none"


def model_fits(
    model: str, config, shapes: Mapping[str, TrainingShape | Exception], setup: Setup, budget_gib: float
) -> ModelFits:
    """`config` (named `model`) trained every way in `shapes`, without and with activation checkpointing."""
    row = ModelFits(model)
    for recipe, shape in shapes.items():
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
            labelled = replace(setup, shape=shape, label=recipe, gradient_checkpointing=checkpointing)
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
) -> list[ModelFits]:
    """`model_fits` for each catalogue model (all of them by default), built from the catalogue's own
    values, never a cached or downloaded config, so the table is the same on every machine."""
    rows = []
    for name in models or CATALOGUE:
        rows.append(model_fits(name, CATALOGUE[name].config(num_labels), shapes, setup, budget_gib))
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
    rows: list[ModelFits],
    recipes: Iterable[str],
    setup: Setup,
    budget_gib: float,
    markdown: bool = False,
) -> str:
    """One row per model: its parameters, the cheapest recipe that fits at the setup's batch, and
    each recipe's largest batch; then what the cells mean and which rows had no plan."""
    recipes = list(recipes)
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
    reasons: dict[str, dict[str, None]] = {}  # reason -> the models it stopped (an ordered set)
    for row in rows:
        for reason in row.errors.values():
            reasons.setdefault(reason, {})[row.model] = None
    lines += [f"{bullet}Not planned for {', '.join(models)}: {reason}" for reason, models in reasons.items()]
    return "\n".join(lines)
