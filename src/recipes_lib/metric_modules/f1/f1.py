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
    predictions (list of int): predicted class ids.
    references (list of int): true class ids.
    average (str): 'macro' (default), 'micro', 'weighted' or 'binary'.
    labels (list of int, optional): the classes to average over; default all classes seen.
Returns:
    f1 (float): between 0.0 and 1.0.
"""


class F1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
        )

    def _compute(self, predictions, references, average="macro", labels=None):
        # zero_division=0: a class never predicted scores 0 instead of raising a warning per batch.
        score = f1_score(references, predictions, average=average, labels=labels, zero_division=0)
        return {"f1": float(score)}
