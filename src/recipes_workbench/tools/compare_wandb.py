"""`recipes-lib compare RUN... --wandb`: the compare table (and the chart compare drew) logged into the
runs' W&B group as one run of job type "compare" (docs/wandb.md, "compare --wandb"; docs/memory.md: its
`evaluation_note`, since its table has the runs' own columns, no "eval set" one).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import wandb

from recipes_lib.tracking.wandb_run import (
    DEFAULT_PROJECT,
    RunIdentity,
    offline_note,
    results_table,
    short_dataset_name,
    start_run,
)
from recipes_lib.units import short_model_name
from recipes_workbench.dashboard import COMPARE_JOB_TYPE, COMPARISON_CHART, COMPARISON_TABLE
from recipes_workbench.shared import print_error
from recipes_workbench.tools.compare import (
    CHART_FILE,
    CompareError,
    evaluation_note,
    load_runs,
    run_names,
    runs_home,
)


def project_of(config: Mapping[str, Any]) -> str:
    """The W&B project of a finished run, from its resolved configuration (results.json's `config`)."""
    return config.get("wandb_project") or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT


def experiment_of(config: Mapping[str, Any]) -> str:
    """The W&B group of a finished run, from its resolved configuration, as `run_identity` names it."""
    if config.get("experiment"):
        return config["experiment"]
    data = SimpleNamespace(
        **{key: config.get(key) for key in ("train_file", "dataset_name", "dataset_config_name")}
    )
    return f"{short_model_name(config.get('model_name_or_path'))}_{short_dataset_name(data)}"


def _one(values: set[str], what: str, flag: str) -> str:
    if len(values) != 1:
        raise CompareError(
            f"the runs are in different W&B {what}s ({', '.join(sorted(values))}): pass {flag} to choose "
            "where the comparison run goes."
        )
    return next(iter(values))


def log_comparison(
    run_dirs: list[str],
    chart: str | None = None,
    draw: bool = True,
    project: str | None = None,
    group: str | None = None,
) -> int:
    """Log the compare table (and the chart compare drew) into the runs' group as one W&B run."""
    try:
        runs = load_runs(run_dirs)
        configs: list[Mapping[str, Any]] = [run.config or {} for run in runs]
        project = project or _one({project_of(config) for config in configs}, "project", "--wandb_project")
        group = group or _one({experiment_of(config) for config in configs}, "group", "--experiment")
    except CompareError as error:
        print_error(error)
        return 2
    recipes = [str(run.recipe or "?") for run in runs]
    identity = RunIdentity(
        project=project,
        group=group,
        name=f"compare {' vs '.join(recipes)}",
        tags=tuple(dict.fromkeys(["compare", *recipes])),
        job_type=COMPARE_JOB_TYPE,
    )
    config = {"runs": [str(Path(run_dir).resolve()) for run_dir in run_dirs], "recipes": recipes}
    different_sets = evaluation_note(runs, run_names(run_dirs))
    if different_sets:
        config["evaluation_note"] = different_sets
    # W&B's local files go beside the runs, RUNS_HOME/wandb (outputs/demo/wandb for the demo), as a
    # recipe's go in its output_dir/wandb: not in the checkout's ./wandb. WANDB_DIR still says where.
    run, fallback_reason = start_run(identity, config, str(runs_home(run_dirs)))
    if run is None:
        print("W&B is disabled (WANDB_MODE=disabled): no comparison run was logged.")
        return 0
    logged: dict[str, Any] = {COMPARISON_TABLE: results_table(runs)}
    chart_path = Path(chart) if chart else runs_home(run_dirs) / CHART_FILE
    if draw and chart_path.is_file():
        logged[COMPARISON_CHART] = wandb.Image(str(chart_path), caption="recipes-lib compare")
    run.log(logged)
    note = offline_note(run, fallback_reason, identity.name)
    url = None if run.offline else run.url
    run.finish()
    print(f"W&B: {note}" if note else f"W&B: comparison run '{identity.name}' in group '{group}': {url}")
    return 0
