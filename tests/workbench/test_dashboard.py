"""The W&B comparison: the saved view `recipes-lib wandb-dashboard` builds, checked offline against
what real offline runs of every recipe logged; the pictures each run logs; `compare --wandb`.

Runs are read back from their offline logs with `wandb leet inspect`, as in test_tracking.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes_lib.config.tasks import TASK_METRICS
from recipes_lib.results import RunResults
from recipes_lib.tracking import names
from recipes_lib.tracking.names import JOB_TYPE
from recipes_lib.tracking.wandb_run import (
    RunIdentity,
    Tracker,
    memory_figures,
    results_pictures,
    start_run,
)
from recipes_lib.units import BREAKDOWN_KEYS
from recipes_workbench.dashboard import (
    COMPARE_JOB_TYPE,
    COMPARISON_CHART,
    COMPARISON_TABLE,
    MEMORY_CURVES,
    SECTION_COMPARISON,
    SECTION_CURVES,
    SECTION_MEMORY,
    SECTION_PICTURES,
    SECTION_THROUGHPUT,
    THROUGHPUT_CURVES,
    build_report,
    build_view,
    report_blocks_spec,
    trainer_curve,
    view_spec,
    wandb_dashboard,
)
from recipes_workbench.shared import OTHER_TASK_METRICS, recipe_colours
from tests.helpers.data import multi_label_files, regression_files
from tests.helpers.output import project_lines
from tests.helpers.repo import RECIPES, REPO_ROOT
from tests.helpers.runs import QUICK, run_args, run_in_process
from tests.helpers.wandb_runs import FAKE_API_KEY, isolated_wandb_env, offline_runs, read_run

# The view needs W&B's wandb-workspaces library (the 'dashboard' extra); the runs' own pictures do not.
needs_extra = pytest.mark.skipif(
    importlib.util.find_spec("wandb_workspaces") is None,
    reason="the 'dashboard' extra is not installed: pip install -e '.[dashboard]'",
)

PER_CLASS = {
    "cool": {"precision": 0.8, "recall": 0.75, "f1": 0.7742, "support": 32},
    "warm": {"precision": 0.7647, "recall": 0.8125, "f1": 0.7879, "support": 32},
}
CONFUSION = {"labels": ["cool", "warm"], "matrix": [[24, 8], [6, 26]]}
# The pictures a run logs only when its results.json has the key they are made from.
LOGGED_WHEN = {
    names.CONFUSION_MATRIX_CHART.table_key: names.CONFUSION_MATRIX,
    names.PER_CLASS_TABLE: names.PER_CLASS,
}


@pytest.fixture(scope="module")
def recipe_runs(tiny_bert, learnable_data, tmp_path_factory, one_thread):
    """A short offline W&B run of every recipe (in this process), and the run with the richer results
    the data work adds (per-class metrics, confusion matrix): {recipe: (results, LoggedRun)}."""
    import wandb

    root = tmp_path_factory.mktemp("dashboard-runs")
    env = isolated_wandb_env(root, WANDB_MODE="offline")
    runs = {}
    with pytest.MonkeyPatch.context() as patch:
        for key in [key for key in os.environ if key.startswith("WANDB_")]:
            patch.delenv(key)
        for key, value in env.items():
            if key.startswith("WANDB_") or key == "NETRC":
                patch.setenv(key, value)
        wandb.teardown()  # W&B reads its settings once per process: read this environment
        try:
            for recipe in RECIPES:
                output_dir = root / "out" / recipe
                args = run_args(
                    tiny_bert, learnable_data, output_dir, "--logging_steps", "1", "--report_to", "wandb",
                    **QUICK,
                )  # fmt: skip
                results = run_in_process(recipe, args)
                (run_dir,) = set(offline_runs(root)) - {run.run_dir for _, run in runs.values()}
                runs[recipe] = (results, read_run(run_dir))
            # A multi-label and a regression run: the metrics of the view's task section.
            for task, files in (
                ("multi-label", multi_label_files(root / "multi-label-data", 32, 16)),
                ("regression", regression_files(root / "regression-data", 32, 16)),
            ):
                args = run_args(
                    tiny_bert, files, root / "out" / task, "--logging_steps", "1", "--report_to", "wandb",
                    "--eval_strategy", "steps", "--eval_steps", "1",
                    **QUICK,
                )  # fmt: skip
                results = run_in_process("full_ft", args)
                (run_dir,) = set(offline_runs(root)) - {run.run_dir for _, run in runs.values()}
                runs[task] = (results, read_run(run_dir))
            # What the data/task work adds to results.json, logged as a recipe's run logs it.
            richer = {**runs[RECIPES[0]][0], names.PER_CLASS: PER_CLASS, names.CONFUSION_MATRIX: CONFUSION}
            identity = RunIdentity(project="dashboard-test", group="richer", name="richer", tags=())
            run, _ = start_run(identity, {"recipe": richer["recipe"]})
            Tracker(run).finish(RunResults.from_dict(richer))
            (run_dir,) = set(offline_runs(root)) - {run.run_dir for _, run in runs.values()}
            runs["richer results"] = (richer, read_run(run_dir))
        finally:
            wandb.teardown()
    return runs


@pytest.fixture(scope="module")
def view():
    return build_view("bert-recipes", "an-entity", "bert-base-uncased_glue-sst2")


@pytest.fixture(scope="module")
def spec(view):
    return view_spec(view)


def keys_not_logged_by(problem_type: str) -> set[str]:
    """The metric keys a run of this task never logs: other tasks' curves and results.json keys.

    results.json always has eval_accuracy and eval_f1 (null for regression), so only their curves
    are missing from a regression run.
    """
    own = set(TASK_METRICS[problem_type])
    every = {metric for metrics in TASK_METRICS.values() for metric in metrics}
    curves = {trainer_curve(names.eval_key(metric)) for metric in every - own}
    return curves | {names.eval_key(metric) for metric in set(OTHER_TASK_METRICS) - own}


def sections(spec: dict) -> dict[str, list[dict]]:
    return {section["name"]: section["panels"] for section in spec["section"]["panelBankConfig"]["sections"]}


def values_at(tree, path_end: tuple[str, ...]) -> list:
    """Every value in a JSON tree whose path ends with path_end."""
    found = []

    def walk(node, path):
        if path[-len(path_end) :] == path_end:
            found.append(node)
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, (*path, key))
        elif isinstance(node, list):
            for value in node:
                walk(value, (*path, "[]"))

    walk(tree, ())
    return found


def chart_table_keys(config: dict) -> list[str]:
    """The table keys a custom chart (Vega2 panel) queries: summaryTable(tableKey: KEY)."""
    fields = [node for node in values_at(config, ("[]",)) if isinstance(node, dict)]
    return [
        argument["value"]
        for node in fields
        if node.get("name") == "summaryTable"
        for argument in node.get("args", [])
        if argument.get("name") == "tableKey"
    ]


def referenced_keys(spec: dict) -> set[str]:
    """Every run key the view shows: curves, bars, scatter axes, runs-table columns, tables, charts."""
    keys = set()
    for panels in sections(spec).values():
        for panel in panels:
            config = panel["config"]
            keys.update(config.get("metrics") or [])  # line plots (history), bar charts (summary)
            if panel["viewType"] == "Scatter Plot":  # config axes are in referenced_config_keys
                keys.update(config[axis].removeprefix("summary:") for axis in ("xAxis", "yAxis")
                            if not config[axis].startswith("config:"))  # fmt: skip
            elif panel["viewType"] == "Run History Line Plot":
                keys.add(config["xAxis"])
            keys.update(values_at(config, ("inputs", "key", "val")))  # table panels: runs.summary[key]
            keys.update(chart_table_keys(config))  # custom charts
    for run_set in spec["section"]["runSets"]:
        keys.update(column.removeprefix("summary:") for column in run_set["runFeed"]["columnOrder"])
    return keys - {"run:displayName"}


def referenced_config_keys(spec: dict) -> set[str]:
    """Every run config key the view reads: scatter axes on config keys, the bars' group-by keys."""
    keys = set()
    for panels in sections(spec).values():
        for panel in panels:
            config = panel["config"]
            if panel["viewType"] == "Scatter Plot":
                keys.update(config[axis].removeprefix("config:").removesuffix(".value")
                            for axis in ("xAxis", "yAxis") if config[axis].startswith("config:"))  # fmt: skip
            if config.get("groupBy"):
                keys.add(config["groupBy"].removesuffix(".value"))
    return keys


