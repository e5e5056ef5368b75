"""What a finished run has not learnt, said in plain words: classes it never (or almost never) predicts,
and a training loss still high at the end.

A model that ignores a small class can still reach a fine accuracy: the class is a few percent of
the rows. Macro-F1 drops, but nothing names the class. `neglected_classes` reads the per-class
report (evaluation/predictions.py per_class_report) and returns each class that has rows and a
recall under NEGLECTED_RECALL; `neglect_note` is the paragraph the end-of-run summary prints.
Crossval's label issues use the same test on held-out predictions (crossval/label_issues.py).

`train_loss_check` reads the training losses the Trainer logged: a single-label run whose loss over its
last tenth of steps is still above HIGH_LOSS_SHARE of chance (log K, the loss of spreading the
probability evenly over K classes, where a fresh head starts) has learnt little of the task yet, as a
short run at a low learning rate leaves it; `high_loss_note` says so once with the figure.
"""

from __future__ import annotations

import math
from typing import Any

from recipes_lib.config.tasks import SINGLE_LABEL

# A class whose rows the model finds fewer than 1 time in 10: never, or almost never, predicted.
NEGLECTED_RECALL = 0.1
# Training loss at the end above half of chance: the model gives the rows' own classes less than 1/sqrt(K) of
# probability (exp(-loss), the geometric mean), 0.71 of 2 classes, 0.5 of 4, 0.41 of 6.
HIGH_LOSS_SHARE = 0.5
# "At the end": the losses logged in the last tenth of the steps, averaged (one logged step is noisy).
END_OF_RUN = 0.1


def neglected_classes(
    per_class: dict[str, dict[str, Any]] | None,
    confusion_matrix: dict[str, Any] | None = None,
    max_recall: float = NEGLECTED_RECALL,
) -> list[dict[str, Any]]:
    """[{name, support, recall, predicted}] for each class with rows and a recall under `max_recall`.

    `predicted` is how many rows the model gave that class (the confusion matrix's column), or None
    without a matrix (multi-label).
    """
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


def neglected_from_predictions(
    predictions, references, names: list[str], max_recall: float = NEGLECTED_RECALL
):
    """neglected_classes from single-label class ids (predicted and true), for held-out predictions."""
    return neglected_from_label_sets(
        [{prediction} for prediction in predictions],
        [{reference} for reference in references],
        names,
        max_recall,
    )


def neglected_from_label_sets(predicted, given, names: list[str], max_recall: float = NEGLECTED_RECALL):
    """neglected_classes from each row's predicted and given sets of class ids (multi-label: any number;
    a class's recall is the share of the rows given it that the model predicts it for)."""
    neglected = []
    for index, name in enumerate(names):
        rows = [i for i, classes in enumerate(given) if index in classes]
        if not rows:
            continue
        recall = sum(1 for i in rows if index in predicted[i]) / len(rows)
        if recall < max_recall:
            count = sum(1 for classes in predicted if index in classes)
            neglected.append({"name": name, "support": len(rows), "recall": recall, "predicted": count})
    return neglected


def describe_class(entry: dict[str, Any]) -> str:
    """ "'ABBR' (9 rows, recall 0.00, predicted for 0 rows)"."""
    predicted = "" if entry.get("predicted") is None else f", predicted for {entry['predicted']} rows"
    return f"'{entry['name']}' ({entry['support']} rows, recall {entry['recall']:.2f}{predicted})"


def neglect_note(
    neglected: list[dict[str, Any]],
    split: str = "validation",
    class_weights: dict | None = None,
    learning_rate: float | None = None,
    epochs: float | None = None,
    train_loss: float | None = None,
) -> str | None:
    """The end-of-run paragraph on the neglected classes and what usually helps; None when there are none."""
    if not neglected:
        return None
    never = all(entry["recall"] == 0 for entry in neglected)
    classes = ", ".join(describe_class(entry) for entry in neglected)
    plural = len(neglected) > 1
    note = (
        f"The model {'never' if never else 'almost never'} predicts {'these classes' if plural else 'the class'} "
        f"on {split}: {classes}. The accuracy hides {'them' if plural else 'it'}; macro-F1 counts "
        f"{'each' if plural else 'it'} near 0. What usually helps:"
    )
    remedies = []
    if not class_weights:
        remedies.append("--class_weights balanced (the loss weighs each class by its rarity)")
    remedies += more_learning(learning_rate, epochs)
    note += " " + "; ".join(remedies) + "."
    if train_loss is not None:
        note += f" Training loss at the end: {train_loss:.3f}."
    return note


def more_learning(learning_rate: float | None, epochs: float | None) -> list[str]:
    """The remedies for a run that learnt too little: a higher learning rate and more epochs, with this run's."""
    rate = "a higher --learning_rate"
    if learning_rate is not None:
        rate += f" (this run: {learning_rate:g}; e.g. {2.5 * learning_rate:.2g} to {5 * learning_rate:.2g})"
    rounds = f" (this run: {epochs:.3g})" if epochs is not None else ""
    return [rate, f"more --num_train_epochs{rounds}"]


def results_neglect_note(results: dict[str, Any]) -> str | None:
    """neglect_note from a run's results.json contents (its neglected_classes, class weights, settings)."""
    config = results.get("config") or {}  # the flat resolved configuration (ParsedArguments.to_dict)
    return neglect_note(
        results.get("neglected_classes") or [],
        split=str(results.get("eval_split") or "validation"),
        class_weights=results.get("class_weights"),
        learning_rate=config.get("learning_rate"),
        epochs=results.get("epochs"),
        train_loss=None if results.get("train_loss_high") else results.get("train_loss_end"),
    )


def train_loss_check(log_history: list[dict[str, Any]], results: dict[str, Any]) -> dict[str, Any]:
    """{"train_loss_end", "train_loss_high"}: the mean of the training losses logged in the run's last tenth of
    steps, and whether it is above HIGH_LOSS_SHARE of chance (log num_labels). High is judged for a
    single-label run on its task's own loss only (None otherwise: multi-label, regression, a teacher's loss)."""
    logged = [(entry["step"], entry["loss"]) for entry in log_history if "loss" in entry and "step" in entry]
    if not logged:
        return {"train_loss_end": None, "train_loss_high": None}
    last = logged[-1][0]
    end = [loss for step, loss in logged if step >= last * (1 - END_OF_RUN)]
    final = sum(end) / len(end)
    judged = results.get("problem_type") == SINGLE_LABEL and not (results.get("config") or {}).get("teacher")
    num_labels = results.get("num_labels") or 0
    high = final > HIGH_LOSS_SHARE * math.log(num_labels) if judged and num_labels > 1 else None
    return {"train_loss_end": round(final, 4), "train_loss_high": high}


def high_loss_note(results: dict[str, Any]) -> str | None:
    """The end-of-run paragraph on a training loss still high, from results.json's contents; None when it is not."""
    if not results.get("train_loss_high"):
        return None
    final, classes = results["train_loss_end"], results["num_labels"]
    config = results.get("config") or {}
    return (
        f"Training loss at the end: {final:.3f}, above half of chance ({math.log(classes):.3f}, log {classes}): "
        f"the model gives the training rows' own classes {math.exp(-final):.2f} of probability on average, so it "
        "has learnt little of the task yet. What usually helps: "
        + "; ".join(more_learning(config.get("learning_rate"), results.get("epochs")))
        + "."
    )
