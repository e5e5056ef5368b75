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
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[42], help="run every way once per seed; report the means"
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument(
        "--ways",
        nargs="+",
        choices=list(BATCHING_WAYS),
        default=list(BATCHING_WAYS),
        help="batching ways to run",
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


def run_one(recipe: str, extra: list[str], seed: int, args: argparse.Namespace, output_dir: Path) -> dict:
    config = args.accelerate_config or ("single_gpu.yaml" if _has_cuda() else "cpu.yaml")
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO_ROOT / "accelerate_configs" / config),
        str(REPO_ROOT / "recipes" / f"{recipe}.py"), *common_recipe_args(args, seed, output_dir), *extra,
    ]  # fmt: skip
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT)
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
    return (
        f"{os.cpu_count()} CPU cores ({platform.machine()}), torch {torch.__version__}, {platform.platform()}"
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


def main(argv=None) -> int:
    args = parse_args(argv)
    work_dir = Path(args.work_dir)
    if args.recipes:
        plan = [(recipe, recipe, []) for recipe in args.recipes]
        kind = "recipes"
    elif args.switches:
        plan = [(name, "full_ft", extra) for name, extra in SWITCHES.items()]
        kind = "switches"
    else:
        plan = [(name, "full_ft", BATCHING_WAYS[name]) for name in args.ways]
        kind = "batching"
    rows = []
    # Seeds outermost, so a machine whose speed drifts during the run slows every way alike.
    for seed in args.seeds:
        for name, recipe, extra in plan:
            print(f"running {name}, seed {seed} ({recipe} {' '.join(extra)}) ...", flush=True)
            row = run_one(recipe, extra, seed, args, work_dir / f"{kind}-{name}-seed{seed}")
            row["benchmark_name"], row["seed"] = name, seed
            rows.append(row)
            print(
                f"  {row['train_samples_per_s']:.1f} samples/s, {row['train_tokens_per_s']:.0f} real tokens/s, "
                f"pad ratio {row['pad_ratio']:.3f}, accuracy {row['eval_accuracy']:.4f}",
                flush=True,
            )
    summary = summarise(rows)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    machine = machine_description()
    command = "python benchmarks/throughput.py " + " ".join(sys.argv[1:] if argv is None else argv)
    title = f"{kind} benchmark, {args.model_name_or_path}, {args.max_train_samples} train samples, {machine}"
    table = markdown(summary, title)
    report_dir = Path(args.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    report = {
        "command": command, "machine": machine, "created_at": stamp, "kind": kind,
        "summary": summary, "runs": [{k: v for k, v in r.items() if k != "config"} for r in rows],
    }  # fmt: skip
    (report_dir / f"{kind}-{stamp}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (report_dir / f"{kind}-{stamp}.md").write_text(f"`{command}`\n\n{table}\n")
    print("\n" + table)
    print(f"\nwritten: {report_dir / f'{kind}-{stamp}.json'} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
