"""`--class_weights`: the per-class weights it asks for and the weighted losses the Trainer trains with
(`WeightedCrossEntropy` single-label, `WeightedBinaryCrossEntropy` multi-label: BCEWithLogitsLoss's pos_weight)."""

from __future__ import annotations

import torch

from recipes_lib.config.validation import parse_class_weights
from recipes_lib.errors import ConfigError


class WeightedCrossEntropy:
    """Each example's cross-entropy times its class's weight, for the Trainer's `compute_loss_func`: the
    sum over the batch divided by the examples in the whole optimizer step (`num_items_in_batch`)."""

    def __init__(self, class_weights: list[float], label_smoothing: float = 0.0):
        self.class_weights = list(class_weights)
        self.label_smoothing = label_smoothing

    def __call__(self, outputs, labels, num_items_in_batch=None):
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        weights = torch.tensor(self.class_weights, dtype=torch.float32, device=logits.device)
        count = num_items_in_batch if num_items_in_batch is not None else labels.numel()
        return self.losses(logits.float(), labels, weights).sum() / count

    def losses(self, logits, labels, weights):
        losses = torch.nn.functional.cross_entropy(
            logits, labels, reduction="none", label_smoothing=self.label_smoothing
        )
        return losses * weights[labels]


class WeightedBinaryCrossEntropy(WeightedCrossEntropy):
    """Multi-label: each label's binary cross-entropy with its positive rows weighed by the label's weight
    (`pos_weight`). The Trainer counts `num_items_in_batch` over the label tensor's elements (rows x
    labels): with every weight 1 this is the head's own mean BCE."""

    def losses(self, logits, labels, weights):
        return torch.nn.functional.binary_cross_entropy_with_logits(
            logits, labels.float(), pos_weight=weights, reduction="none"
        )


# The most a label's positive rows are weighed under --class_weights balanced (multi-label). Balanced is
# negatives/positives: a label on 1 row in 1,000 would weigh 999, each of its rows then pulling the label's
# bias up as hard as a thousand rows pull it down, and the label comes out on nearly every row (the
# thresholds then cannot tell). At 10 a label under 9% prevalence still gains a tenfold voice and stays
# a minority of the loss. The cap is reasoned, not tuned: benchmarks/rare_labels.py measures weighted
# against unweighted at it, no other cap.
MAX_POSITIVE_WEIGHT = 10.0


def class_weights_from(option: str, labels, names: list[str]) -> list[float]:
    """The per-class loss weights --class_weights asks for: a list, or 'balanced' from the training labels
    (the label ids, or multi-label's 0/1 rows) as docs/data-and-tasks.md says."""
    if option != "balanced":
        return parse_class_weights(option, names)
    labels = torch.as_tensor(labels)
    if labels.ndim == 2:
        return positive_weights(labels, names)
    counts = torch.bincount(labels, minlength=len(names)).tolist()
    missing = [name for name, count in zip(names, counts, strict=True) if count == 0]
    if missing:
        raise ConfigError(
            f"class_weights balanced needs every class in the training data; {missing} has none."
        )
    return [round(len(labels) / (len(names) * count), 6) for count in counts]


def positive_weights(rows: torch.Tensor, names: list[str]) -> list[float]:
    """Multi-label 'balanced': each label's negatives / positives in the training rows, at most MAX_POSITIVE_WEIGHT."""
    positives = rows.round().sum(dim=0)
    missing = [name for name, count in zip(names, positives.tolist(), strict=True) if count == 0]
    if missing:
        raise ConfigError(
            f"class_weights balanced weighs each label by its training rows, but {missing} is on none of them. "
            "Add rows with that label, or give the weights yourself: --class_weights "
            f"{','.join(['1'] * len(names))} (one per label, in label-id order)."
        )
    balanced = (len(rows) - positives) / positives
    return [round(float(weight), 6) for weight in balanced.clamp(max=MAX_POSITIVE_WEIGHT)]
