"""Mean squared error as an `evaluate` metric module that ships with recipes_lib, so it loads with no
network. Values are float64 end to end, so the result matches scikit-learn's on the same numbers.
"""

import datasets
import evaluate
from sklearn.metrics import mean_squared_error

_DESCRIPTION = "Mean squared error: the mean of (prediction - reference)^2 over all examples."
_INPUTS = """
Args:
    predictions (list of float): predicted values.
    references (list of float): true values.
Returns:
    mse (float): 0.0 or more; 0.0 when every prediction equals its reference.
"""


class Mse(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {"predictions": datasets.Value("float64"), "references": datasets.Value("float64")}
            ),
        )

    def _compute(self, predictions, references):
        if len(predictions) == 0:
            raise ValueError("mean squared error of an empty evaluation set is undefined")
        return {"mse": float(mean_squared_error(references, predictions))}
