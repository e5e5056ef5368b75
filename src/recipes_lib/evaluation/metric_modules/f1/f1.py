"""F1 score as an `evaluate` metric module that ships with recipes_lib, so it loads with no network.
`average="macro"` (the default here) is the unweighted mean of per-class F1: a rare class counts as
much as a frequent one, which is what a classifier comparison on imbalanced data needs.
"""

import datasets
import evaluate
from sklearn.metrics import f1_score

_DESCRIPTION = "F1 = 2 * precision * recall / (precision + recall), averaged over classes."
_INPUTS = """
Args:
    predictions (list of int): predicted class ids; with the 'multilabel' config, one list of 0/1 per
        example (multi-hot, one entry per label).
    references (list of int): true class ids; with 'multilabel', one list of 0/1 per example.
    average (str): 'macro' (default), 'micro', 'weighted' or 'binary'; with 'multilabel', also
        'samples' (and not 'binary').
    labels (list of int, optional): the classes (with 'multilabel', the label columns) to average
        over; default all.
Returns:
    f1 (float): between 0.0 and 1.0.
"""


class F1(evaluate.Metric):
    def _info(self):
        if self.config_name == "multilabel":
            label = datasets.Sequence(datasets.Value("int32"))
        else:
            label = datasets.Value("int64")
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features({"predictions": label, "references": label}),
        )

    def _compute(self, predictions, references, average="macro", labels=None):
        # zero_division=0: a class never predicted scores 0 instead of raising a warning per batch.
        # Multilabel rows arrive as lists of lists, which sklearn reads as a label-indicator matrix.
        score = f1_score(references, predictions, average=average, labels=labels, zero_division=0)
        return {"f1": float(score)}
