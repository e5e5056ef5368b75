"""Side-by-side throughput: the usual way vs dynamic padding vs the recipe defaults, in one run.

    python benchmarks/throughput.py \\
        --train_file ../shared/data/sst2/train.tsv --validation_file ../shared/data/sst2/dev.tsv \\
        --max_train_samples 4000

Each way is one `accelerate launch recipes/<recipe>.py` process with identical model, data,
hyperparameters and seed; only the batching differs:

    (a) usual    every example padded to max_seq_length, random batches (transformers' run_glue.py defaults)
    (b) dynamic  each batch padded to its longest example, random batches
    (c) recipe   the recipe defaults: dynamic padding + batches grouped by length

`--seeds 42 43 44` runs every way once per seed and reports means (accuracy also per seed, with
its spread): one seed's accuracy on SST-2's 872 dev sentences moves by about a point with the
batch order alone. `--recipes full_ft adamw_8bit lora` compares step time across recipes (all with
the recipe defaults) instead, and `--switches` the cost of each throughput switch against
full_ft's defaults (eager instead of SDPA attention, activation checkpointing, torch.compile).

`--precisions fp32 bf16` trains full_ft (its own learning rate) once per precision and seed, in turn,
`--bf16 false` against `--bf16 true` (bf16 autocast), and tests the accuracy difference with Welch's
t-test (sweep/report.py's): whether the automatic precision may be bf16 on this machine.

`--sizes 500 1000 2000 4000 16000` repeats the batching ways at each training-set size (the size
axis of small-data runs); with `--baseline_src OLD/src` every recipe-default row is run twice, once
with the library at OLD/src on PYTHONPATH ("recipe@baseline"), so a change to the batching is
measured before and after in the same run; `--ways usual stock recipe` puts the stock grouping
(`--length_grouping stock`) beside full_ft's default (`wide`) in one library. `--max_steps` caps each run's steps (the usual way at
16,000 examples would take an hour on 2 CPU cores); pad ratio and tokens/s are then those of the
steps taken, which the shuffled batch order makes a fair sample of the epoch.

Reported from each run's results.json: samples/s, real (non-pad) tokens/s, pad ratio, wall time,
accuracy, and the ratio of each to the first row. Results are written as JSON and as a Markdown
table to --report_dir, with the machine they ran on (CPU model and flags, library versions, load:
benchmarks/publish.py's `machine`) and the commit read when the run started.

How close to the machine's limit each run trains (`fraction_of_peak`): the model's training FLOPs
per real token times its real tokens/s, over the matmul rate this machine reaches in the run's
precision, probed in this process just before each run (`matmul_probe`: the model's feed-forward
shape, 1,024 tokens, on as many threads as the runs get). FLOPs per real token, for a model of N
non-embedding parameters (the classifier included), L layers, hidden size H, and S the mean real
tokens per example (samples/s over real tokens/s; what each token attends over, padding not counted):

    forward  = 2 N + 4 L S H      (every weight once per token; QK^T and attention x V, S x H each)
    training = 3 x forward = 6 N + 12 L S H      (backward twice the forward)

Embedding lookups, softmax, LayerNorm and the optimizer step are left out: they are not matmuls.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

BATCHING_WAYS = {
    "usual": ["--pad_to_max_length", "true", "--train_sampling_strategy", "random"],
    "dynamic": ["--train_sampling_strategy", "random"],
    # transformers' own length grouping: the recipe row with full_ft's default (wide) beside it.
    "stock": ["--length_grouping", "stock"],
    "recipe": [],
}
# Each switch flipped away from its default, one at a time, on full_ft with the recipe defaults.
# (--torch_compile also turns off --track_memory, whose tensor tracking would keep it from compiling.)
SWITCHES = {
    "defaults": [],
    "eager_attention": ["--attn_implementation", "eager"],
    "activation_checkpointing": ["--activation_checkpointing", "true"],
    "torch_compile": ["--torch_compile", "true"],
}
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
TRAINER_DEFAULT_LEARNING_RATE = 5e-5  # TrainingArguments' and run_glue.py's


PRECISIONS = {"fp32": ["--bf16", "false"], "bf16": ["--bf16", "true"]}
PROBE_TOKENS = 1024  # rows of the probe's matmul: 32 examples of 32 tokens


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_name_or_path", default=MINILM)
    parser.add_argument("--train_file", help="local train data; default: the Hub's glue/sst2")
    parser.add_argument("--validation_file")
    parser.add_argument("--max_train_samples", type=int, default=4000)
    parser.add_argument("--max_eval_samples", type=int)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--per_device_train_batch_size", type=int, default=32)
    parser.add_argument(
        "--learning_rate",
        type=float,
        default=None,
        help="default: 5e-5 (the Trainer's and run_glue.py's) for the batching ways and switches; "
        "with --recipes each recipe's own default (LoRA's 1e-3 would not learn at 5e-5, nor full_ft at 1e-3)",
    )
    parser.add_argument("--num_train_epochs", type=float, default=1)
    parser.add_argument("--max_steps", type=int, help="cap every run at this many optimizer steps")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        help="training-set sizes to run the batching ways at (overrides --max_train_samples)",
    )
    parser.add_argument(
        "--baseline_src",
        help="also run every recipe-default row with this library source on PYTHONPATH (named recipe@baseline)",
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[42], help="run every way once per seed; report the means"
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument(
        "--ways",
        nargs="+",
        choices=list(BATCHING_WAYS),
        default=["usual", "dynamic", "recipe"],
        help="batching ways to run (default: usual dynamic recipe; stock when asked)",
    )
    what.add_argument(
        "--recipes",
        nargs="+",
        help="compare these recipes (recipe defaults, each at its own learning rate) instead of the batching ways",
    )
    what.add_argument(
        "--precisions",
        nargs="+",
        choices=list(PRECISIONS),
        help="train full_ft once per precision (--bf16 false / true) per seed, and test the accuracy difference",
    )
    what.add_argument(
        "--switches",
        action="store_true",
        help="flip each throughput switch alone on full_ft (recipe defaults at learning rate 5e-5) instead",
    )
    parser.add_argument(
        "--accelerate_config", default=None, help="default: cpu.yaml without a GPU, else single_gpu.yaml"
    )
    parser.add_argument("--work_dir", default="outputs/benchmarks", help="where the runs' outputs go")
    parser.add_argument("--report_dir", default=str(REPO_ROOT / "benchmarks" / "results"))
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="passed to every recipe run")
    return parser.parse_args(argv)


def data_arguments(args: argparse.Namespace) -> list[str]:
    """Local files when given (without a validation file the recipe holds out part of train), else SST-2."""
    if not args.train_file:
        return ["--dataset_name", "glue", "--dataset_config_name", "sst2"]
    validation = ["--validation_file", args.validation_file] if args.validation_file else []
    return ["--train_file", args.train_file, *validation]


def common_recipe_args(args: argparse.Namespace, seed: int, output_dir: Path) -> list[str]:
    data = data_arguments(args)
    optional = ["--max_eval_samples", str(args.max_eval_samples)] if args.max_eval_samples else []
    if args.max_steps:
        optional += ["--max_steps", str(args.max_steps)]
    learning_rate = args.learning_rate
    if learning_rate is None and not (args.recipes or args.precisions):
        learning_rate = TRAINER_DEFAULT_LEARNING_RATE  # one model, so one rate: the usual way's
    if learning_rate is not None:  # else each recipe trains at its own default
        optional += ["--learning_rate", str(learning_rate)]
    return [
        "--model_name_or_path", args.model_name_or_path, *data, *optional,
        "--max_train_samples", str(args.max_train_samples),
        "--max_seq_length", str(args.max_seq_length),
        "--per_device_train_batch_size", str(args.per_device_train_batch_size),
        "--num_train_epochs", str(args.num_train_epochs),
        "--seed", str(seed),
        "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none",
        "--output_dir", str(output_dir), "--overwrite_output_dir", "true", "--disable_tqdm", "true",
        *args.extra,
    ]  # fmt: skip


def run_one(
    recipe: str,
    extra: list[str],
    seed: int,
    args: argparse.Namespace,
    output_dir: Path,
    src: str | None = None,
) -> dict:
    """One recipe process; `src`: a library source directory put first on PYTHONPATH (the baseline)."""
    config = args.accelerate_config or ("single_gpu.yaml" if _has_cuda() else "cpu.yaml")
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve()), env.get("PYTHONPATH", "")])
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO_ROOT / "accelerate_configs" / config),
        str(REPO_ROOT / "recipes" / f"{recipe}.py"), *common_recipe_args(args, seed, output_dir), *extra,
    ]  # fmt: skip
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=env)
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"{recipe} {' '.join(extra)} failed:\n{completed.stderr[-4000:]}")
    results = json.loads((output_dir / "results.json").read_text())
    results["process_wall_s"] = round(wall, 1)
    return results


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def machine_description() -> str:
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    cpu_model, bf16 = platform.processor() or platform.machine(), "no AVX-512 BF16"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        text = cpuinfo.read_text()
        names = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")]
        cpu_model = names[0] if names else cpu_model
        bf16 = "AVX-512 BF16" if "avx512_bf16" in text else bf16
    return (
        f"{os.cpu_count()} CPU cores ({cpu_model}, {bf16}), torch {torch.__version__}, {platform.platform()}"
    )


def model_shape(model_name_or_path: str) -> dict:
    """N (non-embedding parameters, classifier included), L and H, from the model's config (meta device)."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from recipes_lib.modeling.sources import packaged_model_dir

    config = AutoConfig.from_pretrained(packaged_model_dir(model_name_or_path) or model_name_or_path)
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(config)
    non_embedding = sum(p.numel() for name, p in model.named_parameters() if "embeddings." not in name)
    return {
        "non_embedding_parameters": non_embedding,
        "layers": config.num_hidden_layers,
        "hidden": config.hidden_size,
        "intermediate": config.intermediate_size,
    }


