"""Accuracy as an `evaluate` metric module that ships with recipes_lib, so it loads with no network.

Load it with `evaluate.load(path_to_this_directory)`; `recipes_lib.metrics` does that for you.
"""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = (
    "Fraction of predictions equal to the reference label: (TP + TN) / all, for any number of classes."
)
_INPUTS = """
Args:
    predictions (list of int): predicted class ids.
    references (list of int): true class ids.
Returns:
    accuracy (float): between 0.0 and 1.0.
"""


class Accuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
        )

    def _compute(self, predictions, references):
        predictions, references = np.asarray(predictions), np.asarray(references)
        if predictions.size == 0:
            raise ValueError("accuracy of an empty evaluation set is undefined")
        return {"accuracy": float((predictions == references).mean())}
