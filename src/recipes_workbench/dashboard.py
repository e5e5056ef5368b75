"""The recipe comparison as a saved W&B view (and `--report`, a W&B Report): `recipes-lib wandb-dashboard`,
built with W&B's own wandb-workspaces library (the extra `dashboard`), checked offline first, then saved;
docs/wandb.md says what each section shows and what saving needs. Every name a panel shows comes from
tracking/names.py, but the Trainer's own log keys and the names of compare --wandb's run, defined below.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import requests
import wandb

from recipes_lib.tracking import names
from recipes_lib.tracking.auth import has_credentials
from recipes_lib.tracking.names import JOB_TYPE
from recipes_workbench.shared import OTHER_TASK_METRICS, print_error, recipe_colours

EXTRA = "dashboard"
INSTALL_HINT = "pip install -e '.[dashboard]' (or: pip install wandb-workspaces)"
# How long saving may wait for the W&B server to answer at all before saying it cannot be reached.
REACH_TIMEOUT_S = 10

SECTION_COMPARISON = "Memory against accuracy"
SECTION_CURVES = "Training curves"
SECTION_MEMORY = "Memory during training (memory/*)"
SECTION_THROUGHPUT = "Throughput during training (throughput/*)"
SECTION_PICTURES = "Each run: memory breakdown, confusion matrix, per-class metrics"
SECTION_TASKS = "Multi-label and regression runs: micro-F1, MSE, Pearson, Spearman"
SECTION_SWEEP = "Sweep: the metric against the learning rate, mean ± std at each chosen setting, memory"

# The Trainer's own log keys for training and the metrics `compute_metrics` returns (evaluation/metrics.py),
# as the Trainer names them before WandbCallback renames them (`trainer_curve`).
TRAINER_TRAIN_LOGS = ("loss", "learning_rate", "grad_norm")
EVAL_METRICS = ("accuracy", "f1")
EVAL_LOSS = "loss"
# The curves ThroughputCallback logs at every training log (names.py), one section each.
THROUGHPUT_CURVES = (names.SAMPLES_PER_SECOND_CURVE, names.TOKENS_PER_SECOND_CURVE, names.PAD_RATIO_CURVE)
MEMORY_CURVES = (*names.CUDA_MEMORY_CURVES, *names.CPU_MEMORY_CURVES)
# The sweep's x-axis: the learning rate in each trial's config.
LEARNING_RATE = "learning_rate"
# `recipes-lib compare --wandb` (tools/compare_wandb.py): one run of this job type in the group, holding
# the comparison table and the compare chart, which the report shows.
COMPARE_JOB_TYPE = "compare"
COMPARISON_TABLE = "comparison/table"
COMPARISON_CHART = "comparison/chart"


class DashboardError(Exception):
    """What the command needs, in one line for the user; exit code 2."""


def workspaces_library():
    """(wandb_workspaces.workspaces, wandb_workspaces.reports.v2), or a DashboardError naming the extra.
    Imported here: wandb-workspaces is optional (the 'dashboard' extra)."""
    try:
        import wandb_workspaces.reports.v2 as wr
        import wandb_workspaces.workspaces as ws
    except ImportError as error:
        raise DashboardError(
            f"wandb-dashboard builds the view with W&B's wandb-workspaces library, which is not installed "
            f"({error}); it is the optional extra '{EXTRA}': {INSTALL_HINT}"
        ) from error
    return ws, wr


def trainer_curve(log_key: str) -> str:
    """The W&B history key WandbCallback logs a Trainer log key under (transformers' rewrite_logs)."""
    from transformers.integrations.integration_utils import rewrite_logs

    (name,) = rewrite_logs({log_key: None})
    return name


def view_name(group: str | None) -> str:
    return f"Recipe comparison: {group}" if group else "Recipe comparison: every group"


# --- panels -----------------------------------------------------------------------------------------


def comparison_panels(wr) -> list:
    """The memory/accuracy trade-off at a glance: bars per recipe, a scatter, the results rows."""
    per_recipe = {
        "groupby": wr.Config(names.RECIPE),
        "groupby_aggfunc": "mean",
        "groupby_rangefunc": "minmax",
        "orientation": "v",
    }
    return [
        wr.BarPlot(title="Validation accuracy", metrics=[names.ACCURACY], **per_recipe),
        wr.BarPlot(
            title="Peak memory, GiB (allocated, reserved)",
            metrics=[names.PEAK_MEMORY, names.PEAK_MEMORY_RESERVED],
            **per_recipe,
        ),
        wr.BarPlot(title="Optimizer state, bytes", metrics=[names.OPTIMIZER_STATE_BYTES], **per_recipe),
        wr.ScatterPlot(title="Peak memory (GiB) against accuracy", x=names.PEAK_MEMORY, y=names.ACCURACY),
        wr.WeavePanelSummaryTable(table_name=names.RESULTS_TABLE, layout=wr.Layout(w=24, h=8)),
    ]


def _curve(wr, key: str):
    return wr.LinePlot(title=key, x=names.STEP, y=[key])


def training_curve_panels(wr) -> list:
    train = [trainer_curve(key) for key in TRAINER_TRAIN_LOGS]
    evaluation = [trainer_curve(names.eval_key(key)) for key in (*EVAL_METRICS, EVAL_LOSS)]
    return [_curve(wr, key) for key in (*train, *evaluation)]


def _custom_chart(wr, chart: names.Chart):
    """The chart a run logged (wandb_run.results_pictures), drawn over every run of the view."""
    return wr.CustomChart(
        query={"summaryTable": {"tableKey": chart.table_key}},
        chart_name=chart.vega_spec,
        chart_fields=dict(chart.fields),
        chart_strings={"title": chart.title},
    )


def task_metric_panels(wr) -> list:
    """Per recipe, then over training: the metrics only multi-label (micro-F1) or regression runs log."""
    per_recipe = {"groupby": wr.Config(names.RECIPE), "groupby_aggfunc": "mean", "orientation": "v"}
    keys = [names.eval_key(metric) for metric in OTHER_TASK_METRICS]
    bars = [wr.BarPlot(title=f"Validation {key}", metrics=[key], **per_recipe) for key in keys]
    return bars + [_curve(wr, trainer_curve(key)) for key in keys]


def picture_panels(wr) -> list:
    return [
        _custom_chart(wr, names.MEMORY_BREAKDOWN_CHART),
        _custom_chart(wr, names.CONFUSION_MATRIX_CHART),
        wr.WeavePanelSummaryTable(table_name=names.PER_CLASS_TABLE, layout=wr.Layout(w=16, h=8)),
    ]


def sweep_panels(wr, metric: str = names.ACCURACY) -> list:
    """A `recipes-lib sweep` group: every trial's metric against its learning rate (one colour per
    recipe), each recipe's chosen setting as mean ± std over its seeds (the seeds phase's runs carry
    `sweep_chosen`), and peak memory against the metric."""
    return [
        wr.ScatterPlot(
            title=f"{metric} against the learning rate (every trial)",
            x=wr.Config(LEARNING_RATE),
            y=metric,
            log_x=True,
        ),
        wr.BarPlot(
            title=f"{metric} at each recipe's chosen learning rate: mean ± std over the seeds",
            metrics=[metric],
            groupby=wr.Config(names.SWEEP_CHOSEN),
            groupby_aggfunc="mean",
            groupby_rangefunc="stddev",
            orientation="v",
        ),
        wr.ScatterPlot(
            title=f"Peak memory (GiB) against {metric} (every trial)", x=names.PEAK_MEMORY, y=metric
        ),
    ]


def view_sections(ws, wr, metric: str = names.ACCURACY) -> list:
    return [
        ws.Section(name=SECTION_COMPARISON, panels=comparison_panels(wr), is_open=True),
        ws.Section(name=SECTION_CURVES, panels=training_curve_panels(wr), is_open=True),
        ws.Section(name=SECTION_MEMORY, panels=[_curve(wr, key) for key in MEMORY_CURVES], is_open=True),
        ws.Section(name=SECTION_THROUGHPUT, panels=[_curve(wr, key) for key in THROUGHPUT_CURVES]),
        ws.Section(name=SECTION_PICTURES, panels=picture_panels(wr)),
        ws.Section(name=SECTION_TASKS, panels=task_metric_panels(wr)),
        ws.Section(name=SECTION_SWEEP, panels=sweep_panels(wr, metric)),
    ]


def _run_filters(ws, job_type: str, group: str | None) -> list:
    filters = [ws.Metric("JobType") == job_type]
    if group:
        filters.append(ws.Metric("Group") == group)
    return filters


def build_view(project: str, entity: str, group: str | None = None, sweep_metric: str = names.ACCURACY):
    """The saved workspace view of a recipe comparison (a wandb_workspaces Workspace, not saved yet);
    `sweep_metric` is the metric of its sweep section (the sweep's own `metric`)."""
    ws, wr = workspaces_library()
    return ws.Workspace(
        entity=entity,
        project=project,
        name=view_name(group),
        sections=view_sections(ws, wr, sweep_metric),
        settings=ws.WorkspaceSettings(x_axis=names.STEP, max_runs=50),
        runset_settings=ws.RunsetSettings(
            filters=_run_filters(ws, JOB_TYPE, group),
            groupby=[ws.Config(names.RECIPE)],
            group_colors=recipe_colours(),
            pinned_columns=[f"summary:{key}" for key in names.COMPARISON_METRICS],
        ),
    )


def build_report(project: str, entity: str, group: str | None = None, sweep_metric: str = names.ACCURACY):
    """A W&B Report of the same comparison, with the compare table and chart (not saved yet)."""
    ws, wr = workspaces_library()

    def runs(name: str, job_type: str, grouped: bool):
        return wr.Runset(
            entity=entity,
            project=project,
            name=name,
            filters=_run_filters(ws, job_type, group),
            groupby=[f"config.{names.RECIPE}"] if grouped else [],
        )

    compare_command = "recipes-lib compare RUN... --wandb"
    return wr.Report(
        entity=entity,
        project=project,
        title=view_name(group),
        description="Memory, speed and accuracy of each fine-tuning recipe on the same model and data.",
        blocks=[
            wr.H2("Memory against accuracy"),
            wr.P("One colour per recipe; bars are the mean over a recipe's runs, whiskers their range."),
            wr.PanelGrid(runsets=[runs("recipes", JOB_TYPE, True)], panels=comparison_panels(wr)),
            wr.H2("The compare table and chart"),
            wr.P(f"Logged by `{compare_command}` into this group: what held the memory, per run."),
            wr.PanelGrid(
                runsets=[runs("comparison", COMPARE_JOB_TYPE, False)],
                panels=[
                    wr.WeavePanelSummaryTable(table_name=COMPARISON_TABLE, layout=wr.Layout(w=24, h=8)),
                    wr.MediaBrowser(title="compare chart", media_keys=[COMPARISON_CHART]),
                ],
            ),
            wr.H2("Sweep"),
            wr.P(
                "For a `recipes-lib sweep` group: every trial against its learning rate, each recipe's chosen "
                "setting over its seeds, memory against the metric."
            ),
            wr.PanelGrid(runsets=[runs("recipes", JOB_TYPE, True)], panels=sweep_panels(wr, sweep_metric)),
            wr.H2("Training curves"),
            wr.PanelGrid(
                runsets=[runs("recipes", JOB_TYPE, True)],
                panels=[
                    *training_curve_panels(wr),
                    *(_curve(wr, key) for key in (*MEMORY_CURVES, *THROUGHPUT_CURVES)),
                ],
            ),
        ],
    )


# --- checking offline, then saving ------------------------------------------------------------------


def view_spec(view) -> dict[str, Any]:
    """The view as W&B stores it (the JSON Workspace.save sends), made offline: W&B's schema checks
    every panel and setting on the way, so a wrong one fails here, before any key or network."""
    return json.loads(view._to_model().spec.model_dump_json(by_alias=True, exclude_none=True))


def report_blocks_spec(report) -> list[dict[str, Any]]:
    """The report's panels and text blocks as W&B stores them, made offline. (A run set is resolved
    against the server when the report is saved, so the run sets are checked then.)"""
    _, wr = workspaces_library()
    parts = [block.panels if isinstance(block, wr.PanelGrid) else [block] for block in report.blocks]
    return [part._to_model().model_dump(by_alias=True, exclude_none=True) for grid in parts for part in grid]


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def connect(built: str):
    """wandb.Api() once saving can work; else a DashboardError saying, in one line, what it needs."""
    settings = wandb.setup().settings  # environment and settings files, as wandb.init reads them
    offline = settings.mode in ("offline", "dryrun", "disabled")
    offline_fix = f"W&B is in {settings.mode} mode (WANDB_MODE or `wandb {settings.mode}`): unset WANDB_MODE or run `wandb online`"
    if not has_credentials(settings):
        # Both missing (`make demo` sets WANDB_MODE=offline): say both, so that one fix is not followed by another error.
        raise DashboardError(
            f"{built}, but saving it needs a W&B API key: set WANDB_API_KEY or run `wandb login`"
            + (f"; and {offline_fix}" if offline else "")
            + " (runs logged offline: `wandb sync` them first)."
        )
    if offline:
        raise DashboardError(f"{built}, but {offline_fix} to save it.")
    try:
        requests.head(settings.base_url, timeout=REACH_TIMEOUT_S)
    except requests.RequestException as error:
        raise DashboardError(
            f"{built}, but saving it needs the network: {settings.base_url} could not be reached "
            f"({type(error).__name__})."
        ) from error
    try:
        return wandb.Api()
    except Exception as error:  # an invalid key, a server error: say it in one line
        raise DashboardError(f"{built}, but W&B refused the connection: {_first_line(error)}") from error


def _existing_view(api, view) -> tuple[str, str] | None:
    """(internal name, id) of the project's saved view with this view's name: saving updates it."""
    # Imported here: wandb-workspaces is optional (the 'dashboard' extra), as in workspaces_library.
    from wandb_workspaces._graphql import execute_graphql

    query = """
        query ProjectViews($entityName: String, $name: String, $viewType: String = "project-view") {
            project(name: $name, entityName: $entityName) {
                allViews(viewType: $viewType) { edges { node { id name displayName } } }
            }
        }
    """
    response = execute_graphql(api, query, {"entityName": view.entity, "name": view.project})
    project = response.get("project") or {}
    for edge in (project.get("allViews") or {}).get("edges") or []:
        node = edge.get("node") or {}
        if node.get("displayName") == view.name and node.get("name") and node.get("id"):
            return node["name"], node["id"]
    return None


def wandb_dashboard(
    project: str,
    entity: str | None = None,
    group: str | None = None,
    report: bool = False,
    spec_file: str | None = None,
    sweep_metric: str = names.ACCURACY,
) -> int:
    """`recipes-lib wandb-dashboard`: build and check the view offline, then save it and print its URL."""
    try:  # (bitsandbytes, which wandb-workspaces' pydantic may load, is quieted by the command: cli/main.py)
        # 1. Build and check everything offline (the entity is only known from the server without --entity).
        view = build_view(project, entity or "", group, sweep_metric)
        spec = view_spec(view)
        panels = sum(len(section.panels) for section in view.sections)
        contents = f"{panels} panels in {len(view.sections)} sections"
        if report:
            report_parts = report_blocks_spec(build_report(project, entity or "", group, sweep_metric))
            contents += f"; a report of {len(report_parts)} panels and blocks"
        built = f"built the W&B view '{view.name}' ({contents}) and checked it offline"
        if spec_file:
            Path(spec_file).write_text(json.dumps(spec, indent=1) + "\n")
        # 2. Save it: needs an API key and the network.
        api = connect(built)
        entity = entity or api.default_entity
        view = build_view(project, entity, group, sweep_metric)
        try:
            existing = _existing_view(api, view)
            if existing is not None:
                view._internal_name, view._internal_id = existing
            view.save()
            print(f"{'updated' if existing else 'saved'} W&B view: {view.url}")
            if report:
                shared = build_report(project, entity, group, sweep_metric).save()
                print(f"saved W&B report: {shared.url}")
        except Exception as error:  # the server said no (permissions, no such project): one line
            raise DashboardError(f"{built}, but W&B did not save it: {_first_line(error)}") from error
        return 0
    except DashboardError as error:
        print_error(error)
        return 2
