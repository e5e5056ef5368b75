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

`--sizes 500 1000 2000 4000 16000` repeats the batching ways at each training-set size (the size
axis of small-data runs); with `--baseline_src OLD/src` every recipe-default row is run twice, once
with the library at OLD/src on PYTHONPATH ("recipe@baseline"), so a change to the batching is
measured before and after in the same run; `--ways usual stock recipe` puts the stock grouping
(`--length_grouping stock`) beside full_ft's default (`wide`) in one library. `--max_steps` caps each run's steps (the usual way at
16,000 examples would take an hour on 2 CPU cores); pad ratio and tokens/s are then those of the
steps taken, which the shuffled batch order makes a fair sample of the epoch.

Reported from each run's results.json: samples/s, real (non-pad) tokens/s, pad ratio, wall time,
accuracy, and the ratio of each to the first row. Results are written as JSON and as a Markdown
table to --report_dir, with the machine they ran on.
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
    if learning_rate is None and not args.recipes:
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
        "| samples/s ratio | tokens/s ratio | step time ratio | accuracy Δ (points) |"
    )
    lines = [f"**{title}**", "", header, "|" + "---|" * 11]
    for s in summary:
        spread = f" ± {s['eval_accuracy_std']:.4f}" if s["eval_accuracy_std"] is not None else ""
        lines.append(
            f"| {s['name']} | {s['samples_per_s']:.1f} | {s['real_tokens_per_s']:.0f} | {s['pad_ratio']:.3f} "
            f"| {s['train_runtime_s']:.1f} | {s['step_time_s']:.3f} | {s['eval_accuracy']:.4f}{spread} "
            f"| {s['samples_per_s_ratio']:.2f}x | {s['real_tokens_per_s_ratio']:.2f}x | {s['step_time_ratio']:.3f} "
            f"| {s['accuracy_delta_points']:+.2f} |"
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
    if args.switches:
        return "switches", [(name, "full_ft", extra, None) for name, extra in SWITCHES.items()]
    plan = []
    for name in args.ways:
        if name == "recipe" and args.baseline_src:
            plan.append(("recipe@baseline", "full_ft", BATCHING_WAYS[name], args.baseline_src))
        plan.append((name, "full_ft", BATCHING_WAYS[name], None))
    return "batching", plan


def main(argv=None) -> int:
    args = parse_args(argv)
    work_dir = Path(args.work_dir)
    kind, plan = run_plan(args)
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
                row = run_one(recipe, extra, seed, args, output_dir, src)
                row["benchmark_name"], row["seed"], row["train_size"] = name, seed, size
                rows_by_size[size].append(row)
                print(
                    f"  {row['train_samples_per_s']:.1f} samples/s, {row['train_tokens_per_s']:.0f} real tokens/s, "
                    f"pad ratio {row['pad_ratio']:.3f}, accuracy {row['eval_accuracy']:.4f}",
                    flush=True,
                )
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    machine = machine_description()
    command = "python benchmarks/throughput.py " + " ".join(sys.argv[1:] if argv is None else argv)
    # Ratios within each size, to its first row (the usual way when the batching ways run).
    summaries = {size: summarise(rows) for size, rows in rows_by_size.items()}
    steps = f", at most {args.max_steps} steps" if args.max_steps else ""
    tables = [
        markdown(
            summary, f"{kind} benchmark, {args.model_name_or_path}, {size} train samples{steps}, {machine}"
        )
        for size, summary in summaries.items()
    ]
    table = "\n\n".join(tables)
    report_dir = Path(args.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    runs = [{k: v for k, v in r.items() if k != "config"} for rows in rows_by_size.values() for r in rows]
    report = {
        "command": command, "machine": machine, "created_at": stamp, "kind": kind,
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
