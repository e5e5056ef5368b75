"""Correlation of predictions with references (configs "pearson", the default, and "spearman") as an
`evaluate` metric module that ships with recipes_lib, so it loads with no network. When either side is
constant the correlation is undefined: the result is nan, with no warning.
"""

import warnings

import datasets
import evaluate
from scipy.stats import ConstantInputWarning, pearsonr, spearmanr

_DESCRIPTION = (
    "Correlation coefficient of predictions and references, from -1 (perfectly inverse) through 0 to 1. "
    "pearson: how well a straight line relates them; spearman: the Pearson correlation of their ranks, "
    "so how well a monotonic function does."
)
_INPUTS = """
Args:
    predictions (list of float): predicted values (at least two).
    references (list of float): true values (at least two).
Returns:
    pearson or spearman (float, by configuration): between -1.0 and 1.0; nan when either side is constant.
"""
_STATISTICS = {"pearson": pearsonr, "spearman": spearmanr}


class Correlation(evaluate.Metric):
    def _info(self):
        if self.config_name not in ("default", *_STATISTICS):
            raise ValueError(
                f"Unknown configuration '{self.config_name}'; use one of: {', '.join(_STATISTICS)}."
            )
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {"predictions": datasets.Value("float64"), "references": datasets.Value("float64")}
            ),
        )

    def _compute(self, predictions, references):
        name = "pearson" if self.config_name == "default" else self.config_name
        with warnings.catch_warnings():
            # Constant input: scipy returns nan and warns; nan alone says it, once per evaluation.
            warnings.simplefilter("ignore", ConstantInputWarning)
            statistic = _STATISTICS[name](references, predictions)[0]
        return {name: float(statistic)}
