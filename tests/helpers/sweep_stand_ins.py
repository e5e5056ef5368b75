"""The sweep's tests without training: a sweep file's values, a stand-in launcher that returns what a
trial would (made-up figures with a best rate per recipe), and the report read back and cut to what two
runs of one sweep share. Used by tests/workbench/test_sweep.py, tests/workbench/test_parallel.py and the parallel worker.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from recipes_workbench.sweep.config import SweepConfig, sweep_config_from_values
from recipes_workbench.sweep.report import RESULTS_JSON
from recipes_workbench.sweep.trials import COMPLETE, FAILED, Outcome
from tests.helpers.repo import ACCELERATE_CONFIGS, RECIPES_DIR

CPU = str(ACCELERATE_CONFIGS / "cpu.yaml")


def config_values(tmp_path: Path, **changes) -> dict:
    values = {
        "accelerate_config": CPU,
        "recipes_dir": str(RECIPES_DIR),
        "output_dir": str(tmp_path / "sweep"),
        "search_seed": 42,
        "seeds": [1, 2, 3],
        "recipes": {
            "full_ft": {"learning_rate": [2.0e-5, 5.0e-5, 1.0e-4]},
            "lora": {"learning_rate": [3.0e-4, 1.0e-3]},
        },
    }
    values.update(changes)
    return values


def make_config(tmp_path: Path, **changes) -> SweepConfig:
    return sweep_config_from_values(config_values(tmp_path, **changes), "the test's sweep")


def figure(recipe: str, lr: float, seed: int) -> float:
    """A made-up validation accuracy: a best learning rate per recipe, a little seed noise."""
    best = {"full_ft": 5e-5, "lora": 1e-3}[recipe]
    base = {"full_ft": 0.85, "lora": 0.82}[recipe] - 0.03 * abs(math.log10(lr / best))
    return round(base + 0.004 * ((seed * 7919) % 5 - 2), 4)


class SweepStandIn:
    """Launches nothing: returns what a trial would, records what it was asked to run."""

    def __init__(self, fail_above: float = 1.0, interrupt_at: int | None = None):
        self.launched: list[tuple[str, str, float, int]] = []
        self.fail_above = fail_above
        self.interrupt_at = interrupt_at

    def __call__(self, trial, config) -> Outcome:
        if self.interrupt_at is not None and len(self.launched) == self.interrupt_at:
            self.interrupt_at = None
            self.interrupted = (trial.recipe, trial.phase, trial.learning_rate, trial.seed)
            raise KeyboardInterrupt
        self.launched.append((trial.recipe, trial.phase, trial.learning_rate, trial.seed))
        if trial.learning_rate > self.fail_above:
            return Outcome(
                FAILED,
                "diverged (TrainingDiverged, exit code 3): the loss became nan",
                exit_code=3,
                wall_s=1.0,
            )
        value = figure(trial.recipe, trial.learning_rate, trial.seed)
        results = {config.metric: value, "peak_memory_gib": 1.4 if trial.recipe == "full_ft" else 1.2,
                   "peak_memory_source": "process peak RSS", "optimizer_state_bytes": 2**20,
                   "train_runtime_s": 30.0, "epochs": 3.0}  # fmt: skip
        return Outcome(COMPLETE, value=value, exit_code=0, wall_s=2.0, results=results)


def no_budget(config):
    return {recipe.name: {"fits": None, "reason": "no budget"} for recipe in config.recipes}


def sweep_results(config: SweepConfig) -> dict:
    return json.loads((Path(config.output_dir) / RESULTS_JSON).read_text())


def comparable(results: dict) -> dict:
    """The report but what two runs of one sweep cannot share (wall times, memory, trial order, paths):
    per recipe the search's and the seeds' figures, the choice, the spread; the pairs' tests."""

    def trial(record: dict) -> tuple:
        return record["learning_rate"], record["seed"], record["status"], record["validation"], record["test"]

    recipes = [
        {
            "recipe": recipe["recipe"],
            "chosen": recipe["chosen_learning_rate"],
            "search": sorted(map(trial, recipe["search"])),
            "seeds": sorted(map(trial, recipe["seeds"])),
            "spread": (recipe.get("validation"), recipe.get("test")),
        }
        for recipe in results["recipes"]
    ]
    return {"recipes": recipes, "pairs": results["pairs"], "final_split": results["final_split"]}