# --- the view, built offline -------------------------------------------------------------------------


@needs_extra
def test_the_view_groups_the_fine_tune_runs_of_the_group_by_recipe_one_colour_each(spec):
    (run_set,) = spec["section"]["runSets"]
    assert run_set["grouping"] == [{"section": "config", "name": "recipe.value"}]
    filters = {(item["key"]["name"], item["value"]) for item in run_set["filters"]["filters"]}
    assert filters == {("jobType", JOB_TYPE), ("group", "bert-base-uncased_glue-sst2")}
    colours = spec["section"]["customRunColors"]
    assert len(colours) == len(set(colours.values())) == len(RECIPES)
    for recipe in RECIPES:
        assert any(f"%22value%22%3A%22{recipe}%22" in key for key in colours), recipe
    assert set(recipe_colours()) == set(RECIPES)


@needs_extra
def test_the_runs_table_shows_accuracy_memory_parameters_optimizer_state_and_speed(spec):
    (run_set,) = spec["section"]["runSets"]
    columns = run_set["runFeed"]["columnOrder"]
    assert columns == ["run:displayName", *(f"summary:{key}" for key in names.COMPARISON_METRICS)]
    assert all(run_set["runFeed"]["columnPinned"][column] for column in columns)
    for key in ("eval_accuracy", "eval_f1", "peak_memory_gib", "peak_memory_reserved_gib", "params_trainable",
                "optimizer_state_bytes", "train_samples_per_s", "train_tokens_per_s"):  # fmt: skip
        assert f"summary:{key}" in columns


