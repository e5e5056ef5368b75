"""The benchmark scripts run end to end on the tiny model, and their ratios are computed right.

They are measuring tools: what is checked here is that they measure what they say (same batches
for every recipe, padding counted, ratios against the first row), not how fast anything is.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.repo import load_benchmark


def fake_run(name, seed, samples_per_s, tokens_per_s, runtime, steps, accuracy):
    """What throughput.py keeps of one recipe run's results.json."""
    return {
        "benchmark_name": name,
        "seed": seed,
        "train_samples_per_s": samples_per_s,
        "train_tokens_per_s": tokens_per_s,
        "pad_ratio": 0.5,
        "train_runtime_s": runtime,
        "train_steps": steps,
        "eval_accuracy": accuracy,
    }


def test_throughput_ratios_are_of_seed_means_against_the_first_way():
    throughput = load_benchmark("throughput")
    summary = throughput.summarise(
        [
            fake_run("usual", 1, 10.0, 200.0, 100.0, 50, 0.80),
            fake_run("recipe", 1, 40.0, 800.0, 25.0, 50, 0.80),
            fake_run("usual", 2, 10.0, 200.0, 100.0, 50, 0.81),
            fake_run("recipe", 2, 50.0, 1000.0, 19.0, 50, 0.82),
        ]
    )
    usual, recipe = summary
    assert usual["name"] == "usual" and usual["seeds"] == [1, 2]
    assert usual["real_tokens_per_s_ratio"] == 1.0 and usual["accuracy_delta_points"] == 0.0
    assert recipe["real_tokens_per_s"] == 900.0 and recipe["real_tokens_per_s_ratio"] == 4.5
    assert recipe["samples_per_s_ratio"] == 4.5
    assert recipe["step_time_ratio"] == 0.22
    assert recipe["eval_accuracy"] == 0.81 and recipe["eval_accuracy_by_seed"] == [0.80, 0.82]
    assert recipe["eval_accuracy_std"] == pytest.approx(0.0141, abs=1e-4)
    assert recipe["accuracy_delta_points"] == 0.5
    table = throughput.markdown(summary, "title")
    assert "| recipe | 45.0 | 900 |" in table and "4.50x" in table and "0.8100 ± 0.0141" in table
    assert "- recipe: 0.8000, 0.8200" in table


def test_one_seed_reports_no_spread():
    throughput = load_benchmark("throughput")
    (line,) = throughput.summarise([fake_run("recipe", 42, 40.0, 800.0, 25.0, 50, 0.80)])
    assert line["eval_accuracy_std"] is None
    assert "±" not in throughput.markdown([line], "title")


def test_throughput_switches_flip_one_default_each():
    throughput = load_benchmark("throughput")
    assert throughput.SWITCHES["defaults"] == []
    # Every other entry changes exactly one option, so its ratio is that option's cost.
    assert all(len(extra) == 2 for name, extra in throughput.SWITCHES.items() if name != "defaults")
    args = throughput.parse_args(["--switches"])
    assert args.switches and not args.recipes


