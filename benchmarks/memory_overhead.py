"""What memory tracking costs: the same run with `--track_memory true` and `false`, alternated.

    python benchmarks/memory_overhead.py [--recipe full_ft] [--repeats 2] [--config recipes/configs/demo.yaml]

Runs the recipe as a user does (`accelerate launch`, CPU config) `repeats` times each way,
alternating so that a machine that slows down over time slows both, and compares the Trainer's
train samples/s (training loop only: loading and evaluation excluded). Writes
benchmarks/results/memory_overhead.json and prints one line per run and the median overhead.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def run(recipe: str, config: str, track: bool, output_dir: Path) -> dict:
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO_ROOT / "accelerate_configs" / "cpu.yaml"),
        str(REPO_ROOT / "recipes" / f"{recipe}.py"), "--config", config,
        "--output_dir", str(output_dir), "--overwrite_output_dir", "true",
        "--report_to", "none", "--disable_tqdm", "true", "--track_memory", str(track).lower(),
    ]  # fmt: skip
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled"}
    completed = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=environment)
    if completed.returncode != 0:
        raise SystemExit(completed.stderr[-3000:])
    return json.loads((output_dir / "results.json").read_text())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="full_ft")
    parser.add_argument("--config", default="recipes/configs/demo.yaml")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--work_dir", default="outputs/memory_overhead")
    parser.add_argument("--out", default="benchmarks/results/memory_overhead.json")
    args = parser.parse_args(argv)

    speeds: dict[bool, list[float]] = {True: [], False: []}
    tracked_steps = None
    for repeat in range(args.repeats):
        for track in (True, False):
            results = run(args.recipe, args.config, track, Path(args.work_dir) / f"{track}-{repeat}")
            speeds[track].append(results["train_samples_per_s"])
            if track:
                tracked_steps = f"{results['memory_tracked_steps']} of {results['train_steps']}"
            print(
                f"track_memory={str(track).lower():5}  {results['train_samples_per_s']:.1f} samples/s",
                flush=True,
            )
    on, off = statistics.median(speeds[True]), statistics.median(speeds[False])
    overhead = off / on - 1  # extra time per sample when tracking
    summary = {
        "recipe": args.recipe,
        "config": args.config,
        "samples_per_s_tracked": speeds[True],
        "samples_per_s_untracked": speeds[False],
        "median_overhead": round(overhead, 4),
        "tracked_optimizer_steps": tracked_steps,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"median: {on:.1f} samples/s tracked, {off:.1f} untracked: {overhead:+.1%} time ({tracked_steps} steps tracked)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
