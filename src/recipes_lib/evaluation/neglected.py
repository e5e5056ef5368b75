"""Classes a model never (or almost never) predicts, found in the per-class scores and said in plain words:
a model that ignores a small class can still reach a fine accuracy, and macro-F1 drops without naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recipes_lib.results import RunResults

# A class whose rows the model finds fewer than 1 time in 10: never, or almost never, predicted.
NEGLECTED_RECALL = 0.1


def neglected_classes(
    per_class: dict[str, dict[str, Any]] | None,
    confusion_matrix: dict[str, Any] | None = None,
    max_recall: float = NEGLECTED_RECALL,
) -> list[dict[str, Any]]:
    """[{name, support, recall, predicted}] for each class with rows and a recall under `max_recall`;
    `predicted`: the rows the model gave that class (the matrix's column), None without one (multi-label)."""
    if not per_class:
        return []
    columns = {}
    if confusion_matrix:
        matrix = confusion_matrix["matrix"]
        columns = {name: sum(row[i] for row in matrix) for i, name in enumerate(confusion_matrix["labels"])}
    return [
        {
            "name": name,
            "support": int(scores["support"]),
            "recall": float(scores["recall"]),
            "predicted": columns.get(name),
        }
        for name, scores in per_class.items()
        if scores["support"] > 0 and scores["recall"] < max_recall
    ]


def describe_class(entry: dict[str, Any]) -> str:
    """ "'ABBR' (9 rows, recall 0.00, predicted for 0 rows)"."""
    predicted = "" if entry.get("predicted") is None else f", predicted for {entry['predicted']} rows"
    return f"'{entry['name']}' ({entry['support']} rows, recall {entry['recall']:.2f}{predicted})"


def results_neglect_note(results: RunResults) -> str | None:
    """The end-of-run paragraph on a run's neglected classes and what usually helps; None when there are none.
    When the training-loss note follows (evaluation/training_loss.py), the learning rate, the epochs and the
    loss are left to it. Each remedy is an option the run takes, with a value."""
    neglected = results.neglected_classes
    if not neglected:
        return None
    config = results.config or {}  # the flat resolved configuration (ParsedArguments.to_dict)
    never = all(entry["recall"] == 0 for entry in neglected)
    classes = ", ".join(describe_class(entry) for entry in neglected)
    plural = len(neglected) > 1
    note = (
        f"The model {'never' if never else 'almost never'} predicts {'these classes' if plural else 'the class'} "
        f"on {results.eval_split or 'validation'}: {classes}. The accuracy hides {'them' if plural else 'it'}; "
        f"macro-F1 counts {'each' if plural else 'it'} near 0. What usually helps:"
    )
    remedies = []
    if not results.class_weights:  # single- and multi-label alike (training/class_weights.py)
        remedies.append("--class_weights balanced (the loss weighs each class by its rarity)")
    if results.train_loss_high:
        remedies.append("a higher learning rate or more training (the training-loss note below)")
    else:
        remedies += more_learning(config.get("learning_rate"), results.epochs, config.get("max_steps"))
    note += " " + "; ".join(remedies) + "."
    if results.train_loss_end is not None and not results.train_loss_high:
        note += f" Training loss at the end: {results.train_loss_end:.3f}."
    return note


def more_steps(epochs: float | None, max_steps: int | None) -> str:
    """Twice the training, as the option that sets it in this run: --max_steps when it was given, else epochs."""
    if max_steps and max_steps > 0:  # -1: not given
        return f"more steps: --max_steps {2 * int(max_steps)} (this run: {int(max_steps)})"
    if epochs:
        return f"more epochs: --num_train_epochs {2 * epochs:.3g} (this run: {epochs:.3g})"
    return "more epochs (--num_train_epochs)"


def more_learning(
    learning_rate: float | None, epochs: float | None, max_steps: int | None = None, default: bool = False
) -> list[str]:
    """The remedies for a run that learnt too little: a higher learning rate and more training, each as the
    option with a value (`default`: this run's rate is the recipe's default)."""
    rate = "a higher --learning_rate"
    if learning_rate is not None:
        which = ", the recipe's default" if default else ""
        rate += (
            f", e.g. --learning_rate {2.5 * learning_rate:.2g} (this run: {learning_rate:g}{which}; "
            f"up to {5 * learning_rate:.2g})"
        )
    return [rate, more_steps(epochs, max_steps)]
