"""Where the wall time of a small fine-tune goes: data, model load, memory tracking, evaluation, steps.

    python benchmarks/small_run_profile.py --train_file ../shared/data/sst2/train.tsv \\
        --validation_file ../shared/data/sst2/dev.tsv --max_train_samples 1000

Runs `recipes/full_ft.py` in this process (one process, no accelerate launch, so the timers see
every call) with timers around the library functions and Trainer methods that make up a run, and
prints each phase's wall seconds and process CPU seconds with its share of the whole. Nested timers
are subtracted from their parents, so the rows add up to the run:

    setup          parsing, output-dir checks, seeding (what is left of main() outside the rows below)
    data           tokenizer, config.json, the decisions, reading, label checks, tokenizing (prepare)
    tracking       the W&B run and memory monitor starting (RecipeRun.start_tracking)
    model load     AutoModelForSequenceClassification.from_pretrained (load_model)
    trainer init   building the Trainer: optimizer, callbacks, accelerate preparation
    train steps    Trainer.training_step: forward, backward (the optimizer step is in "train other");
                   the first steps' tensor-level memory tracking runs inside them
    eval in train  Trainer.evaluate during training (eval_strategy)
    train other    the rest of Trainer.train: optimizer steps, data loading, callbacks, logging
    save           Trainer.save_model
    final eval     the evaluation after training
    results        predictions, results.json, the model card (RecipeRun.write_results)

The tracker's cost is what `--extra --track_memory false` saves: a second run with it shows it.
CPU seconds count both threads' work: on a machine shared with other jobs they are the steadier
figure, since wall seconds then include waiting for a core. `--extra` passes recipe arguments
(e.g. `--track_memory false`, `--eval_strategy no`) to see what each switch saves.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# (row, module, attribute path): the callables timed. Order is the order a run meets them.
TIMED = [
    ("data", "recipes_lib.run", "prepare"),
    ("tracking", "recipes_lib.run.recipe_run", "RecipeRun.start_tracking"),
    ("model load", "recipes_lib.modeling.loading", "load_model"),
    ("trainer init", "transformers", "Trainer.__init__"),
    ("train", "transformers", "Trainer.train"),
    ("train steps", "transformers", "Trainer.training_step"),
    ("evaluate", "transformers", "Trainer.evaluate"),
    ("save", "transformers", "Trainer.save_model"),
    ("results", "recipes_lib.run.recipe_run", "RecipeRun.write_results"),
]


class Timers:
    """Wall and CPU seconds per row, exclusive of the timed calls nested inside (a call stack)."""

    def __init__(self):
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.stack: list[list[float]] = []  # per open call: [child wall, child cpu]
        self.in_train = False

    def wrap(self, row: str, function):
        @functools.wraps(function)
        def timed(*args, **kwargs):
            name = row
            if row == "evaluate":
                name = "eval in train" if self.in_train else "final eval"
            if row == "train":
                self.in_train = True
            self.stack.append([0.0, 0.0])
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                child_wall, child_cpu = self.stack.pop()
                self.add(name, wall - child_wall, cpu - child_cpu)
                if self.stack:
                    self.stack[-1][0] += wall
                    self.stack[-1][1] += cpu
                if row == "train":
                    self.in_train = False

        return timed

    def add(self, name: str, wall: float, cpu: float) -> None:
        self.wall[name] = self.wall.get(name, 0.0) + wall
        self.cpu[name] = self.cpu.get(name, 0.0) + cpu
        self.calls[name] = self.calls.get(name, 0) + 1


def install_timers(timers: Timers) -> None:
    for row, module_name, path in TIMED:
        owner = importlib.import_module(module_name)
        *parents, attribute = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        setattr(owner, attribute, timers.wrap(row, getattr(owner, attribute)))


def load_recipe(name: str):
    """The recipe module, imported after the timers are in place (it binds load_model on import)."""
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", REPO_ROOT / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="full_ft")
    parser.add_argument("--model_name_or_path", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--train_file", required=True)
    parser.add_argument("--validation_file", required=True)
    parser.add_argument("--max_train_samples", type=int, default=1000)
    parser.add_argument("--num_train_epochs", type=float, default=2)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--output_dir", default="outputs/benchmarks/small_run_profile")
    parser.add_argument("--report_dir", default=str(REPO_ROOT / "benchmarks" / "results"))
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="passed to the recipe")
    return parser.parse_args(argv)


def recipe_argv(args: argparse.Namespace) -> list[str]:
    return [
        "--model_name_or_path", args.model_name_or_path,
        "--train_file", args.train_file, "--validation_file", args.validation_file,
        "--max_train_samples", str(args.max_train_samples),
        "--num_train_epochs", str(args.num_train_epochs), "--learning_rate", str(args.learning_rate),
        "--output_dir", args.output_dir, "--overwrite_output_dir", "true",
        "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true",
        *args.extra,
    ]  # fmt: skip


def rows(timers: Timers, total_wall: float, total_cpu: float) -> list[dict]:
    """The table's rows: each timed row, "train other" for train itself, "setup" for the rest."""
    names = ["data", "tracking", "model load", "trainer init", "train steps"]
    names += ["eval in train", "train", "save", "final eval", "results"]
    table = []
    for name in names:
        wall, cpu = timers.wall.get(name, 0.0), timers.cpu.get(name, 0.0)
        table.append({"phase": "train other" if name == "train" else name, "wall_s": wall, "cpu_s": cpu})
    table.insert(
        0,
        {
            "phase": "setup",
            "wall_s": total_wall - sum(row["wall_s"] for row in table),
            "cpu_s": total_cpu - sum(row["cpu_s"] for row in table),
        },
    )
    for row in table:
        row["wall_share"] = row["wall_s"] / total_wall
        row["cpu_share"] = row["cpu_s"] / total_cpu
    return table