@needs_extra
def test_bar_charts_of_accuracy_memory_and_optimizer_state_per_recipe_and_a_memory_accuracy_scatter(spec):
    panels = sections(spec)[SECTION_COMPARISON]
    bars = {
        tuple(panel["config"]["metrics"]): panel["config"]
        for panel in panels
        if panel["viewType"] == "Bar Chart"
    }
    assert set(bars) == {
        (names.ACCURACY,),
        (names.PEAK_MEMORY, names.PEAK_MEMORY_RESERVED),
        (names.OPTIMIZER_STATE_BYTES,),
    }
    assert all(config["groupBy"] == "recipe.value" for config in bars.values())
    (scatter,) = [panel["config"] for panel in panels if panel["viewType"] == "Scatter Plot"]
    assert (scatter["xAxis"], scatter["yAxis"]) == (
        f"summary:{names.PEAK_MEMORY}",
        f"summary:{names.ACCURACY}",
    )
    tables = [panel for panel in panels if panel["viewType"] == "Weave"]
    assert [values_at(table["config"], ("inputs", "key", "val")) for table in tables] == [
        [names.RESULTS_TABLE]
    ]


@needs_extra
def test_the_training_curves_side_by_side(spec):
    curves = {name: panels for name, panels in sections(spec).items() if name != SECTION_COMPARISON}
    for name in (SECTION_CURVES, SECTION_MEMORY, SECTION_THROUGHPUT):
        assert all(panel["viewType"] == "Run History Line Plot" for panel in curves[name])
        assert all(panel["config"]["xAxis"] == names.STEP for panel in curves[name])
    plotted = {name: [metric for panel in panels for metric in panel["config"].get("metrics", [])]
               for name, panels in curves.items()}  # fmt: skip
    assert plotted[SECTION_CURVES] == [
        "train/loss", "train/learning_rate", "train/grad_norm", "eval/accuracy", "eval/f1", "eval/loss",
    ]  # fmt: skip
    assert plotted[SECTION_MEMORY] == list(MEMORY_CURVES)
    assert all(key.startswith("memory/") for key in plotted[SECTION_MEMORY])
    assert plotted[SECTION_THROUGHPUT] == list(THROUGHPUT_CURVES)
    assert all(key.startswith("throughput/") for key in plotted[SECTION_THROUGHPUT])
    assert spec["section"]["settings"]["xAxis"] == names.STEP


@needs_extra
def test_each_runs_pictures_are_in_the_view(spec):
    panels = sections(spec)[SECTION_PICTURES]
    charts = {
        panel["config"]["panelDefId"]: panel["config"] for panel in panels if panel["viewType"] == "Vega2"
    }
    assert set(charts) == {"wandb/bar/v0", "wandb/confusion_matrix/v1"}
    assert chart_table_keys(charts["wandb/bar/v0"]) == [names.MEMORY_BREAKDOWN_CHART.table_key]
    assert chart_table_keys(charts["wandb/confusion_matrix/v1"]) == [names.CONFUSION_MATRIX_CHART.table_key]
    tables = [
        values_at(panel["config"], ("inputs", "key", "val"))
        for panel in panels
        if panel["viewType"] == "Weave"
    ]
    assert tables == [[names.PER_CLASS_TABLE]]


