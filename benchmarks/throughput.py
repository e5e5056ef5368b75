"""Side-by-side throughput: the usual way vs dynamic padding vs the recipe defaults, in one run.

    python benchmarks/throughput.py \\
        --train_file ../shared/data/sst2/train.tsv --validation_file ../shared/data/sst2/dev.tsv \\
        --max_train_samples 4000

Each way is one `accelerate launch recipes/<recipe>.py` process with identical model, data,
hyperparameters and seed; only the batching differs:

    (a) usual    every example padded to max_seq_length, random batches (transformers' run_glue.py defaults)
    (b) dynamic  each batch padded to its longest example, random batches
    (c) recipe   the recipe defaults: dynamic padding + batches grouped by length

`--recipes full_ft adamw_8bit lora` instead compares step time across recipes (all with the recipe
defaults). Reported from each run's results.json: samples/s, real (non-pad) tokens/s, pad ratio,
wall time, accuracy, and the ratio of each to the first row. Results are written as JSON and as a
Markdown table to --report_dir, with the machine they ran on.
"""

from __future__ import annotations

import argparse
import json
import platform
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
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_name_or_path", default=MINILM)
    parser.add_argument("--train_file", help="local train data; default: the Hub's glue/sst2")
    parser.add_argument("--validation_file")
    parser.add_argument("--max_train_samples", type=int, default=4000)
    parser.add_argument("--max_eval_samples", type=int)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--per_device_train_batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--num_train_epochs", type=float, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--recipes",
        nargs="+",
        help="compare these recipes (recipe defaults) instead of the three batching ways",
    )
    parser.add_argument(
        "--accelerate_config", default=None, help="default: cpu.yaml without a GPU, else single_gpu.yaml"
    )
    parser.add_argument("--work_dir", default="outputs/benchmarks", help="where the runs' outputs go")
    parser.add_argument("--report_dir", default=str(REPO_ROOT / "benchmarks" / "results"))
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="passed to every recipe run")
    return parser.parse_args(argv)


def common_recipe_args(args: argparse.Namespace, output_dir: Path) -> list[str]:
    data = (
        ["--train_file", args.train_file, "--validation_file", args.validation_file]
        if args.train_file
        else ["--dataset_name", "glue", "--dataset_config_name", "sst2"]
    )
    extra_eval = ["--max_eval_samples", str(args.max_eval_samples)] if args.max_eval_samples else []
    return [
        "--model_name_or_path", args.model_name_or_path, *data, *extra_eval,
        "--max_train_samples", str(args.max_train_samples),
        "--max_seq_length", str(args.max_seq_length),
        "--per_device_train_batch_size", str(args.per_device_train_batch_size),
        "--learning_rate", str(args.learning_rate),
        "--num_train_epochs", str(args.num_train_epochs),
        "--seed", str(args.seed),
        "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none",
        "--output_dir", str(output_dir), "--overwrite_output_dir", "true", "--disable_tqdm", "true",
        *args.extra,
    ]  # fmt: skip


def run_one(recipe: str, extra: list[str], args: argparse.Namespace, output_dir: Path) -> dict:
    config = args.accelerate_config or ("single_gpu.yaml" if _has_cuda() else "cpu.yaml")
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO_ROOT / "accelerate_configs" / config),
        str(REPO_ROOT / "recipes" / f"{recipe}.py"), *common_recipe_args(args, output_dir), *extra,
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
    import os

    return (
        f"{os.cpu_count()} CPU cores ({platform.machine()}), torch {torch.__version__}, {platform.platform()}"
    )


def summarise(rows: list[dict]) -> list[dict]:
    base = rows[0]
    summary = []
    for row in rows:
        step_s = row["train_runtime_s"] / max(row["train_steps"], 1)
        base_step_s = base["train_runtime_s"] / max(base["train_steps"], 1)
        summary.append(
            {
                "name": row["benchmark_name"],
                "samples_per_s": row["train_samples_per_s"],
                "real_tokens_per_s": row["train_tokens_per_s"],
                "pad_ratio": row["pad_ratio"],
                "train_runtime_s": row["train_runtime_s"],
                "step_time_s": round(step_s, 4),
                "eval_accuracy": row["eval_accuracy"],
                "samples_per_s_ratio": round(row["train_samples_per_s"] / base["train_samples_per_s"], 2),
                "real_tokens_per_s_ratio": round(row["train_tokens_per_s"] / base["train_tokens_per_s"], 2),
                "step_time_ratio": round(step_s / base_step_s, 3),
                "accuracy_delta_points": round(100 * (row["eval_accuracy"] - base["eval_accuracy"]), 2),
            }
        )
    return summary


def markdown(summary: list[dict], title: str) -> str:
    header = (
        "| run | samples/s | real tokens/s | pad ratio | train s | step s | accuracy "
        "| samples/s ratio | tokens/s ratio | step time ratio | accuracy Δ (points) |"
    )
    lines = [f"**{title}**", "", header, "|" + "---|" * 11]
    for s in summary:
        lines.append(
            f"| {s['name']} | {s['samples_per_s']:.1f} | {s['real_tokens_per_s']:.0f} | {s['pad_ratio']:.3f} "
            f"| {s['train_runtime_s']:.1f} | {s['step_time_s']:.3f} | {s['eval_accuracy']:.4f} "
            f"| {s['samples_per_s_ratio']:.2f}x | {s['real_tokens_per_s_ratio']:.2f}x | {s['step_time_ratio']:.3f} "
            f"| {s['accuracy_delta_points']:+.2f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    work_dir = Path(args.work_dir)
    if args.recipes:
        plan = [(recipe, recipe, []) for recipe in args.recipes]
        kind = "recipes"
    else:
        plan = [(name, "full_ft", extra) for name, extra in BATCHING_WAYS.items()]
        kind = "batching"
    rows = []
    for name, recipe, extra in plan:
        print(f"running {name} ({recipe} {' '.join(extra)}) ...", flush=True)
        row = run_one(recipe, extra, args, work_dir / f"{kind}-{name}")
        row["benchmark_name"] = name
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
