"""`recipes-lib compare`: the table and the chart, from real runs of two recipes."""

from __future__ import annotations

import shutil

import pytest

from recipes_lib.results import RunResults
from recipes_workbench.cli.main import main
from recipes_workbench.tools.compare import CHART_FILE
from tests.helpers.runs import QUICK, run_args, run_in_process
from tests.helpers.wandb_runs import offline_runs, offline_wandb_in_the_default_dir


@pytest.fixture(scope="module")
def two_runs(tiny_bert, learnable_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    for recipe in ("full_ft", "lora"):
        run_in_process(recipe, run_args(tiny_bert, learnable_data, root / recipe, **QUICK))
    # The same recipe scored on fewer validation rows: not comparable with the two above.
    run_in_process(
        "full_ft",
        run_args(tiny_bert, learnable_data, root / "full_ft_8_rows", **{**QUICK, "max_eval_samples": 8}),
    )
    return root


def test_compare_prints_one_row_per_run_and_writes_the_chart(two_runs, capsys):
    code = main(["compare", str(two_runs / "full_ft"), str(two_runs / "lora")])
    output = capsys.readouterr().out
    assert code == 0
    header, _rule, *rows = output.splitlines()[:4]
    for title in (
        "recipe",
        "weights",
        "gradients",
        "optimizer",
        "activations",
        "trainable params",
        "optimizer state bytes",
        "samples/s",
        "tokens/s",
        "accuracy",
        "macro-F1",
        "train s",
        "positive F1",
    ):  # fmt: skip  (a binary task: the positive class's F1, issue #55)
        assert title in header
    assert rows[0].startswith("full_ft") and rows[1].startswith("lora")
    # Under the table: where "peak" comes from, and what the tensor columns measure.
    assert "\npeak: process peak RSS" in output and "\ntensor peak: all tensors at once" in output
    chart = two_runs / CHART_FILE
    assert f"chart: {chart}" in output
    import matplotlib.image

    image = matplotlib.image.imread(chart)
    assert image.shape[0] > 300 and image.shape[1] > 500


def test_show_prints_one_short_row_per_run_and_refuses_a_directory_without_results(
    two_runs, capsys, tmp_path
):
    from recipes_lib.results import read_results

    assert main(["show", str(two_runs / "full_ft"), str(two_runs / "lora")]) == 0
    header, _rule, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["recipe", "model", "accuracy", "macro-F1"]
    accuracy = read_results(two_runs / "lora").eval_accuracy
    assert rows[0].startswith("full_ft") and rows[1].startswith("lora") and f"{accuracy:.4f}" in rows[1]
    assert main(["show", str(tmp_path)]) == 2
    assert "no results.json" in capsys.readouterr().err


def test_lora_shows_less_gradient_and_optimizer_memory_than_full_fine_tuning(two_runs, capsys):
    main(["compare", "--no_chart", str(two_runs / "full_ft"), str(two_runs / "lora")])
    header, _rule, full, lora = capsys.readouterr().out.splitlines()[:4]
    columns = [title.strip() for title in header.split("  ") if title.strip()]
    gradients = columns.index("gradients MiB")
    assert float(lora.split()[gradients + 1]) < float(full.split()[gradients + 1])  # + 1: "model" is one word


def test_markdown_table_for_a_readme(two_runs, capsys, tmp_path):
    chart = tmp_path / "chart.png"
    code = main(
        ["compare", "--markdown", "--chart", str(chart), str(two_runs / "full_ft"), str(two_runs / "lora")]
    )
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and chart.is_file()
    assert lines[0].startswith("| recipe | model |") and lines[1].startswith("|---|")
    assert lines[2].startswith("| full_ft |") and lines[3].startswith("| lora |")


def test_runs_of_the_same_evaluation_set_get_no_note(two_runs, capsys):
    assert main(["compare", "--no_chart", str(two_runs / "full_ft"), str(two_runs / "lora")]) == 0
    output = capsys.readouterr().out
    assert "eval set" not in output.splitlines()[0] and "Not evaluated on the same set" not in output


def test_runs_scored_on_different_rows_are_marked_and_the_difference_named(two_runs, capsys):
    """Still compared (users do it on purpose), but each row says its set and one line says how they differ."""
    assert main(["compare", "--no_chart", str(two_runs / "full_ft"), str(two_runs / "full_ft_8_rows")]) == 0
    header, _rule, first, second, *notes = capsys.readouterr().out.splitlines()
    assert header.rstrip().endswith("eval set")
    assert first.rstrip().endswith("A") and second.rstrip().endswith("B")
    (note,) = [line for line in notes if line.startswith("Not evaluated on the same set")]
    assert "A = full_ft; B = full_ft_8_rows" in note
    assert "rows A 16 vs B 8" in note and "not like for like" in note


def note_of(*runs: dict) -> str | None:
    """compare's note on runs given as results.json's contents, named x and y."""
    from recipes_workbench.tools.compare import evaluation_note

    return evaluation_note([RunResults.from_dict(run) for run in runs], ["x", "y"])


def _scored(
    validation_file="data/dev.csv", rows=400, labels=("a", "b"), split="dev.csv", seed=42, task="single"
):
    return {"dataset": "data/train.csv", "eval_split": split, "eval_samples": rows, "problem_type": task,
            "confusion_matrix": {"labels": list(labels)}, "config": {"validation_file": validation_file, "seed": seed}}  # fmt: skip


@pytest.mark.parametrize(
    ("other", "named"),
    [
        (
            _scored(validation_file="data/dev2.csv", split="dev2.csv"),
            "validation A data/dev.csv vs B data/dev2.csv",
        ),
        (_scored(labels=("a", "b", "c")), "labels A a, b vs B a, b, c"),
        (_scored(task="regression"), "task A single vs B regression"),
    ],
)
def test_every_recorded_part_of_the_evaluation_set_is_compared(other, named):
    # A validation file's rows do not depend on the seed, nor on the training file (a cleaned one, say).
    assert note_of(_scored(), _scored(seed=7)) is None
    retrained = {**_scored(), "dataset": "data/train_cleaned.csv"}
    assert note_of(_scored(), retrained) is None
    note = note_of(_scored(), other)
    assert named in note and "A = x; B = y" in note


def test_held_out_rows_of_another_seed_are_another_set_and_unrecorded_parts_are_no_difference():
    held_out = {"validation_file": None, "split": "10% of train held out"}
    note = note_of(_scored(**held_out, seed=1), _scored(**held_out, seed=2))
    assert "held-out seed A 1 vs B 2" in note
    other_train = {
        **_scored(**held_out, seed=1),
        "dataset": "data/other.csv",
    }  # rows held out of another file
    note = note_of(_scored(**held_out, seed=1), other_train)
    assert "data A data/train.csv vs B data/other.csv" in note
    older = {"eval_samples": 400, "config": {"validation_file": "data/dev.csv"}}  # no labels, task or dataset
    assert note_of(_scored(), older) is None


def test_a_directory_without_results_is_refused(tmp_path, capsys):
    assert main(["compare", str(tmp_path)]) == 2
    assert "no results.json" in capsys.readouterr().err


def test_the_chart_stacks_every_part_of_the_measured_breakdown():
    """Each run's bar is its measured parts stacked, in results.json's order, and its total their sum."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from recipes_workbench.tools.compare import _draw_memory_bars

    # Every part a different size, so a part left out or stacked twice changes the heights and the total.
    parts = ("weights", "gradients", "optimizer_state", "activations", "other")
    runs = [
        {"memory_breakdown_gib": dict(zip(parts, (0.5, 0.25, 1.0, 0.125, 0.0625), strict=True))},
        {"memory_breakdown_gib": dict(zip(parts, (0.5, 0.01, 0.02, 0.3, 0.04), strict=True))},
    ]
    figure, axis = plt.subplots()
    try:
        totals = _draw_memory_bars(axis, [RunResults.from_dict(run) for run in runs], [0, 1], "GiB", 1.0)
        for position, run in enumerate(runs):
            bars = sorted((bar for bar in axis.patches if bar.get_x() < position < bar.get_x() + bar.get_width()),
                          key=lambda bar: bar.get_y())  # fmt: skip
            assert [bar.get_height() for bar in bars] == pytest.approx(
                [run["memory_breakdown_gib"][p] for p in parts]
            )
            assert totals[position] == pytest.approx(sum(run["memory_breakdown_gib"].values()))
        assert [text.get_text() for text in axis.texts] == ["1.94", "0.87"]
    finally:
        plt.close(figure)


def test_the_chart_marks_pearson_for_regression_runs_and_exact_match_for_multi_label_ones():
    from recipes_workbench.tools.compare import _chart_metric

    def chart_metric(*runs):
        return _chart_metric([RunResults.from_dict(run) for run in runs])

    assert chart_metric(*[{"problem_type": "regression"}] * 2) == ("eval_pearson", "Pearson")
    assert chart_metric({"problem_type": "multi_label_classification"}) == ("eval_accuracy", "exact match")
    # Runs from before task types had no problem_type: single-label accuracy.
    assert chart_metric({"recipe": "full_ft"}, {"problem_type": "regression"}) == (
        "eval_accuracy",
        "accuracy",
    )


def test_compare_wandb_keeps_the_line_in_the_comparison_runs_config(two_runs, monkeypatch):
    """The W&B table has the runs' own columns (no eval set one): the comparison run's config holds the line."""
    from recipes_workbench.tools import compare_wandb

    started = []
    monkeypatch.setattr(
        compare_wandb, "start_run", lambda identity, config, directory: started.append(config) or (None, None)
    )
    run_dirs = [str(two_runs / "full_ft"), str(two_runs / "full_ft_8_rows")]
    assert compare_wandb.log_comparison(run_dirs, draw=False) == 0
    assert "rows A 16 vs B 8" in started[0]["evaluation_note"]
    assert compare_wandb.log_comparison([str(two_runs / "full_ft"), str(two_runs / "lora")], draw=False) == 0
    assert "evaluation_note" not in started[1]


def test_compare_wandb_writes_its_offline_run_beside_the_runs_not_where_the_command_runs(
    two_runs, tmp_path, monkeypatch
):
    """As a recipe's run goes in its output_dir/wandb, the comparison run goes in the directory holding
    the runs (outputs/demo/wandb for `make demo`): the checkout's ./wandb stays empty."""
    import wandb

    from recipes_workbench.tools.compare_wandb import log_comparison

    runs = tmp_path / "outputs"
    for recipe in ("full_ft", "lora"):
        (runs / recipe).mkdir(parents=True)
        shutil.copy(two_runs / recipe / "results.json", runs / recipe)
    offline_wandb_in_the_default_dir(monkeypatch, tmp_path / "wandb-home")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.chdir(checkout)
    wandb.teardown()  # W&B reads its settings once per process: read this environment
    try:
        assert log_comparison([str(runs / "full_ft"), str(runs / "lora")], draw=False) == 0
    finally:
        wandb.teardown()
    assert len(offline_runs(runs)) == 1
    assert not (checkout / "wandb").exists()


def test_the_table_of_runs_alike_is_named_by_the_directories_it_must_be_given():
    """Two runs whose settings look alike are told apart by their directories: comparison_table takes them."""
    import inspect

    from recipes_workbench.tools.compare import comparison_table

    assert inspect.signature(comparison_table).parameters["run_dirs"].default is inspect.Parameter.empty
    runs = [RunResults.from_dict(_scored()), RunResults.from_dict(_scored())]
    table = comparison_table(runs, ["outputs/first", "outputs/second"])
    assert "first" in table and "second" in table
