"""The losses a run trains and evaluates with, beside what the model's own head computes.

Training: a sequence-classification head already computes its task's loss from
`config.problem_type` (cross-entropy, BCE with logits, MSE). `--class_weights` replaces it with
`WeightedCrossEntropy`, handed to the Trainer as its own `compute_loss_func` hook.

Evaluation: `evaluation_loss` recomputes the same loss over every gathered example at once, so an
example repeated to even out the processes' shares never counts twice (RecipeTrainer).
"""

from __future__ import annotations

import torch

from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION
from recipes_lib.config.validation import parse_class_weights
from recipes_lib.errors import ConfigError


class WeightedCrossEntropy:
    """Each example's cross-entropy times its class's weight, for the Trainer's `compute_loss_func`.

    The sum over the batch is divided by the examples in the whole optimizer step
    (`num_items_in_batch`), as the Trainer expects of that hook under gradient accumulation.
    """

    def __init__(self, class_weights: list[float], label_smoothing: float = 0.0):
        self.class_weights = list(class_weights)
        self.label_smoothing = label_smoothing

    def __call__(self, outputs, labels, num_items_in_batch=None):
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        weights = torch.tensor(self.class_weights, dtype=torch.float32, device=logits.device)
        losses = torch.nn.functional.cross_entropy(
            logits.float(), labels, reduction="none", label_smoothing=self.label_smoothing
        )
        count = num_items_in_batch if num_items_in_batch is not None else labels.numel()
        return (losses * weights[labels]).sum() / count


def evaluation_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    problem_type: str | None,
    class_weights: list[float] | None = None,
    label_smoothing: float = 0.0,
) -> float:
    """The loss the model's head computes, over all the gathered examples at once.

    Single-label: mean cross-entropy (with the same label smoothing, if any); under
    --class_weights the weighted loss as torch reports it, divided by the sum of the examples'
    weights (training divides by their number, as the Trainer's accumulation needs).
    Multi-label: binary cross-entropy with logits, the mean over every example and class.
    Regression: mean squared error of the single output.
    """
    functional = torch.nn.functional
    if problem_type == MULTI_LABEL:
        return functional.binary_cross_entropy_with_logits(logits, labels.float()).item()
    if problem_type == REGRESSION:
        return functional.mse_loss(logits.reshape(len(logits), -1)[:, 0], labels.float().reshape(-1)).item()
    weight = torch.tensor(class_weights) if class_weights is not None else None
    return functional.cross_entropy(
        logits, labels.long(), weight=weight, label_smoothing=label_smoothing
    ).item()


def class_weights_from(option: str, label_ids, names: list[str]) -> list[float]:
    """The per-class loss weights --class_weights asks for: 'balanced' from the label counts, or a list."""
    if option != "balanced":
        return parse_class_weights(option, names)
    counts = torch.bincount(torch.tensor(label_ids), minlength=len(names)).tolist()
    missing = [name for name, count in zip(names, counts, strict=True) if count == 0]
    if missing:
        raise ConfigError(
            f"class_weights balanced needs every class in the training data; {missing} has none."
        )
    return [round(len(label_ids) / (len(names) * count), 6) for count in counts]
