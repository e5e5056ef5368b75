"""benchmarks/publish.py: every published demo table is generated from a committed record, and says so.

A marked block (`<!-- record TABLE RECORD: start -->` ... `<!-- record: end -->`) in README.md,
benchmarks/RESULTS.md or docs/ must be exactly what its record renders: a figure edited by hand, or
a record replaced without regenerating its table, fails here.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.helpers.repo import REPO_ROOT


@pytest.fixture(scope="module")
def publish():
    spec = importlib.util.spec_from_file_location("publish", REPO_ROOT / "benchmarks" / "publish.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["publish"] = module
    spec.loader.exec_module(module)
    return module


def test_every_published_table_is_what_its_committed_record_renders(publish):
    blocks = 0
    for name in publish.PUBLISHED_FILES:
        text = (REPO_ROOT / name).read_text()
        assert text.count("<!-- record ") == text.count("<!-- record: end -->"), f"{name}: an unclosed block"
        for table, record, body in publish.published_blocks(text):
            blocks += 1
            assert record.startswith("benchmarks/results/") and (REPO_ROOT / record).is_file(), (name, record)
            assert body == publish.render(table, record, name), (
                f"{name}: the {table} table differs from {record}"
            )
    assert publish.main(["tables", "--check"]) == 0
    # Every closed block is one the parser found (counted in the text, not by the parser), and the
    # five demo tables of benchmarks/RESULTS.md are among them: a parser that finds none fails here.
    closed = sum((REPO_ROOT / n).read_text().count("<!-- record: end -->") for n in publish.PUBLISHED_FILES)
    assert blocks == closed and blocks >= 5


def fake_run(directory, recipe: str, accuracy: float, problem_type="single_label_classification"):
    directory.mkdir(parents=True)
    results = {"recipe": recipe, "problem_type": problem_type, "eval_accuracy": accuracy, "eval_f1": accuracy - 0.01,
               "params_trainable": 1234, "optimizer_state_bytes": 3 * 2**20, "peak_memory_gib": 1.4,
               "train_samples_per_s": 70.0, "train_runtime_s": 50.0, "train_steps": 63, "precision": "bf16",
               "config": {"long_text": "head_tail"}, "not_published": "left out"}  # fmt: skip
    (directory / "results.json").write_text(json.dumps(results))
    return directory


def test_a_record_keeps_each_runs_figures_and_the_machine_and_a_hand_edit_is_caught(publish, tmp_path):
    runs = [fake_run(tmp_path / "full_ft", "full_ft", 0.8475), fake_run(tmp_path / "lora", "lora", 0.815)]
    path = publish.write_record("demo", runs, "make demo", 290.0, tmp_path / "results")
    record = json.loads(path.read_text())
    assert path.name.startswith("demo-") and record["command"] == "make demo" and record["wall_s"] == 290.0
    assert [run["recipe"] for run in record["runs"]] == ["full_ft", "lora"]
    assert "not_published" not in record["runs"][0] and record["runs"][1]["eval_accuracy"] == 0.815
    cpu = record["machine"]["cpu"]
    assert cpu["model"] and set(cpu["flags"]) == set(publish.CPU_FLAGS)
    assert record["machine"]["versions"]["torch"] and record["date"] and "commit" in record["git"]

    table = publish.render("demo", str(path))
    assert "| full_ft | bf16 | 0.8475 | 0.8375 | 1,234 | 3.0 MiB | 1.40 GiB | 70.0 | 50.0 |" in table
    assert f"Record: [{path}](" in table and "`make demo` on " in table
    page = f"# Results\n\n<!-- record demo {path}: start -->\nstale\n<!-- record: end -->\n"
    fresh = publish.regenerate(page)
    assert "| lora | bf16 | 0.8150 |" in fresh and "stale" not in fresh
    assert publish.regenerate(fresh) == fresh  # generated once, unchanged after
    assert publish.regenerate(fresh.replace("0.8150", "0.8200")) == fresh  # a hand edit is put back
    assert "| head_tail | 0.8475 |" in publish.render("long-text-demo", str(path))


def test_a_record_of_runs_that_did_not_finish_is_refused(publish, tmp_path):
    (tmp_path / "unfinished").mkdir()
    with pytest.raises(SystemExit, match="results.json does not exist: run the demo first"):
        publish.write_record("demo", [tmp_path / "unfinished"], "make demo", None, tmp_path / "results")
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


def test_the_distill_demo_table_groups_the_seeds_and_shows_the_exported_students_gate(publish, tmp_path):
    def run(name, recipe, seed, accuracy, rows, **config):
        directory = fake_run(tmp_path / name, recipe, accuracy)
        results = json.loads((directory / "results.json").read_text())
        results.update(train_samples=rows, config={"seed": seed, "train_file": "data/x/train.csv", **config})
        (directory / "results.json").write_text(json.dumps(results))
        return directory

    teacher = run("teacher", "full_ft", 42, 0.84, 1200)
    taught = [run(f"distill_{s}", "distill", s, a, 1200, teacher=str(teacher), transfer_file="data/x/transfer.csv")
              for s, a in ((42, 0.80), (43, 0.82))]  # fmt: skip
    alone = [run(f"alone_{s}", "full_ft", s, a, 100) for s, a in ((42, 0.50), (43, 0.60))]
    model = {"rows": 400, "agreement": 1.0, "metric": "accuracy", "pytorch": {"accuracy": 0.8},
             "onnx": {"accuracy": 0.8}, "metric_drop_points": 0.0, "max_abs_logit_difference": 2e-6,
             "file": "model.onnx", "size_bytes": 87 * 2**20}  # fmt: skip
    (taught[0] / "export").mkdir()
    (taught[0] / "export" / "export_report.json").write_text(json.dumps(
        {"passed": True, "exporter": "dynamo", "int8_weights": "unsigned", "rows_from": "validation.csv",
         "models": {"fp32": model}}))  # fmt: skip
    path = publish.write_record(
        "distill-demo", [teacher, *taught, *alone], "make distill-demo", None, tmp_path / "r"
    )
    table = publish.render("distill-demo", str(path))
    assert "| teacher (full_ft) | 1,200: `train.csv` | 0.8400 (one run) | 42: 0.8400 |" in table
    assert ("| student, taught (distill) | 1,200: `train.csv` + `transfer.csv` labelled by the teacher | "
            "0.8100 ± 0.0141 | 42: 0.8000, 43: 0.8200 |") in table  # fmt: skip
    assert (
        "| student, alone (full_ft) | 100: `train.csv` | 0.5500 ± 0.0707 | 42: 0.5000, 43: 0.6000 |" in table
    )
    assert "(dynamo exporter, int8 weights unsigned)" in table
    assert "| fp32 | 87.0 MiB | 100.00% of 400 | 0.8000 (0.8000) | 0.00 | 2.0e-06 |" in table


def test_a_figure_edited_in_a_generated_block_of_results_md_fails_the_check_and_is_put_back(
    publish, tmp_path, monkeypatch, capsys
):
    """The check over the real files: a copy of the repository's published pages and their records, one
    figure in one of RESULTS.md's generated blocks changed by hand."""
    import re
    import shutil

    for name in publish.PUBLISHED_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, tmp_path / name)
        for _, record, _ in publish.published_blocks((REPO_ROOT / name).read_text()):
            (tmp_path / record).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO_ROOT / record, tmp_path / record)
    monkeypatch.setattr(publish, "REPO_ROOT", tmp_path)
    assert publish.main(["tables", "--check"]) == 0
    results = tmp_path / "benchmarks" / "RESULTS.md"
    original = results.read_text()
    block = next(publish.BLOCK.finditer(original))  # the first generated block
    figure = re.search(r"\| (\d+\.\d{4}) \|", block["body"])  # its first four-decimal figure
    assert figure, block["body"]
    edited_value = f"{float(figure[1]) + 0.01:.4f}"
    start = block.start("body") + figure.start(1)
    results.write_text(original[:start] + edited_value + original[start + len(figure[1]) :])
    capsys.readouterr()
    assert publish.main(["tables", "--check"]) == 1
    assert "benchmarks/RESULTS.md" in capsys.readouterr().err
    assert publish.main(["tables"]) == 0 and results.read_text() == original  # regenerated from its record


