"""Accuracy as an `evaluate` metric module that ships with recipes_lib, so it loads with no network
(recipes_lib.evaluation.metrics loads it); the "multilabel" config scores exact-match (subset) accuracy.
"""

import datasets
import evaluate
import numpy as np
from sklearn.metrics import accuracy_score

_DESCRIPTION = (
    "Fraction of predictions equal to the reference label: (TP + TN) / all, for any number of classes. "
    "With the 'multilabel' config, the fraction of examples whose whole label set is predicted exactly."
)
_INPUTS = """
Args:
    predictions (list of int): predicted class ids; with the 'multilabel' config, one list of 0/1 per
        example (multi-hot, one entry per label).
    references (list of int): true class ids; with 'multilabel', one list of 0/1 per example.
Returns:
    accuracy (float): between 0.0 and 1.0.
"""


class Accuracy(evaluate.Metric):
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

    def _compute(self, predictions, references):
        predictions, references = np.asarray(predictions), np.asarray(references)
        if predictions.size == 0:
            raise ValueError("accuracy of an empty evaluation set is undefined")
        if self.config_name == "multilabel":
            return {"accuracy": float(accuracy_score(references, predictions))}
        return {"accuracy": float((predictions == references).mean())}
