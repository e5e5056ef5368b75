"""Predict a recipe's peak training memory from the model's config alone: no weights, no GPU.

What a recipe changes reaches the planner as data, its `TrainingShape` (config/recipe_spec.py): LoRA
adapters or none, a 4-bit base or not, 8-bit or 32-bit optimizer state. The prediction has the five
parts that results.json measures (memory/monitor.py), plus the CUDA context. docs/development.md
lists the modules, docs/planner.md how it counts.
"""

from recipes_workbench.planner.arithmetic import MIN_8BIT_SIZE
from recipes_workbench.planner.configs import load_config, load_config_and_source
from recipes_workbench.planner.encoder import Encoder
from recipes_workbench.planner.parameters import count_parameters_on_meta
from recipes_workbench.planner.plan import largest_batch, plan_memory
from recipes_workbench.planner.report import PLANNING_ERRORS, plan_models
from recipes_workbench.planner.setup import DEFAULT_CUDA_OVERHEAD_GIB, SHARDED_PARTS, Setup

__all__ = [
    "DEFAULT_CUDA_OVERHEAD_GIB",
    "MIN_8BIT_SIZE",
    "PLANNING_ERRORS",
    "SHARDED_PARTS",
    "Encoder",
    "Setup",
    "count_parameters_on_meta",
    "largest_batch",
    "load_config",
    "load_config_and_source",
    "plan_memory",
    "plan_models",
]