def test_a_record_names_the_commit_its_runs_started_at_not_the_one_when_it_is_written(
    publish, tmp_path, monkeypatch
):
    states = iter([{"commit": "aaaaaaa", "dirty": True}, {"commit": "bbbbbbb", "dirty": False}])
    monkeypatch.setattr(publish, "git_commit", lambda: next(states))
    started = tmp_path / "demo" / ".started"
    assert publish.main(["start", str(started)]) == 0  # make demo's first step
    assert int(started.read_text()) > 0  # seconds, as `date +%s` wrote them before
    run = fake_run(tmp_path / "full_ft", "full_ft", 0.84)
    # ... the runs; a commit lands meanwhile (the second state) ...
    results = tmp_path / "results"
    args = ["record", "demo", str(run), "--command", "make demo", "--started", str(started)]
    assert publish.main([*args, "--out_dir", str(results)]) == 0
    record = json.loads(next(results.glob("demo-*.json")).read_text())
    assert record["git"] == {"commit": "aaaaaaa", "dirty": True, "read_at": "start"}
    assert 0 <= record["wall_s"] < 60


def test_every_record_names_its_commit_or_is_listed_as_predating_commit_stamping():
    """Issue #41's rule: every record under benchmarks/results names the commit it ran at (`git.commit`);
    the older ones are listed in RESULTS.md's "Records that predate commit-stamping" with the commit that
    added them, and a new record without a commit fails here."""
    import re

    text = (REPO_ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = text.split("## Records that predate commit-stamping", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([^`]+\.json)` \| ([0-9a-f]{7,}) \|", section, re.MULTILINE))
    unstamped = set()
    for path in sorted((REPO_ROOT / "benchmarks" / "results").glob("*.json")):
        record = json.loads(path.read_text())
        git = record.get("git") if isinstance(record, dict) else None
        if not (isinstance(git, dict) and git.get("commit")):
            unstamped.add(path.name)
    assert unstamped == {name for name, _ in listed}, (
        f"records without a commit, not listed: {sorted(unstamped - {n for n, _ in listed})}; "
        f"listed but stamped or absent: {sorted({n for n, _ in listed} - unstamped)}"
    )


def test_a_multi_label_runs_record_keeps_its_micro_f1_and_its_table_shows_exact_match_and_both_f1s(
    publish, tmp_path
):
    directory = fake_run(tmp_path / "full_ft", "full_ft", 0.273)
    results = json.loads((directory / "results.json").read_text())
    results.update(problem_type="multi_label_classification", eval_f1=0.412, eval_f1_micro=0.559)
    (directory / "results.json").write_text(json.dumps(results))
    path = publish.write_record("multilabel", [directory], "a command", None, tmp_path / "results")
    assert json.loads(path.read_text())["runs"][0]["eval_f1_micro"] == 0.559  # results.json's key
    table = publish.render("task-demo", str(path))
    assert (
        "| multi_label_classification | full_ft | exact match 0.273, micro-F1 0.559, macro-F1 0.412 |"
        in table
    )


def test_a_label_noise_record_renders_its_folds_flags_and_retrained_runs(publish, tmp_path):
    record = {
        "command": "python benchmarks/label_noise.py --folds 2", "date": "2026-12-04T20:00:00+00:00",
        "machine": publish.machine(), "git": {"commit": "abc1234", "dirty": False}, "wall_s": 120.0,
        "folds": 2, "eval_accuracy_mean": 0.8225, "eval_accuracy_std": 0.0247,
        "eval_accuracy_per_fold": [{"fold": 0, "eval_accuracy": 0.805}, {"fold": 1, "eval_accuracy": 0.84}], "test": None,
        "flipped": 120, "flagged": 128, "flagged_and_flipped": 91, "precision": 0.7109, "recall": 0.7583,
        "retrained": {"seeds": [0], "metric": "eval_accuracy", "noisy": {"values": [0.815]},
                      "cleaned": {"values": [0.845]}, "pair": {"verdict": "one seed each: not tested"}},
    }  # fmt: skip
    path = tmp_path / "label_noise.json"
    path.write_text(json.dumps(record))
    table = publish.render("label-noise", str(path))
    assert (
        "| cross-validation, 2 folds, each scored on its own held-out noisy rows | eval_accuracy 0.8225 ± 0.0247 (folds: 0.8050, 0.8400) |"
        in table
    )
    assert (
        "| flagged by label-issues | 128 rows, 91 of them flipped (of 120): precision 0.711, recall 0.758 |"
        in table
    )
    assert "| retrained on the cleaned file, eval_accuracy by seed [0] | 0.8450 |" in table
    assert "commit abc1234" in table and "2.0 min in all" in table


def test_an_int8_export_record_keeps_each_gate_its_every_node_figures_nodes_kept_and_latency_ratios(
    publish, tmp_path
):
    def model(agreement, onnx, file, mib):
        return {"rows": 872, "agreement": agreement, "metric": "accuracy", "pytorch": {"accuracy": 0.8131},
                "onnx": {"accuracy": onnx}, "metric_drop_points": 100 * (0.8131 - onnx),
                "max_abs_logit_difference": 0.3, "file": file, "size_bytes": mib * 2**20, "disagreeing_rows": 9}  # fmt: skip

    def run(name, passed, int8_recipe):
        directory = fake_run(tmp_path / name, "full_ft", 0.8131)
        results = json.loads((directory / "results.json").read_text())
        results.update(train_samples=4000, config={"train_file": "/data/sst2/train.tsv"})
        (directory / "results.json").write_text(json.dumps(results))
        report = {"passed": passed, "reason": None if passed else "the int8 model agrees on 96.00%",
                  "exporter": "dynamo", "int8_weights": "signed", "rows_from": "dev.tsv", "int8": int8_recipe,
                  "latency": {"threads": 1, "rows": 32, "median_ms": {"pytorch": 10.0, "fp32": 5.0, "int8": 2.0}},
                  "models": {"fp32": model(1.0, 0.8131, "model.onnx", 87.0),
                             "int8": model(0.9825, 0.8100, "model.int8.onnx", 25.0)}}  # fmt: skip
        (directory / ("export" if passed else "export.failed")).mkdir()
        (directory / ("export" if passed else "export.failed") / "export_report.json").write_text(
            json.dumps(report)
        )
        return directory

    kept = {"weights": "signed", "made_from": "TorchScript trace, eager attention", "fused_operators": {"Attention": 6},
            "nodes_kept_fp32": ["a/MatMul", "b/MatMul"], "most_damaging": [{"node": "a/MatMul", "damage": 1.0}],
            "every_node_int8": model(0.9625, 0.7981, "model.int8.onnx", 21.9)}  # fmt: skip
    refused = {"weights": "signed", "made_from": "model.onnx", "fused_operators": {}, "nodes_kept_fp32": []}
    path = publish.write_record("int8-export", [run("kept", True, kept), run("refused", False, refused)],
                                "bash benchmarks/int8_export.sh SST2 OUT", None, tmp_path / "results")  # fmt: skip
    record = json.loads(path.read_text())
    export = record["runs"][0]["export"]
    assert export["passed"] and export["latency"]["median_ms"]["int8"] == 2.0
    assert export["int8"]["every_node_int8"]["agreement"] == 0.9625 and "most_damaging" not in export["int8"]
    assert record["runs"][1]["export"]["passed"] is False  # read from export.failed/
    table = publish.render("export", str(path))
    name = "full_ft, 4,000 rows of `train.tsv`"
    assert f"| {name} | fp32 | 87.0 MiB | 100.00% of 872 | 81.31 (81.31) | 0.00 | - | 2.0x |" in table
    assert (
        f"| {name} | int8, every node | 21.9 MiB | 96.25% of 872 | 79.81 (81.31) | 1.50 | none | - |" in table
    )
    assert (
        f"| {name} | int8 | 25.0 MiB | 98.25% of 872 | 81.00 (81.31) | 0.31 | 2: `a/MatMul`, `b/MatMul` | 5.0x |"
        in table
    )
    assert "refused (the int8 model agrees on 96.00%)" in table and table.count("passed") == 1
    page = f"<!-- record export {path}: start -->\n{table}<!-- record: end -->\n"
    assert publish.regenerate(page.replace("98.25%", "98.85%")) == page  # a hand edit is put back


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        ({"avx2": True, "avx512f": True, "avx512_bf16": True, "amx_bf16": True}, "AVX-512 BF16, AMX BF16"),
        ({"avx2": True, "avx512f": True, "avx512_bf16": True, "amx_bf16": False}, "AVX-512 BF16)"),
        ({"avx2": True}, "AVX2)"),
    ],
)
def test_the_machine_line_names_the_bf16_hardware_the_figures_came_from(publish, flags, named):
    # Two 2-core machines with AVX-512 BF16 gave different demo accuracies (AMX's bf16 matmuls round
    # otherwise): a record's line must tell them apart.
    record = {
        "command": "make demo",
        "date": "2026-12-05T00:06:17+00:00",
        "machine": {"cpu": {"model": "Xeon", "cores": 2, "flags": flags}, "gpu": None, "versions": {}},
        "git": {"commit": "2e5e969"},
    }
    assert f"Xeon (2 cores, {named}" in publish.machine_line(record, "r.json", "r.json")