def test_step_profile_times_every_phase_of_each_recipe_on_the_same_batches(
    tiny_bert, learnable_data, tmp_path, one_thread
):
    step_profile = load_benchmark("step_profile")
    report_dir = tmp_path / "report"
    argv = [
        "--model_name_or_path", str(tiny_bert),
        "--train_file", str(learnable_data["train"]), "--validation_file", str(learnable_data["validation"]),
        "--recipes", "full_ft", "adamw_8bit", "lora",
        "--per_device_train_batch_size", "8", "--max_seq_length", "32",
        "--warmup_steps", "1", "--steps", "3", "--profiled_steps", "1", "--top_ops", "5",
        "--report_dir", str(report_dir),
    ]  # fmt: skip
    assert step_profile.main(argv) == 0

    (report_file,) = report_dir.glob("step_profile-*.json")
    rows = {row["recipe"]: row for row in json.loads(report_file.read_text())["rows"]}
    assert set(rows) == {"full_ft", "adamw_8bit", "lora"}
    # Each recipe trains with its own optimizer: the Trainer's default for full_ft, its hook otherwise.
    assert rows["full_ft"]["optimizer"] == "AdamW (fused)"
    assert rows["adamw_8bit"]["optimizer"] == "AdamW8bit"
    assert rows["lora"]["params_trainable"] < rows["full_ft"]["params_trainable"] / 5
    assert rows["adamw_8bit"]["params_trainable"] == rows["full_ft"]["params_trainable"]
    # Same seeded batches for every recipe.
    assert len({row["mean_tokens_per_batch"] for row in rows.values()}) == 1
    for row in rows.values():
        assert all(row["median_ms"][phase] > 0 for phase in step_profile.PHASES)
        assert row["median_collate_ms"] > 0
        assert row["median_step_ms"] == pytest.approx(sum(row["median_ms"].values()), abs=0.05)
        assert 0 < len(row["top_operators"]) <= 5
        assert all(0 <= op["share"] <= 1 for op in row["top_operators"])
    assert "| lora |" in next(report_dir.glob("step_profile-*.md")).read_text()
    # The whole-model recipes' fraction of the machine's peak (CPU); LoRA's work is not 6 N a token.
    assert rows["full_ft"]["peak"]["fraction_of_peak"] > 0 and rows["adamw_8bit"]["peak"]["probe_gflops"] > 0
    assert rows["lora"]["peak"] is None
    report = json.loads(report_file.read_text())
    assert "commit" in report["git"] and report["machine_details"]["cpu"]["flags"]


@pytest.mark.slow
def test_throughput_runs_the_three_batching_ways_side_by_side(
    tiny_bert, learnable_data, tmp_path, one_thread
):
    throughput = load_benchmark("throughput")
    report_dir = tmp_path / "report"
    argv = [
        "--model_name_or_path", str(tiny_bert),
        "--train_file", str(learnable_data["train"]), "--validation_file", str(learnable_data["validation"]),
        "--max_train_samples", "128", "--max_seq_length", "32", "--per_device_train_batch_size", "16",
        "--learning_rate", "2e-3", "--work_dir", str(tmp_path / "runs"), "--report_dir", str(report_dir),
    ]  # fmt: skip
    assert throughput.main(argv) == 0
    (report_file,) = report_dir.glob("batching-*.json")
    summary = {row["name"]: row for row in json.loads(report_file.read_text())["summary"]}
    assert list(summary) == ["usual", "dynamic", "recipe"]
    # Padding to max_seq_length wastes most tokens on these short sentences; the other two waste less.
    assert summary["usual"]["pad_ratio"] > 0.5
    assert summary["dynamic"]["pad_ratio"] < summary["usual"]["pad_ratio"]
    assert summary["recipe"]["pad_ratio"] <= summary["dynamic"]["pad_ratio"]
    assert summary["usual"]["real_tokens_per_s_ratio"] == 1.0


def test_recipes_train_at_their_own_learning_rate_unless_one_is_given(tmp_path):
    throughput = load_benchmark("throughput")

    def learning_rate(argv):
        recipe_args = throughput.common_recipe_args(throughput.parse_args(argv), 42, tmp_path)
        return (
            recipe_args[recipe_args.index("--learning_rate") + 1]
            if "--learning_rate" in recipe_args
            else None
        )

    assert learning_rate([]) == "5e-05"  # the batching ways: one model, the usual way's rate
    assert learning_rate(["--switches"]) == "5e-05"
    assert learning_rate(["--recipes", "full_ft", "lora"]) is None  # LoRA would not learn at 5e-5
    assert learning_rate(["--recipes", "lora", "--learning_rate", "2e-3"]) == "0.002"


