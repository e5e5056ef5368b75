"""The losses a run trains and evaluates with, beside what the model's own head computes.

`--class_weights` replaces the head's loss with a weighted one (training/class_weights.py, loaded only
then) as the Trainer's `compute_loss_func` (`weighted_loss`). `evaluation_loss` recomputes the loss over
every gathered example at once, so an example repeated to even out the processes' shares never counts twice.
"""

from __future__ import annotations

import torch

from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION


def weighted_loss(problem_type: str, class_weights: list[float] | None, label_smoothing: float = 0.0):
    """The Trainer's compute_loss_func for --class_weights (None without: the model's own loss)."""
    if not class_weights:
        return None
    from recipes_lib.training.class_weights import WeightedBinaryCrossEntropy, WeightedCrossEntropy

    if problem_type == MULTI_LABEL:
        return WeightedBinaryCrossEntropy(class_weights)
    return WeightedCrossEntropy(class_weights, label_smoothing)


def evaluation_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    problem_type: str | None,
    class_weights: list[float] | None = None,
    label_smoothing: float = 0.0,
) -> float:
    """The loss the model's head computes, over all the gathered examples at once (the mean). Under
    single-label --class_weights, torch divides by the sum of the examples' weights (training divides by
    their number, as the Trainer's accumulation needs); under multi-label, each label's positive rows weigh."""
    functional = torch.nn.functional
    if problem_type == MULTI_LABEL:
        weight = torch.tensor(class_weights, dtype=logits.dtype) if class_weights is not None else None
        return functional.binary_cross_entropy_with_logits(logits, labels.float(), pos_weight=weight).item()
    if problem_type == REGRESSION:
        return functional.mse_loss(logits.reshape(len(logits), -1)[:, 0], labels.float().reshape(-1)).item()
    weight = torch.tensor(class_weights) if class_weights is not None else None
    return functional.cross_entropy(
        logits, labels.long(), weight=weight, label_smoothing=label_smoothing
    ).item()