@needs_extra
def test_the_report_holds_the_compare_table_and_chart_and_the_same_panels():
    import wandb_workspaces.reports.v2 as wr

    report = build_report("bert-recipes", "an-entity", "bert-base-uncased_glue-sst2")
    grids = [block for block in report.blocks if isinstance(block, wr.PanelGrid)]
    comparison = next(grid for grid in grids if grid.runsets[0].name == "comparison")
    assert [type(panel).__name__ for panel in comparison.panels] == ["WeavePanelSummaryTable", "MediaBrowser"]
    assert comparison.panels[0].table_name == COMPARISON_TABLE
    assert comparison.panels[1].media_keys == [COMPARISON_CHART]
    assert COMPARE_JOB_TYPE in comparison.runsets[0].filters
    kinds = {type(panel).__name__ for grid in grids for panel in grid.panels}
    assert {"BarPlot", "ScatterPlot", "LinePlot"} <= kinds
    assert len(report_blocks_spec(report)) > 20  # every panel and block made into W&B's schema, offline


# --- every key the view shows, against real runs --------------------------------------------------------


@needs_extra
def test_every_key_the_view_shows_was_logged_by_a_real_offline_run_of_each_recipe(spec, recipe_runs):
    """A renamed metric (in run.py, tracking.py or transformers) leaves a key here no run logged."""
    shown = referenced_keys(spec)
    assert len(shown) > 25
    for recipe in (*RECIPES, "multi-label", "regression"):
        results, run = recipe_runs[recipe]
        assert run.summary["config"]["recipe"] == results["recipe"]
        logged = run.logged_keys
        # Only where they can be: CUDA memory curves on a GPU, CPU ones on a CPU; the confusion
        # matrix and per-class metrics once results.json has them.
        not_here = set(
            names.CUDA_MEMORY_CURVES if results["device"].startswith("cpu") else names.CPU_MEMORY_CURVES
        )
        not_here |= {key for key, source in LOGGED_WHEN.items() if not results.get(source)}
        not_here |= keys_not_logged_by(results["problem_type"])  # another task's metrics
        assert shown - not_here <= logged, (recipe, sorted(shown - not_here - logged))
        # results.json has every key, so another task's metrics are in the summary too: as null, never a figure.
        valued = run.history_keys | set(run.summary["summary"])  # leet's summary leaves the null ones out
        assert not (not_here & valued), (recipe, sorted(not_here & valued))
        # Config keys too; the sweep's own (sweep_chosen) only `recipes-lib sweep` trials log (test_sweep.py).
        config_keys = referenced_config_keys(spec) - set(names.SWEEP_CONFIG_KEYS)
        assert {"recipe", "learning_rate"} <= config_keys
        assert config_keys <= set(run.summary["config"]), (
            recipe,
            sorted(config_keys - set(run.summary["config"])),
        )


def test_every_run_logs_its_results_row_and_memory_breakdown_chart(recipe_runs):
    for recipe, (results, run) in recipe_runs.items():
        (row,) = run.table(names.RESULTS_TABLE)["data"]
        columns = run.table(names.RESULTS_TABLE)["columns"]
        assert columns == [*names.RESULTS_COLUMNS, *(f"{part}_gib" for part in BREAKDOWN_KEYS)]
        assert row[: len(names.RESULTS_COLUMNS)] == [results[key] for key in names.RESULTS_COLUMNS], recipe
        assert row[len(names.RESULTS_COLUMNS) :] == [
            results["memory_breakdown_gib"][part] for part in BREAKDOWN_KEYS
        ]
        breakdown = run.table(names.MEMORY_BREAKDOWN_CHART.table_key)
        assert breakdown["columns"] == ["part", "GiB"]
        assert [part for part, _ in breakdown["data"]] == [part.replace("_", " ") for part in BREAKDOWN_KEYS]
        chart = run.chart_specs[names.MEMORY_BREAKDOWN_CHART.key]
        assert chart["panelDefId"] == "wandb/bar/v0"
        assert chart["fieldSettings"] == {"label": "part", "value": "GiB"}
        # The pictures come on top of the summary: every results.json key is still there.
        assert run.summary["summary"].get("eval_accuracy") == results["eval_accuracy"]


