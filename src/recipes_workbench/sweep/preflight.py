"""The sweep's check before any trial (the request, sent to check_recipes.py, and its answers): in a child
process, because parsing the recipes' arguments reads the device (on a GPU that initialises CUDA), so the
sweep's own process never touches a GPU and nothing of the check outlives it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from recipes_lib.errors import ConfigError
from recipes_workbench.sweep.config import SweepConfig, recipe_arguments


def accelerate_settings(path: str) -> tuple[dict[str, str], int, str]:
    """What `accelerate launch --config_file PATH` tells the recipe through its environment (the device
    and precision it decides with), the number of processes and how they shard, for the planner."""
    values = yaml.safe_load(Path(path).read_text()) or {}
    env = {"ACCELERATE_MIXED_PRECISION": str(values.get("mixed_precision") or "no")}
    if values.get("use_cpu"):
        env["ACCELERATE_USE_CPU"] = "true"
    kind = str(values.get("distributed_type", "NO")).upper()
    sharding = "none"
    if kind == "FSDP":
        env["ACCELERATE_USE_FSDP"] = "true"
        strategy = str((values.get("fsdp_config") or {}).get("fsdp_sharding_strategy", "FULL_SHARD")).upper()
        sharding = "fsdp_shard_grad_op" if "GRAD_OP" in strategy else "fsdp_full_shard"
    elif kind == "DEEPSPEED":
        env["ACCELERATE_USE_DEEPSPEED"] = "true"
        stage = int((values.get("deepspeed_config") or {}).get("zero_stage", 2))
        sharding = {1: "zero1", 2: "zero2", 3: "zero3"}.get(stage, "none")
    return env, int(values.get("num_processes") or 1), sharding


def run_preflight(config: SweepConfig) -> dict[str, dict[str, Any]]:
    """{recipe: the preflight's answer}; arguments that do not parse stop the sweep here, before any trial."""
    env, processes, sharding = accelerate_settings(config.accelerate_config)
    probe_dir = str(Path(config.output_dir) / "preflight")
    recipes = {}
    for recipe in config.recipes:  # each parsed at its first learning rate
        search = recipe.learning_rates
        lr = search.grid[0] if search.is_grid else search.low
        recipes[recipe.name] = [
            *recipe_arguments(config, recipe.name),
            *("--learning_rate", repr(lr), "--seed", str(config.search_seed), "--output_dir", probe_dir),
        ]
    request = {
        "recipes": recipes,
        "memory_budget_gib": config.memory_budget_gib,
        "num_processes": processes,
        "sharding": sharding,
    }
    completed = subprocess.run(
        [sys.executable, "-m", "recipes_workbench.sweep.check_recipes"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env={**os.environ, **env, "TOKENIZERS_PARALLELISM": "false"},
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not lines:
        raise ConfigError(
            f"The sweep's check of the recipes' arguments failed: {completed.stderr.strip()[-2000:]}"
        )
    answers = json.loads(lines[-1])
    for name, answer in answers.items():
        if "error" in answer:
            raise ConfigError(
                f"The arguments of {name}'s trials do not parse, so no trial was started: {answer['error']}"
            )
    return answers