def training_flops_per_token(shape: dict, tokens_per_example: float) -> float:
    """6 N + 12 L S H: the module docstring's formula."""
    return 6 * shape["non_embedding_parameters"] + 12 * shape["layers"] * tokens_per_example * shape["hidden"]


def matmul_probe(shape: dict, precision: str, repeats: int = 15) -> float:
    """GFLOP/s of this machine's matmul in `precision`, on the model's feed-forward shape: PROBE_TOKENS x H
    @ H x intermediate, on torch's threads (OMP_NUM_THREADS, as the runs get). The fastest of `repeats`:
    on cores shared with other jobs, the repeat least slowed by them is the nearest to the machine's limit."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    a = torch.randn(PROBE_TOKENS, shape["hidden"]).to(dtype)
    b = torch.randn(shape["hidden"], shape["intermediate"]).to(dtype)
    flops = 2 * PROBE_TOKENS * shape["hidden"] * shape["intermediate"]
    a @ b  # warm-up: oneDNN picks and caches its kernel
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(10):
            a @ b
        times.append((time.perf_counter() - started) / 10)
    return flops / min(times) / 1e9


def fraction_of_peak(row: dict, shape: dict, probe_gflops: float) -> dict:
    """The run's achieved training FLOP/s (real tokens only) and its fraction of the probed matmul rate."""
    tokens_per_example = row["train_tokens_per_s"] / row["train_samples_per_s"]
    per_token = training_flops_per_token(shape, tokens_per_example)
    achieved = row["train_tokens_per_s"] * per_token / 1e9
    return {
        "mean_real_tokens_per_example": round(tokens_per_example, 2),
        "training_flops_per_token": round(per_token),
        "achieved_gflops": round(achieved, 2),
        "probe_gflops": round(probe_gflops, 2),
        "fraction_of_peak": round(achieved / probe_gflops, 4),
    }