def test_the_confusion_matrix_and_per_class_metrics_are_logged_once_results_have_them(recipe_runs):
    results, run = recipe_runs["richer results"]
    confusion = run.table(names.CONFUSION_MATRIX_CHART.table_key)
    assert confusion["columns"] == ["Actual", "Predicted", "nPredictions"]
    assert confusion["data"] == [
        ["cool", "cool", 24],
        ["cool", "warm", 8],
        ["warm", "cool", 6],
        ["warm", "warm", 26],
    ]
    assert run.chart_specs[names.CONFUSION_MATRIX_CHART.key]["panelDefId"] == "wandb/confusion_matrix/v1"
    per_class = run.table(names.PER_CLASS_TABLE)
    assert per_class["columns"] == ["label", "precision", "recall", "f1", "support"]
    assert per_class["data"] == [[label, *scores.values()] for label, scores in PER_CLASS.items()]
    # Real runs log them from their own results.json (predictions.per_class_report).
    for recipe in RECIPES:
        results, run = recipe_runs[recipe]
        assert run.table(names.PER_CLASS_TABLE)["data"] == [
            [label, *scores.values()] for label, scores in results["per_class"].items()
        ]
        cells = run.table(names.CONFUSION_MATRIX_CHART.table_key)["data"]
        assert sum(count for *_, count in cells) == sum(map(sum, results["confusion_matrix"]["matrix"]))
    # Results without them (runs from before they existed) log neither.
    older = {
        key: value for key, value in results.items() if key not in (names.PER_CLASS, names.CONFUSION_MATRIX)
    }
    assert not {names.PER_CLASS_TABLE, names.CONFUSION_MATRIX_CHART.key} & set(
        results_pictures(RunResults.from_dict(older))
    )


def test_a_malformed_confusion_matrix_is_not_drawn_and_does_not_end_the_run(caplog):
    pictures = results_pictures(
        RunResults.from_dict({"confusion_matrix": {"labels": ["a", "b"], "matrix": [[1, 2]]}})
    )
    assert names.CONFUSION_MATRIX_CHART.key not in pictures and names.RESULTS_TABLE in pictures
    assert "not logged as a chart" in caplog.text


def test_on_cuda_the_memory_curves_are_the_ones_the_view_shows(monkeypatch):
    import torch

    for function in ("memory_allocated", "max_memory_allocated", "memory_reserved"):
        monkeypatch.setattr(torch.cuda, function, lambda device=None: 2**30)
    assert tuple(memory_figures(torch.device("cuda"))) == names.CUDA_MEMORY_CURVES
    assert tuple(memory_figures(torch.device("cpu"))) == names.CPU_MEMORY_CURVES


@needs_extra
@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_real_run_logs_every_memory_curve_the_view_shows(
    tiny_bert, learnable_data, tmp_path, spec
):
    env = isolated_wandb_env(tmp_path, WANDB_MODE="offline")
    args = run_args(
        tiny_bert, learnable_data, tmp_path / "out", "--logging_steps", "1", "--report_to", "wandb", **QUICK
    )
    command = [sys.executable, str(REPO_ROOT / "recipes" / "full_ft.py"), *args]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, env=env)
    assert completed.returncode == 0, completed.stderr[-3000:]
    (run_dir,) = offline_runs(tmp_path)
    shown = referenced_keys(spec) - set(names.CPU_MEMORY_CURVES) - set(LOGGED_WHEN)
    assert shown <= read_run(run_dir).logged_keys


# --- the command: offline, a missing extra, a missing key, no network --------------------------------


def dashboard_command(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "recipes_workbench.cli.main",
        "wandb-dashboard",
        "--project",
        "bert-recipes",
        *args,
    ]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
        env=isolated_wandb_env(root, **env),
    )