def machine_description() -> str:
    import platform

    import torch

    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    names = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")]
    bf16 = "AVX-512 BF16" if "avx512_bf16" in text else "no AVX-512 BF16"
    cpu = names[0] if names else platform.machine()
    return f"{os.cpu_count()} CPU cores ({cpu}, {bf16}), torch {torch.__version__}"


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    timers = Timers()
    install_timers(timers)
    recipe = load_recipe(args.recipe)
    load_average = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    wall, cpu = time.perf_counter(), time.process_time()
    results = recipe.main(recipe_argv(args))
    total_wall, total_cpu = time.perf_counter() - wall, time.process_time() - cpu
    table = rows(timers, total_wall, total_cpu)
    command = "python benchmarks/small_run_profile.py " + " ".join(sys.argv[1:] if argv is None else argv)
    machine = machine_description()
    lines = [
        f"`{command}`",
        "",
        f"{machine}; load average {load_average:.1f} at the start" if load_average is not None else machine,
        "",
        "| phase | wall s | share | CPU s | share |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['phase']} | {r['wall_s']:.1f} | {100 * r['wall_share']:.1f}% | {r['cpu_s']:.1f} | {100 * r['cpu_share']:.1f}% |"
        for r in table
    ]
    lines.append(f"| **run** | {total_wall:.1f} | 100% | {total_cpu:.1f} | 100% |")
    lines.append("")
    lines.append(
        f"{results['train_steps']} steps, train_runtime_s {results['train_runtime_s']}, "
        f"eval_accuracy {results['eval_accuracy']:.4f}, pad_ratio {results['pad_ratio']}"
    )
    report = "\n".join(lines)
    print(report)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    report_dir = Path(args.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "command": command, "machine": machine, "created_at": stamp, "load_average_at_start": load_average,
        "total_wall_s": total_wall, "total_cpu_s": total_cpu, "phases": table,
        "results": {k: results.get(k) for k in ("train_steps", "train_runtime_s", "eval_accuracy", "pad_ratio")},
    }  # fmt: skip
    (report_dir / f"small_run_profile-{stamp}.json").write_text(json.dumps(record, indent=2) + "\n")
    (report_dir / f"small_run_profile-{stamp}.md").write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
