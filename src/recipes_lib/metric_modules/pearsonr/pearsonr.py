"""Pearson correlation as an `evaluate` metric module that ships with recipes_lib, so it loads with no
network.

Load it with `evaluate.load(path_to_this_directory)`; `recipes_lib.metrics` does that for you. When
either side is constant the correlation is undefined: the result is nan, with no warning.
"""

import warnings

import datasets
import evaluate
from scipy.stats import ConstantInputWarning, pearsonr

_DESCRIPTION = (
    "Pearson correlation coefficient: how well a straight line relates predictions to references, "
    "from -1 (perfectly inverse) through 0 (no linear relation) to 1 (perfectly linear)."
)
_INPUTS = """
Args:
    predictions (list of float): predicted values (at least two).
    references (list of float): true values (at least two).
Returns:
    pearsonr (float): between -1.0 and 1.0; nan when either side is constant.
"""


class Pearsonr(evaluate.Metric):
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
        with warnings.catch_warnings():
            # Constant input: scipy returns nan and warns; nan alone says it, once per evaluation.
            warnings.simplefilter("ignore", ConstantInputWarning)
            statistic = pearsonr(references, predictions)[0]
        return {"pearsonr": float(statistic)}