@needs_extra
def test_without_an_api_key_it_builds_the_view_then_stops_with_one_line_saying_what_it_needs(tmp_path, spec):
    spec_file = tmp_path / "view.json"
    completed = dashboard_command(
        tmp_path, "--group", "bert-base-uncased_glue-sst2", "--report", "--spec_file", str(spec_file)
    )
    assert completed.returncode == 2
    assert completed.stdout == ""
    (line,) = project_lines(completed.stderr)
    assert line.startswith("error: built the W&B view 'Recipe comparison: bert-base-uncased_glue-sst2'")
    assert "checked it offline" in line and "needs a W&B API key" in line and "wandb sync" in line
    # The view it built and checked is the one this module checks.
    written = json.loads(spec_file.read_text())
    assert referenced_keys(written) == referenced_keys(spec)
    assert [name for name in sections(written)] == [name for name in sections(spec)]


def test_without_a_key_in_offline_mode_it_names_both_fixes_at_once(tmp_path):
    """`make demo` leaves WANDB_MODE=offline in a user's habits: naming only the key would be followed by a
    second error about the mode."""
    script = "from recipes_workbench.dashboard import connect\nconnect('built the view')\n"
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                               env=isolated_wandb_env(tmp_path, WANDB_MODE="offline"))  # fmt: skip
    assert completed.returncode != 0
    message = completed.stderr.strip().splitlines()[-1]
    assert "needs a W&B API key" in message and "in offline mode" in message and "wandb online" in message


@needs_extra
def test_with_a_key_but_no_reachable_server_it_says_it_needs_the_network(tmp_path):
    # Port 9 on this machine: nothing listens, so the connection is refused at once.
    completed = dashboard_command(tmp_path, WANDB_API_KEY=FAKE_API_KEY, WANDB_BASE_URL="http://127.0.0.1:9")
    assert completed.returncode == 2, completed.stderr
    (line,) = project_lines(completed.stderr)
    assert "needs the network" in line and "http://127.0.0.1:9" in line
    assert FAKE_API_KEY not in completed.stderr + completed.stdout