def test_gpu_check_catalogue_mode_measures_each_family_within_the_planners_tolerance(tmp_path, one_thread):
    """The catalogue mode's CPU path (--cpu --tiny): one BERT, one DeBERTa-v3 (v2 architecture) and
    XLM-R XL (pre-norm), smallest published size first, each recipe's measured peak within 10% of the plan."""
    gpu_catalogue = load_benchmark("gpu_catalogue")
    output = tmp_path / "catalogue.json"
    models = ["facebook/xlm-roberta-xl", "bert-base-uncased", "microsoft/deberta-v3-base"]
    argv = ["--cpu", "--tiny", "--models", *models, "--recipes", "full_ft", "lora",
            "--work_dir", str(tmp_path / "work"), "--output", str(output)]  # fmt: skip
    assert gpu_catalogue.main(argv) == 0
    report = json.loads(output.read_text())
    assert report["figures"].startswith("measured on CPU") and report["not_reached"] == []
    rows = report["rows"]
    assert [(row["model"], row["recipe"]) for row in rows] == [
        (model, recipe)
        for model in ("google-bert/bert-base-uncased", "microsoft/deberta-v3-base", "facebook/xlm-roberta-xl")
        for recipe in ("full_ft", "lora")
    ]
    for row in rows:
        assert row["status"] == "ok" and row["batch"] == 8 and row["seq"] == 32, row
        assert row["ratio"] == pytest.approx(row["planned_peak_gib"] / row["measured_peak_gib"], rel=1e-3)
        assert abs(row["ratio"] - 1) <= report["tolerance"] == 0.10, row
    lora = {row["model"]: row["params_trainable"] for row in rows if row["recipe"] == "lora"}
    full = {row["model"]: row["params_trainable"] for row in rows if row["recipe"] == "full_ft"}
    assert all(lora[model] < full[model] for model in lora)
    assert not (tmp_path / "work" / "models").exists() or not any((tmp_path / "work" / "models").iterdir())