def accuracy_test(summary: list[dict]) -> dict | None:
    """Welch's t-test (sweep/report.py's) of the first two rows' accuracies over their seeds."""
    if len(summary) < 2:
        return None
    from recipes_workbench.sweep.report import compare_pair

    a, b = summary[1], summary[0]
    return compare_pair(
        {"recipe": a["name"], "validation": {"values": a["eval_accuracy_by_seed"]}},
        {"recipe": b["name"], "validation": {"values": b["eval_accuracy_by_seed"]}},
        "validation",
        "accuracy",
    )


def summarise(rows: list[dict]) -> list[dict]:
    """One line per way (or recipe): means over its seeds, and ratios of those means to the first way's."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["benchmark_name"], []).append(row)

    def mean(group, key):
        return statistics.mean(row[key] for row in group)

    means = []
    for name, group in groups.items():
        accuracies = [row["eval_accuracy"] for row in group]
        means.append(
            {
                "name": name,
                "seeds": [row["seed"] for row in group],
                "samples_per_s": mean(group, "train_samples_per_s"),
                "real_tokens_per_s": mean(group, "train_tokens_per_s"),
                "pad_ratio": mean(group, "pad_ratio"),
                "train_runtime_s": mean(group, "train_runtime_s"),
                "step_time_s": statistics.mean(
                    r["train_runtime_s"] / max(r["train_steps"], 1) for r in group
                ),
                "eval_accuracy": statistics.mean(accuracies),
                "eval_accuracy_by_seed": accuracies,
                "precision": group[0].get("precision"),
                "fraction_of_peak": statistics.mean(row["peak"]["fraction_of_peak"] for row in group)
                if all("peak" in row for row in group)
                else None,
                # Sample standard deviation across seeds: how much accuracy moves with the seed alone.
                "eval_accuracy_std": statistics.stdev(accuracies) if len(accuracies) > 1 else None,
            }
        )
    base = means[0]
    summary = []
    for line in means:  # ratios from the unrounded means; rounding is for the report only
        summary.append(
            {
                **line,
                "samples_per_s": round(line["samples_per_s"], 2),
                "real_tokens_per_s": round(line["real_tokens_per_s"], 1),
                "pad_ratio": round(line["pad_ratio"], 4),
                "train_runtime_s": round(line["train_runtime_s"], 1),
                "step_time_s": round(line["step_time_s"], 4),
                "eval_accuracy": round(line["eval_accuracy"], 4),
                "fraction_of_peak": None
                if line["fraction_of_peak"] is None
                else round(line["fraction_of_peak"], 4),
                "eval_accuracy_std": None
                if line["eval_accuracy_std"] is None
                else round(line["eval_accuracy_std"], 4),
                "samples_per_s_ratio": round(line["samples_per_s"] / base["samples_per_s"], 2),
                "real_tokens_per_s_ratio": round(line["real_tokens_per_s"] / base["real_tokens_per_s"], 2),
                "step_time_ratio": round(line["step_time_s"] / base["step_time_s"], 3),
                "accuracy_delta_points": round(100 * (line["eval_accuracy"] - base["eval_accuracy"]), 2),
            }
        )
    return summary


def markdown(summary: list[dict], title: str) -> str:
    seeds = len(summary[0]["seeds"])
    accuracy = "accuracy" if seeds == 1 else f"accuracy (mean ± std of {seeds} seeds)"
    header = (
        f"| run | samples/s | real tokens/s | pad ratio | train s | step s | {accuracy} "
        "| samples/s ratio | tokens/s ratio | step time ratio | accuracy Δ (points) | precision | fraction of peak |"
    )
    lines = [f"**{title}**", "", header, "|" + "---|" * 13]
    for s in summary:
        spread = f" ± {s['eval_accuracy_std']:.4f}" if s["eval_accuracy_std"] is not None else ""
        lines.append(
            f"| {s['name']} | {s['samples_per_s']:.1f} | {s['real_tokens_per_s']:.0f} | {s['pad_ratio']:.3f} "
            f"| {s['train_runtime_s']:.1f} | {s['step_time_s']:.3f} | {s['eval_accuracy']:.4f}{spread} "
            f"| {s['samples_per_s_ratio']:.2f}x | {s['real_tokens_per_s_ratio']:.2f}x | {s['step_time_ratio']:.3f} "
            f"| {s['accuracy_delta_points']:+.2f} | {s.get('precision') or '-'} "
            f"| {'-' if s.get('fraction_of_peak') is None else format(s['fraction_of_peak'], '.1%')} |"
        )
    if seeds > 1:
        lines += ["", "Accuracy by seed (" + ", ".join(str(seed) for seed in summary[0]["seeds"]) + "):", ""]
        lines += [
            f"- {s['name']}: " + ", ".join(f"{a:.4f}" for a in s["eval_accuracy_by_seed"]) for s in summary
        ]
    return "\n".join(lines)


def run_plan(args: argparse.Namespace) -> tuple[str, list[tuple[str, str, list[str], str | None]]]:
    """(kind, [(row name, recipe, extra arguments, library source or None)]) for one training-set size."""
    if args.recipes:
        return "recipes", [(recipe, recipe, [], None) for recipe in args.recipes]
    if args.precisions:
        return "precision", [(name, "full_ft", PRECISIONS[name], None) for name in args.precisions]
    if args.switches:
        return "switches", [(name, "full_ft", extra, None) for name, extra in SWITCHES.items()]
    plan = []
    for name in args.ways:
        if name == "recipe" and args.baseline_src:
            plan.append(("recipe@baseline", "full_ft", BATCHING_WAYS[name], args.baseline_src))
        plan.append((name, "full_ft", BATCHING_WAYS[name], None))
    return "batching", plan


def main(argv=None) -> int:
    from publish import git_commit, machine

    args = parse_args(argv)
    git = git_commit()  # at the start: the commit the runs run from (dirty: src or recipes changed)
    work_dir = Path(args.work_dir)
    kind, plan = run_plan(args)
    shape = model_shape(args.model_name_or_path)
    sizes = args.sizes or [args.max_train_samples]
    rows_by_size: dict[int, list[dict]] = {size: [] for size in sizes}
    # Seeds outermost, then sizes, so a machine whose speed drifts during the run slows every way alike.
    for seed in args.seeds:
        for size in sizes:
            args.max_train_samples = size
            for name, recipe, extra, src in plan:
                print(
                    f"running {name}, {size} examples, seed {seed} ({recipe} {' '.join(extra)}) ...",
                    flush=True,
                )
                output_dir = work_dir / f"{kind}-{size}-{name.replace('@', '-')}-seed{seed}"
                precision = "bf16" if extra[-2:] == ["--bf16", "true"] else "fp32"
                probe = None if _has_cuda() else matmul_probe(shape, precision)
                row = run_one(recipe, extra, seed, args, output_dir, src)
                if probe is not None and row.get("precision") in ("fp32", "bf16"):
                    # the probe of the precision the run reports it computed in (the automatic one when not asked)
                    if row["precision"] != precision:
                        probe = matmul_probe(shape, row["precision"])
                    row["peak"] = fraction_of_peak(row, shape, probe)
                row["benchmark_name"], row["seed"], row["train_size"] = name, seed, size
                rows_by_size[size].append(row)
                print(
                    f"  {row['train_samples_per_s']:.1f} samples/s, {row['train_tokens_per_s']:.0f} real tokens/s, "
                    f"pad ratio {row['pad_ratio']:.3f}, accuracy {row['eval_accuracy']:.4f}"
                    + (f", {row['peak']['fraction_of_peak']:.1%} of peak" if "peak" in row else ""),
                    flush=True,
                )
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    description = machine_description()
    command = "python benchmarks/throughput.py " + " ".join(sys.argv[1:] if argv is None else argv)
    # Ratios within each size, to its first row (the usual way when the batching ways run).
    summaries = {size: summarise(rows) for size, rows in rows_by_size.items()}
    steps = f", at most {args.max_steps} steps" if args.max_steps else ""
    tables = [
        markdown(
            summary,
            f"{kind} benchmark, {args.model_name_or_path}, {size} train samples{steps}, {description}",
        )
        for size, summary in summaries.items()
    ]
    tests = (
        {size: accuracy_test(summary) for size, summary in summaries.items()} if kind == "precision" else {}
    )
    tables += [
        f"{size} train samples, accuracy {test['a']} vs {test['b']} ({test['test']}): {test['verdict']}."
        for size, test in tests.items()
        if test
    ]
    table = "\n\n".join(tables)
    report_dir = Path(args.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    runs = [{k: v for k, v in r.items() if k != "config"} for rows in rows_by_size.values() for r in rows]
    report = {
        "command": command, "machine": description, "machine_details": machine(), "git": git,
        "created_at": stamp, "kind": kind, "model_shape": shape, "flops_formula": "6 N + 12 L S H per real token",
        "accuracy_tests": {str(size): test for size, test in tests.items()} or None,
        "summary": summaries[sizes[0]] if len(sizes) == 1 else None,
        "summary_by_size": {str(size): summary for size, summary in summaries.items()},
        "runs": runs,
    }  # fmt: skip
    (report_dir / f"{kind}-{stamp}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (report_dir / f"{kind}-{stamp}.md").write_text(f"`{command}`\n\n{table}\n")
    print("\n" + table)
    print(f"\nwritten: {report_dir / f'{kind}-{stamp}.json'} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