def test_without_the_extra_it_names_the_extra_to_install(monkeypatch, capsys):
    for module in ("wandb_workspaces", "wandb_workspaces.workspaces", "wandb_workspaces.reports.v2"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    assert wandb_dashboard("bert-recipes") == 2
    (line,) = project_lines(capsys.readouterr().err)
    assert "wandb-workspaces" in line and "pip install -e '.[dashboard]'" in line


# --- recipes-lib compare --wandb -------------------------------------------------------------------------


def test_compare_wandb_logs_the_table_and_chart_into_the_runs_group_as_one_comparison_run(
    recipe_runs, tmp_path
):
    from recipes_workbench.tools.compare_wandb import experiment_of

    runs = [recipe_runs[recipe] for recipe in RECIPES]
    run_dirs = [results["output_dir"] for results, _ in runs]
    chart = tmp_path / "chart.png"
    command = [
        sys.executable,
        "-m",
        "recipes_workbench.cli.main",
        "compare",
        *run_dirs,
        "--chart",
        str(chart),
        "--wandb",
    ]
    completed = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=isolated_wandb_env(tmp_path)
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "no W&B API key found" in completed.stdout and "wandb sync" in completed.stdout
    (run_dir,) = offline_runs(tmp_path)
    comparison = read_run(run_dir)
    group = runs[0][1].run_record["run_group"]
    assert comparison.run_record["run_group"] == group == experiment_of(runs[0][0]["config"])
    assert comparison.run_record["job_type"] == COMPARE_JOB_TYPE
    assert comparison.summary["name"] == f"compare {' vs '.join(RECIPES)}"
    table = comparison.table(COMPARISON_TABLE)
    assert [row[0] for row in table["data"]] == list(RECIPES)
    assert table["columns"] == runs[0][1].table(names.RESULTS_TABLE)["columns"]
    assert comparison.summary["summary"][COMPARISON_CHART]["_type"] == "image-file"


def test_compare_wandb_refuses_runs_of_different_groups_without_experiment(recipe_runs, tmp_path, capsys):
    from recipes_workbench.tools.compare_wandb import log_comparison

    results = recipe_runs[RECIPES[0]][0]
    other = tmp_path / "other"
    other.mkdir()
    (other / "results.json").write_text(
        json.dumps({**results, "config": {**results["config"], "experiment": "other"}})
    )
    assert log_comparison([results["output_dir"], str(other)], draw=False) == 2
    (line,) = project_lines(capsys.readouterr().err)
    assert "different W&B groups" in line and "--experiment" in line


class FakeWandbGraphQL:
    """W&B's GraphQL endpoint, as wandb_workspaces speaks to it through the SDK's service API
    (`api._service_api.execute_graphql(query, variables=...)`): a project's saved views, and
    upsertView, which updates the view whose id it is given and adds a view without one. The lowest
    seam the saving code has: the query text and everything above it are real."""

    app_url = "https://wandb.example"

    def __init__(self, views=()):
        self.views = {view["id"]: view for view in views}

    def execute_graphql(self, query: str, variables=None):
        import re

        variables = variables or {}
        operation = re.search(r"(?:query|mutation)\s+(\w+)", query).group(1)
        if operation == "ProjectViews":
            wanted = (variables["entityName"], variables["name"], variables.get("viewType", "project-view"))
            edges = [
                {"node": {"id": view["id"], "name": view["name"], "displayName": view["displayName"]}}
                for view in self.views.values()
                if (view["entityName"], view["projectName"], view["type"]) == wanted
            ]
            return {"project": {"allViews": {"edges": edges}}}
        if operation == "UpsertView2":
            view_id = variables.get("id") or f"view-{len(self.views) + 1}"
            inserted = view_id not in self.views
            self.views[view_id] = {**variables, "id": view_id}
            return {"upsertView": {"view": {"id": view_id, "name": variables["name"]}, "inserted": inserted}}
        raise AssertionError(f"the dashboard sent an unexpected GraphQL operation: {operation}")


def saved_view(project: str, name: str, display_name: str, view_id: str, entity: str = "my-team") -> dict:
    return {"id": view_id, "name": name, "displayName": display_name, "entityName": entity,
            "projectName": project, "type": "project-view", "spec": "{}"}  # fmt: skip


@needs_extra
def test_with_a_key_and_the_network_it_saves_the_checked_view_and_updates_it_not_a_duplicate(
    monkeypatch, capsys
):
    """Saving against a stand-in W&B server: the existing view of the same name is found and updated
    (its id kept, no second view), on the first save and on every save after it."""
    import wandb
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.reports.v2.interface as report_interface

    from recipes_workbench import dashboard

    group = "bert-base-uncased_glue-sst2"
    server = FakeWandbGraphQL(
        [
            saved_view("bert-recipes", "nw-abc123-v", dashboard.view_name(group), "view-id"),
            saved_view("bert-recipes", "nw-other-v", "someone else's view", "other-id"),
            saved_view("another-project", "nw-elsewhere-v", dashboard.view_name(group), "elsewhere-id"),
        ]
    )

    class FakeApi:
        default_entity = "my-team"

        def __init__(self):
            self._service_api = server

    sent = {}

    def save_report(report, draft=False, clone=False):
        sent["report"] = report
        report.id = "report-id"
        return report

    monkeypatch.setattr(dashboard, "connect", lambda built: FakeApi())
    monkeypatch.setattr(wandb, "Api", FakeApi)
    monkeypatch.setattr(wr.Report, "save", save_report)
    monkeypatch.setattr(report_interface, "_get_api", FakeApi)

    for _ in range(2):
        assert wandb_dashboard("bert-recipes", group=group, report=True) == 0
        lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("[INFO]")]
        assert lines == [
            "updated W&B view: https://wandb.example/my-team/bert-recipes?nw=abc123",
            "saved W&B report: https://wandb.example/my-team/bert-recipes/reports/"
            "Recipe-comparison:-bert-base-uncased_glue-sst2--report-id",
        ]
        assert sorted(server.views) == ["elsewhere-id", "other-id", "view-id"]  # updated, not duplicated
        view = server.views["view-id"]
        assert (view["entityName"], view["projectName"], view["name"]) == (
            "my-team",
            "bert-recipes",
            "nw-abc123-v",
        )
        checked = view_spec(build_view("bert-recipes", "", group))
        assert referenced_keys(json.loads(view["spec"])) == referenced_keys(checked)
        assert server.views["other-id"]["spec"] == server.views["elsewhere-id"]["spec"] == "{}"
    assert sent["report"].entity == "my-team"

    # A project without that view: the first save adds it, the next one updates it.
    server.views.clear()
    assert wandb_dashboard("bert-recipes", group=group) == 0
    assert capsys.readouterr().out.startswith(
        "saved W&B view: https://wandb.example/my-team/bert-recipes?nw="
    )
    (first,) = server.views
    assert wandb_dashboard("bert-recipes", group=group) == 0
    assert "updated W&B view: " in capsys.readouterr().out
    assert list(server.views) == [first]