def test_gpu_check_catalogue_mode_skips_what_the_plan_does_not_fit_and_lists_what_it_did_not_reach(tmp_path):
    gpu_catalogue = load_benchmark("gpu_catalogue")
    common = ["--cpu", "--tiny", "--work_dir", str(tmp_path / "work")]
    output = tmp_path / "small-budget.json"
    argv = [*common, "--models", "bert-base-uncased", "--budget_gib", "0.0005", "--output", str(output)]
    assert gpu_catalogue.main(argv) == 0
    rows = json.loads(output.read_text())["rows"]
    assert [row["status"] for row in rows] == ["skipped"] * 4
    assert all(
        row["note"].startswith("the plan needs") and "over the 0.0005 GiB" in row["note"] for row in rows
    )
    output = tmp_path / "no-time.json"
    assert gpu_catalogue.main([*common, "--max_minutes", "0", "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    from recipes_workbench.planner.catalogue import catalogue_names

    assert report["rows"] == [] and len(report["not_reached"]) == len(catalogue_names())
    assert report["not_reached"][:2] == [
        "albert/albert-base-v2",
        "google/electra-small-discriminator",
    ]  # smallest first


def test_label_noise_flips_the_asked_fraction_to_other_classes_and_scores_the_flags():
    label_noise = load_benchmark("label_noise")
    labels = ["billing", "shipping", "technical", "account"] * 50
    noisy, flipped = label_noise.flip_labels(labels, 0.1, seed=0)
    assert len(flipped) == 20 and len(set(flipped)) == 20
    assert all(noisy[row] != labels[row] for row in flipped)
    assert all(noisy[row] == labels[row] for row in set(range(200)) - set(flipped))
    assert label_noise.flip_labels(labels, 0.1, seed=0) == (noisy, flipped)  # the seed decides
    scores = label_noise.detection({1, 2, 3, 4}, {2, 3, 9})
    assert scores["precision"] == 0.5 and scores["recall"] == 2 / 3 and scores["flagged_and_flipped"] == 2


def test_label_noise_retrains_on_the_noisy_and_the_cleaned_file_per_seed_and_tests_the_difference(
    tmp_path, monkeypatch
):
    """The retraining step's wiring: one run per file and seed, each run's own figure read back, a finished
    run not launched again, and the sweep's Welch test over the two sets (the runs stand in here)."""
    import argparse

    label_noise = load_benchmark("label_noise")
    crossval_dir = tmp_path / "crossval"
    crossval_dir.mkdir()
    (crossval_dir / "train_cleaned.csv").write_text("text,label\n")
    noisy_file = tmp_path / "noisy_train.csv"
    figures = {("noisy", 0): 0.80, ("noisy", 1): 0.81, ("noisy", 2): 0.79,
               ("cleaned", 0): 0.85, ("cleaned", 1): 0.86, ("cleaned", 2): 0.84}  # fmt: skip
    launched = []

    def fake_run(command):
        train_file = Path(command[command.index("--train_file") + 1])
        seed = int(command[command.index("--seed") + 1])
        run_dir = Path(command[command.index("--output_dir") + 1])
        name = "cleaned" if train_file.name == "train_cleaned.csv" else "noisy"
        launched.append((name, seed))
        run_dir.mkdir(parents=True)
        (run_dir / "results.json").write_text(json.dumps({"eval_accuracy": figures[name, seed]}))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(label_noise.subprocess, "run", fake_run)
    args = argparse.Namespace(
        retrain_seeds=[0, 1, 2], output_dir=str(tmp_path), accelerate_config="cpu.yaml", recipe="full_ft",
        config="demo.yaml",
    )  # fmt: skip
    retrained = label_noise.retrain(
        args, ["--num_train_epochs", "1"], noisy_file, crossval_dir, "eval_accuracy"
    )
    assert sorted(launched) == sorted(figures)
    assert retrained["noisy"]["values"] == [0.80, 0.81, 0.79]
    assert retrained["cleaned"]["mean"] == pytest.approx(0.85) and retrained["cleaned"][
        "std"
    ] == pytest.approx(0.01)
    assert retrained["pair"]["a"] == "cleaned" and retrained["pair"]["difference"] == pytest.approx(0.05)
    assert (
        retrained["pair"]["p_value"] < 0.05
        and "larger than the seed-to-seed noise" in retrained["pair"]["verdict"]
    )
    line = label_noise.retrained_lines(retrained)[0]
    assert "noisy 0.8000 ± 0.0100, cleaned 0.8500 ± 0.0100" in line

    launched.clear()  # a rerun finds every run finished and launches none
    assert label_noise.retrain(args, [], noisy_file, crossval_dir, "eval_accuracy")["noisy"]["values"] == [
        0.8,
        0.81,
        0.79,
    ]
    assert launched == []


def test_fraction_of_peak_is_training_flops_per_real_token_times_tokens_per_s_over_the_probe():
    throughput = load_benchmark("throughput")
    shape = {"non_embedding_parameters": 10_000_000, "layers": 6, "hidden": 384, "intermediate": 1536}
    # 6 N + 12 L S H, S = 1,000 real tokens/s / 50 samples/s = 20 tokens an example
    assert throughput.training_flops_per_token(shape, 20) == 60_000_000 + 12 * 6 * 20 * 384
    peak = throughput.fraction_of_peak(
        {"train_tokens_per_s": 1000.0, "train_samples_per_s": 50.0}, shape, probe_gflops=100.0
    )
    assert peak["mean_real_tokens_per_example"] == 20 and peak["training_flops_per_token"] == 60_552_960
    assert peak["achieved_gflops"] == 60.55 and peak["fraction_of_peak"] == 0.6055
    assert throughput.matmul_probe(shape, "fp32", repeats=1) > 0


def test_the_precision_report_tests_bf16_against_fp32_and_its_table_shows_the_fraction_of_peak(tmp_path):
    throughput, publish = load_benchmark("throughput"), load_benchmark("publish")
    args = throughput.parse_args(["--precisions", "fp32", "bf16"])
    assert throughput.run_plan(args) == (
        "precision",
        [("fp32", "full_ft", ["--bf16", "false"], None), ("bf16", "full_ft", ["--bf16", "true"], None)],
    )
    assert "--learning_rate" not in throughput.common_recipe_args(args, 42, tmp_path)  # full_ft's own
    rows = []
    for seed, (fp32, bf16) in zip((1, 2, 3), ((0.80, 0.81), (0.82, 0.80), (0.79, 0.80)), strict=True):
        for name, accuracy, tokens in (("fp32", fp32, 800.0), ("bf16", bf16, 1200.0)):
            row = fake_run(name, seed, 40.0, tokens, 25.0, 50, accuracy)
            row["precision"], row["peak"] = name, {"fraction_of_peak": 0.3 if name == "fp32" else 0.2}
            rows.append(row)
    summary = throughput.summarise(rows)
    test = throughput.accuracy_test(summary)
    assert (test["a"], test["b"]) == ("bf16", "fp32") and test["p_value"] > 0.05
    record = {"command": "python benchmarks/throughput.py --precisions fp32 bf16", "created_at": "2026-12-04",
              "machine": "2 CPU cores (A CPU, AVX-512 BF16)", "git": {"commit": "abc1234", "dirty": True},
              "summary_by_size": {"1000": summary}, "accuracy_tests": {"1000": test}, "flops_formula": "6 N",
              "model_shape": {"non_embedding_parameters": 10, "layers": 6, "hidden": 384}}  # fmt: skip
    path = tmp_path / "precision.json"
    path.write_text(json.dumps(record))
    table = publish.render("precision", str(path))
    assert (
        "| 1,000 | bf16 | 1: 0.8100, 2: 0.8000, 3: 0.8000 | 0.8033 ± 0.0058 | 1200 | 1.50x | 20.0% |" in table
    )
    assert "not shown to differ" in table and "commit abc1234 (modified)" in table


def test_the_compile_table_shows_the_steady_steps_and_says_never_when_compiling_gains_nothing(tmp_path):
    publish = load_benchmark("publish")
    record = {"command": "python benchmarks/compile_steady.py", "created_at": "2026-12-04T17:15:52+00:00",
              "machine": publish.machine(), "git": {"commit": "abc1234", "dirty": False}, "precision": "bf16",
              "batches": 12, "batch_size": 32, "padded_lengths": [33, 40, 44], "warmup_s": {"eager": 50.0, "compiled": 301.0},
              "graphs_after_warmup": 3, "graphs_made_in_timed_steps": 0, "median_step_ms": {"eager": 3420.8, "compiled": 4399.9},
              "compiled_over_eager": 1.286, "steps_to_pay_back_compiling": None}  # fmt: skip
    path = tmp_path / "compile_steady.json"
    path.write_text(json.dumps(record))
    table = publish.render("compile", str(path))
    assert (
        "| bf16 | 12 of 32 (3: 33-44) | 3421 ms | 4400 ms | 1.286x | 50 s | 301 s (3; 0 more when timed) | never"
        in table
    )
    assert "commit abc1234" in table and "on 2026-12-04" in table
    path.write_text(json.dumps({**record, "steps_to_pay_back_compiling": 1234}))
    assert "| 1,234 |" in publish.render("compile", str(path))


def test_compile_steady_buckets_the_padded_lengths_when_asked(tiny_bert, tmp_path):
    from transformers import AutoTokenizer

    compile_steady = load_benchmark("compile_steady")
    rows = ["good", "a good film", "bad bad bad bad bad film", "good film", "a bad good film", "bad"]
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"{text},0\n" for text in rows))
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    common = ["--train_file", str(tmp_path / "train.csv"), "--steps", "3", "--batch_size", "2"]
    plain = compile_steady.batches(compile_steady.parse_args(common), tokenizer)
    bucketed = compile_steady.batches(
        compile_steady.parse_args([*common, "--pad_to_multiple_of", "8"]), tokenizer
    )
    assert len({batch["input_ids"].shape[1] for batch in plain}) == 3  # each batch padded to its own longest
    assert {batch["input_ids"].shape[1] for batch in bucketed} == {8}  # every one within the first bucket
