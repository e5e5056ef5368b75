"""The sweep's check before any trial, in a process of its own (preflight.py says why): each recipe's
arguments parsed, its peak memory predicted.

    python -m recipes_workbench.sweep.check_recipes < request.json > answer.json

The request: {"recipes": {"lora": [ARGUMENTS...]}, "memory_budget_gib": 8.0 or null, "num_processes": 1,
"sharding": "none"}. The answer, per recipe: the error that stops the sweep (the arguments do not parse),
or the planner's predicted peak, the budget (`memory_budget_gib`, else the GPU's memory; none on CPU) and
whether it fits.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from dataclasses import replace
from typing import Any

import torch

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.precision import decide_precision
from recipes_lib.errors import ConfigError, RecipeError
from recipes_lib.units import GIB
from recipes_workbench.planner import (
    DEFAULT_CUDA_OVERHEAD_GIB,
    PLANNING_ERRORS,
    load_config_and_source,
    plan_memory,
)
from recipes_workbench.planner.report import describe_setup, error_reason
from recipes_workbench.planner.setup import setup_for_run
from recipes_workbench.recipes import RECIPES


def device_budget(device) -> tuple[float | None, str | None]:
    """(GiB, where it comes from) of the training device: the GPU's memory; None on a CPU."""
    if device.type != "cuda":
        return None, None
    properties = torch.cuda.get_device_properties(device)
    return properties.total_memory / GIB, f"the memory of {properties.name}"


def check_recipe(name: str, argv: list[str], request: dict[str, Any]) -> dict[str, Any]:
    """One recipe's answer: {"error": ...} when its arguments do not parse, else the prediction."""
    if name not in RECIPES:
        raise ConfigError(f"There is no recipe '{name}'. The recipes are: {', '.join(RECIPES)}.")
    spec = RECIPES[name]
    try:
        arguments = parse_arguments(spec, argv)
    except RecipeError as error:
        return {"error": str(error)}
    options = arguments.options(spec.options) if spec.options is not None else None
    training = arguments.training
    answer: dict[str, Any] = {
        "device": training.device.type,
        "precision": training.precision,
        "batch_size": training.per_device_train_batch_size,
        "max_seq_length": arguments.data.max_seq_length,
        "model": arguments.model.model_name_or_path,
    }
    budget, source = request.get("memory_budget_gib"), "--memory_budget"
    if budget is None:
        budget, source = device_budget(training.device)
    answer.update(budget_gib=budget, budget_source=source)
    setup = replace(
        setup_for_run(arguments, spec.shape(options), training.device.type),
        cuda_overhead_gib=DEFAULT_CUDA_OVERHEAD_GIB,
        num_processes=int(request.get("num_processes", 1)),
        sharding=request.get("sharding", "none"),
        label=name,
    )
    try:
        config, _ = load_config_and_source(arguments.model.model_name_or_path)
        # The precision the trial will train in: the parsed one (device, flags, the accelerate config's
        # mixed_precision), revisited for the model's family as the run does (DeBERTa stays out of fp16).
        choice, _ = decide_precision(training, config.model_type)
        setup = setup.with_precision(choice.precision, choice.reason)
        answer["precision"] = choice.precision
        plan = plan_memory(config, setup, model_name=arguments.model.model_name_or_path)
    except PLANNING_ERRORS as error:
        answer.update(
            predicted_gib=None, fits=None, reason=f"the planner cannot predict it: {error_reason(error)}"
        )
        return answer
    predicted = plan.total / GIB
    answer.update(
        predicted_gib=predicted, breakdown_gib=plan.breakdown_gib(), setup=describe_setup(setup, budget or 0)
    )
    if budget is None:
        answer.update(
            fits=None,
            reason=f"predicted peak {predicted:.2f} GiB; no budget on {training.device.type} (give --memory_budget)",
        )
    else:
        verdict = "fits in" if predicted <= budget else "does not fit"
        answer.update(
            fits=predicted <= budget,
            reason=f"the planner predicts a peak of {predicted:.2f} GiB, which {verdict} the budget of "
            f"{budget:.2f} GiB ({source})",
        )
    return answer


def main() -> int:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    warnings.filterwarnings("ignore")
    request = json.loads(sys.stdin.read())
    answers = {name: check_recipe(name, argv, request) for name, argv in request["recipes"].items()}
    print(json.dumps(answers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
