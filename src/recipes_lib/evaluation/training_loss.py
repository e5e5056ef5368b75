"""A training loss still high at the end of a run, said once with the figure and what usually helps.

A short run at a low learning rate (2e-5, full fine-tuning's default, on a few thousand rows) can end
far from fitting its training data: the accuracy looks middling and nothing says why. Chance is log K,
the loss of spreading the probability evenly over K classes, where a fresh head starts.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from recipes_lib.config.tasks import SINGLE_LABEL
from recipes_lib.evaluation.neglected import more_learning, more_steps

if TYPE_CHECKING:
    from recipes_lib.results import RunResults

# Above three quarters of chance the model gives the rows' own classes less than K^-0.75 of probability
# (exp(-loss), the geometric mean): 0.59 of 2 classes, 0.35 of 4, 0.26 of 6. Half of chance was too eager:
# `make demo`'s full_ft ends at 0.62 of it (0.865 of 1.386) with accuracy 0.8375, and the same run at 1e-4
# ended lower (0.785; one seed, issue #42's second session).
HIGH_LOSS_SHARE = 0.75
# "At the end": the losses logged in the last tenth of the steps, averaged (one logged step is noisy).
END_OF_RUN = 0.1


def train_loss_check(
    log_history: list[dict[str, Any]],
    problem_type: str | None,
    num_labels: int | None,
    teacher: str | None = None,
) -> dict[str, Any]:
    """{"train_loss_end", "train_loss_high"}: the mean of the training losses logged in the run's last tenth
    of steps, and whether it is above HIGH_LOSS_SHARE of chance (log num_labels). High is judged for a
    single-label run on its task's own loss only (None otherwise: multi-label, regression, a `teacher`'s)."""
    logged = [(entry["step"], entry["loss"]) for entry in log_history if "loss" in entry and "step" in entry]
    if not logged:
        return {"train_loss_end": None, "train_loss_high": None}
    last = logged[-1][0]
    end = [loss for step, loss in logged if step >= last * (1 - END_OF_RUN)]
    final = sum(end) / len(end)
    judged = problem_type == SINGLE_LABEL and not teacher and (num_labels or 0) > 1
    high = final > HIGH_LOSS_SHARE * math.log(num_labels) if judged else None
    return {"train_loss_end": round(final, 4), "train_loss_high": high}


def high_loss_note(results: RunResults, default: float | None = None) -> str | None:
    """The end-of-run paragraph on a training loss still high, from a run's record; None when it is not.
    `default`: the learning rate the recipe runs at when none is given (its SPEC's)."""
    if not results.train_loss_high:
        return None
    final, classes, config = results.train_loss_end, results.num_labels, results.config or {}
    rate, epochs, max_steps = config.get("learning_rate"), results.epochs, config.get("max_steps")
    note = (
        f"Training loss at the end: {final:.3f}, above three quarters of chance "
        f"({math.log(classes):.3f}, log {classes}): "
        f"the model gives the training rows' own classes {math.exp(-final):.2f} of probability (geometric mean), "
        "still far from fitting them."
    )
    if rate is not None and default is not None and rate > default:
        return (
            f"{note} Its --learning_rate {rate:g} is above the recipe's default {default:g}, where a loss this "
            f"high can be a run that diverged: try the default, --learning_rate {default:g}, or "
            f"{more_steps(epochs, max_steps)}."
        )
    said = "; ".join(more_learning(rate, epochs, max_steps, default=rate is not None and rate == default))
    return f"{note} What usually helps: {said}."
