"""The paragraph that names a collapsed model (evaluation/collapse.py), its figures, the usual cause and
what helps: loaded only when a model collapsed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION

if TYPE_CHECKING:
    from recipes_lib.results import RunResults


def remedies(
    learning_rate: float | None, warmup_steps: float | None, epochs: float | None, max_steps=None
) -> list[str]:
    """What brings a collapsed run back, each an option the recipe takes, with this run's values:
    a lower learning rate, a longer warmup, more steps. Never a higher rate: a rate too high for the
    model and data is what usually collapses it."""
    said = []
    if learning_rate:
        said.append(
            f"a lower --learning_rate: --learning_rate {learning_rate / 5:.2g} (this run: {learning_rate:g})"
        )
    if warmup_steps is not None and warmup_steps < 1:  # a share of the steps
        if warmup_steps < 0.3:
            said.append(
                f"a longer warmup: --warmup_steps {min(0.3, warmup_steps + 0.1):.2g} (this run: {warmup_steps:g})"
            )
    elif warmup_steps is not None:
        said.append(
            f"a longer warmup: --warmup_steps {int(2 * warmup_steps) or 10} (this run: {warmup_steps:g})"
        )
    if max_steps is not None and max_steps > 0:
        said.append(f"more steps: --max_steps {2 * int(max_steps)} (this run: {int(max_steps)})")
    elif epochs:
        said.append(f"more steps: --num_train_epochs {2 * epochs:g} (this run: {epochs:g})")
    return said


def collapse_note(
    variation: dict[str, Any],
    split: str = "validation",
    learning_rate: float | None = None,
    warmup_steps: float | None = None,
    epochs: float | None = None,
    max_steps: int | None = None,
    when: str = "at the end of the run",
    problem_type: str | None = None,
    class_weights: str | None = None,
) -> str:
    """The paragraph that names a collapsed model, its figures, the usual cause and what helps."""
    figure = (
        f"its score varies by {variation['output_std']:.4f} of the true scores' standard deviation"
        if problem_type == REGRESSION
        else f"no class's probability varies by more than {variation['output_std']:.4f} (standard deviation)"
    )
    helps = remedies(learning_rate, warmup_steps, epochs, max_steps)
    if problem_type == MULTI_LABEL and not class_weights:  # what rare labels need (benchmarks/rare_labels.py)
        helps.insert(0, "per-label positive weights for rare labels: --class_weights balanced")
    note = (
        f"The model collapsed {when}: it gives all {variation['rows']} {split} rows the same prediction, and "
        f"{figure} across them. Its outputs do not depend on the input: its scores are a constant predictor's. "
        "A run that ends so gets no tuned threshold, and no export gate passes it. Two causes are usual: a "
        "learning rate too high for the model and data, which makes the encoder's representations of "
        "different texts the same (a higher rate makes it worse), or too little training for the outputs to "
        "move from where the fresh head started them."
    )
    if helps:
        note += " What usually helps: " + "; ".join(helps) + "."
    return note


def results_collapse_note(results: RunResults) -> str | None:
    """collapse_note from a run's record; None when the model did not collapse."""
    if not results.model_collapsed:
        return None
    config = results.config or {}
    max_steps = config.get("max_steps")
    return collapse_note(
        results.output_variation,
        split=str(results.eval_split or "validation"),
        learning_rate=config.get("learning_rate"),
        warmup_steps=config.get("warmup_steps"),
        epochs=config.get("num_train_epochs"),
        max_steps=max_steps if max_steps and max_steps > 0 else None,
        problem_type=results.problem_type,
        class_weights=config.get("class_weights"),
    )
