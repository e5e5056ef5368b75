"""Where a training step's time goes, per recipe: forward, backward and the optimizer step.

    python benchmarks/step_profile.py --train_file ../shared/data/sst2/train.tsv \\
        --validation_file ../shared/data/sst2/dev.tsv --recipes full_ft adamw_8bit lora

`throughput.py --recipes` gives each recipe's whole step time from a real run; this script says
why they differ. Each recipe builds its model and optimizer with its own code: its `main()` runs
up to the Trainer, and the model and optimizer it hands to `RecipeTrainer(...)` are taken (no optimizer:
what the Trainer builds for `--optim`, fused AdamW). Then each trains on the same batches (the recipe's tokenization and collator, a seeded random order) in a plain loop
that times each phase, synchronising the GPU when there is one. (The Trainer also clips gradients,
max_grad_norm 1.0, before each optimizer step; that is not timed here.) The first `--warmup_steps` are not
timed (they allocate optimizer state and warm kernels). The timed steps are then run once more back to
back, the GPU synchronised only at both ends: `steady_step_ms`, the step time without the phase
clock's synchronisations (the figure gpu_check.py's MFU is computed from). Memory tracking is off
(`--track_memory false`). Then `torch.profiler` records a few steps and the slowest operators are
listed by their own (self) time, labelled by phase.

On CPU, a recipe that trains the whole model gets its fraction of the machine's peak from the steady
step: real (non-pad) tokens per step over the steady step time, times throughput.py's training FLOPs
per real token (6 N + 12 L S H), over throughput.py's matmul probe in the recipe's precision, run just
before the recipe. (LoRA and QLoRA compute no gradient for the frozen weights: 6 N would overstate their
work, so they get none.)

Written to --report_dir as step_profile-<time>.json and .md, with the machine they ran on; the JSON
after every recipe, so a run stopped part way keeps the recipes done. A recipe that fails is a row
that says why, and the next recipe runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

PHASES = ("forward", "backward", "optimizer_step")


class StepProfileError(Exception):
    """Bad input (no such recipe, too little data): main() prints it and returns 2; callers that import
    this module get an exception they can catch, not a SystemExit."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=["full_ft", "adamw_8bit", "lora"])
    parser.add_argument("--model_name_or_path", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--train_file", help="local train data; default: the Hub's glue/sst2")
    parser.add_argument("--validation_file")
    parser.add_argument("--per_device_train_batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--warmup_steps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per recipe")
    parser.add_argument("--profiled_steps", type=int, default=3)
    parser.add_argument("--top_ops", type=int, default=8, help="operators listed per recipe")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--report_dir", default=str(REPO_ROOT / "benchmarks" / "results"))
    return parser.parse_args(argv)


def load_recipe(name: str):
    path = REPO_ROOT / "recipes" / f"{name}.py"
    if not path.is_file():
        raise StepProfileError(
            f"--recipes names '{name}', but there is no {path}. Pick a script of recipes/."
        )
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_recipe_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _ReachedTrainer(Exception):
    """Raised where the recipe builds its Trainer: everything before it has run."""


def recipe_model_and_optimizer(recipe, argv: list[str]):
    """The model and optimizer the recipe's own main() builds, and what its `prepare` returned
    (arguments, data, tokenizer)."""
    from unittest import mock

    handed = {}
    prepare = recipe.prepare

    def remember_prepared(*args, **kwargs):
        handed["prepared"] = prepare(*args, **kwargs)
        return handed["prepared"]

    def take(model, optimizers=(None, None), **kwargs):
        handed.update(model=model, optimizer=optimizers[0])
        raise _ReachedTrainer

    with (
        mock.patch.object(recipe, "prepare", remember_prepared),
        mock.patch.object(recipe, "RecipeTrainer", take),
        contextlib.suppress(_ReachedTrainer),
    ):
        recipe.main(argv)
    return handed["prepared"], handed["model"], handed["optimizer"]


def recipe_argv(recipe, args: argparse.Namespace, work_dir: Path) -> list[str]:
    from throughput import data_arguments

    return [
        "--model_name_or_path", args.model_name_or_path, *data_arguments(args),
        "--max_train_samples", str(args.per_device_train_batch_size * (args.warmup_steps + args.steps + args.profiled_steps)),
        "--max_seq_length", str(args.max_seq_length),
        "--per_device_train_batch_size", str(args.per_device_train_batch_size),
        "--seed", str(args.seed), "--report_to", "none", "--output_dir", str(work_dir / recipe.SPEC.name),
        "--overwrite_output_dir", "true", "--track_memory", "false",
    ]  # fmt: skip


def trainer_optimizer(model, arguments):
    """What the Trainer builds for --optim when the recipe hands it no optimizer."""
    from transformers import Trainer

    from recipes_lib.modeling.adamw_8bit import decay_parameter_groups

    optimizer_class, kwargs = Trainer.get_optimizer_cls_and_kwargs(arguments.training, model)
    groups = decay_parameter_groups(model, arguments.training.weight_decay)
    return optimizer_class(groups, **kwargs)


def training_batches(prepared, count: int):
    """`count` batches the way the recipe makes them: its tokenization, its collator, a seeded order.

    Also returns the median time the collator took per batch: the work that dataloader workers
    would take off the training loop.
    """
    import torch

    from recipes_lib.data.tokenize import LENGTH_COLUMN, padding_collator

    arguments = prepared.arguments
    train = prepared.data.tokenized["train"].remove_columns(LENGTH_COLUMN)  # the sampler's, not the model's
    collate = padding_collator(prepared.tokenizer, arguments.data, arguments.training.device)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(arguments.training.seed))
    size = arguments.training.per_device_train_batch_size
    if len(train) < count * size:
        raise StepProfileError(
            f"step_profile needs {count * size} training examples ({count} batches of {size}: warm-up, "
            f"timed and profiled steps) and the data has {len(train)}. Give more data or fewer --steps."
        )
    batches, collate_seconds = [], []
    for step in range(count):
        examples = [train[int(i)] for i in order[step * size : (step + 1) * size]]
        started = time.perf_counter()  # what a DataLoader worker would do: pad one batch
        batches.append(collate(examples))
        collate_seconds.append(time.perf_counter() - started)
    return batches, statistics.median(collate_seconds)


class PhaseClock:
    """Wall time of each phase of each step; waits for the GPU so its time lands in the right phase."""

    def __init__(self, device, bf16: bool):
        import torch

        self.synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.autocast = lambda: torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)
        self.times: dict[str, list[float]] = {phase: [] for phase in PHASES}

    def step(self, model, optimizer, batch, record: bool, synchronize: bool = True) -> None:
        if not synchronize:  # the steady-state pass: no waits between phases
            with self.autocast():
                loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return
        self.synchronize()
        started = time.perf_counter()
        with self.autocast():  # the Trainer's mixed precision, as accelerate applies it
            loss = model(**batch).loss
        self.synchronize()
        forward_done = time.perf_counter()
        loss.backward()
        self.synchronize()
        backward_done = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.synchronize()
        finished = time.perf_counter()
        if record:
            self.times["forward"].append(forward_done - started)
            self.times["backward"].append(backward_done - forward_done)
            self.times["optimizer_step"].append(finished - backward_done)


def profiled_step(model, optimizer, batch, clock: PhaseClock) -> None:
    from torch.profiler import record_function

    with record_function("forward"), clock.autocast():
        loss = model(**batch).loss
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer_step"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def top_operators(profile, count: int, steps: int) -> list[dict]:
    """The operators with the most self time (time in the operator itself, not in what it calls).

    On a GPU, the device time of the kernels each operator launched; the kernels' own entries and
    the phase labels are left out, so no time is counted twice.
    """
    from torch.autograd import DeviceType

    events = [
        e
        for e in profile.key_averages()
        if e.device_type == DeviceType.CPU
        and not getattr(e, "is_user_annotation", False)
        and e.key not in PHASES
        and not e.key.startswith("ProfilerStep")
    ]
    use_cuda = any(getattr(e, "self_device_time_total", 0) for e in events)
    attribute = "self_device_time_total" if use_cuda else "self_cpu_time_total"
    total = sum(getattr(e, attribute) for e in events) or 1
    ranked = sorted(events, key=lambda e: getattr(e, attribute), reverse=True)[:count]
    return [
        {
            "operator": e.key,
            "self_ms_per_step": round(getattr(e, attribute) / 1000 / steps, 2),
            "share": round(getattr(e, attribute) / total, 3),
            "calls": e.count,  # over all profiled steps
        }
        for e in ranked
    ]


def profile_recipe(name: str, args: argparse.Namespace, work_dir: Path) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from recipes_lib.modeling.loading import count_parameters

    recipe = load_recipe(name)
    torch.manual_seed(args.seed)
    prepared, model, optimizer = recipe_model_and_optimizer(recipe, recipe_argv(recipe, args, work_dir))
    arguments = prepared.arguments
    total_steps = args.warmup_steps + args.steps + args.profiled_steps
    batches, collate_seconds = training_batches(prepared, total_steps)
    device = arguments.training.device
    if next(model.parameters()).device != device:  # QLoRA's 4-bit model is built on the device
        model = model.to(device)
    model.train()
    optimizer = optimizer or trainer_optimizer(model, arguments)
    batches = [{key: value.to(device) for key, value in batch.items()} for batch in batches]

    clock = PhaseClock(device, bool(arguments.training.bf16))
    for step, batch in enumerate(batches[: args.warmup_steps + args.steps]):
        clock.step(model, optimizer, batch, record=step >= args.warmup_steps)

    # The same timed steps back to back, synchronised at both ends only: the steady-state step.
    clock.synchronize()
    started = time.perf_counter()
    for batch in batches[args.warmup_steps : args.warmup_steps + args.steps]:
        clock.step(model, optimizer, batch, record=False, synchronize=False)
    clock.synchronize()
    steady_step_seconds = (time.perf_counter() - started) / max(args.steps, 1)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as recorded:
        for batch in batches[args.warmup_steps + args.steps :]:
            profiled_step(model, optimizer, batch, clock)

    medians = {phase: statistics.median(values) for phase, values in clock.times.items()}
    total, trainable = count_parameters(model)
    peak = None
    if device.type == "cpu" and trainable == total:
        from throughput import fraction_of_peak, matmul_probe, model_shape

        shape = model_shape(args.model_name_or_path)
        probe = matmul_probe(shape, "bf16" if arguments.training.bf16 else "fp32")
        timed = batches[args.warmup_steps : args.warmup_steps + args.steps]
        real_tokens = statistics.mean(int(batch["attention_mask"].sum()) for batch in timed)
        examples = statistics.mean(len(batch["attention_mask"]) for batch in timed)
        rates = {
            "train_tokens_per_s": real_tokens / steady_step_seconds,
            "train_samples_per_s": examples / steady_step_seconds,
        }
        peak = fraction_of_peak(rates, shape, probe)
    return {
        "recipe": name,
        "status": "ok",
        "optimizer": type(optimizer).__name__ + (" (fused)" if _is_fused(optimizer) else ""),
        "bf16": bool(arguments.training.bf16),
        "params_trainable": trainable,
        "mean_tokens_per_batch": round(statistics.mean(b["attention_mask"].numel() for b in batches)),
        "median_ms": {phase: round(1000 * value, 2) for phase, value in medians.items()},
        "median_step_ms": round(1000 * sum(medians.values()), 2),
        "timed_steps": args.steps,
        "steady_step_ms": round(1000 * steady_step_seconds, 3),
        "median_collate_ms": round(1000 * collate_seconds, 3),
        "peak": peak,
        "top_operators": top_operators(recorded, args.top_ops, args.profiled_steps),
    }


def _is_fused(optimizer) -> bool:
    return any(group.get("fused") for group in optimizer.param_groups)


def markdown(rows: list[dict], title: str, command: str, profiled_steps: int) -> str:
    failed = [row for row in rows if row.get("status") == "failed"]
    rows = [row for row in rows if row.get("status") != "failed"]
    if not rows:
        return "\n".join(
            [f"`{command}`", "", f"**{title}**", ""] + [f"- {r['recipe']}: {r['note']}" for r in failed]
        )
    base = rows[0]
    lines = [
        f"`{command}`",
        "",
        f"**{title}**",
        "",
        "Median milliseconds per step (same batches for every recipe):",
        "",
        "| recipe | optimizer | trainable | forward | backward | optimizer step | step | step ratio to "
        f"{base['recipe']} | steady step | collate one batch | fraction of peak |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ms = row["median_ms"]
        lines.append(
            f"| {row['recipe']} | {row['optimizer']} | {row['params_trainable']:,} | {ms['forward']:.1f} "
            f"| {ms['backward']:.1f} | {ms['optimizer_step']:.1f} | {row['median_step_ms']:.1f} "
            f"| {row['median_step_ms'] / base['median_step_ms']:.3f} | {row['steady_step_ms']:.1f} "
            f"| {row['median_collate_ms']:.2f} | {'-' if not row.get('peak') else format(row['peak']['fraction_of_peak'], '.1%')} |"
        )
    lines += [f"\n{row['recipe']}: failed: {row['note']}" for row in failed]
    for row in rows:
        lines += [
            "",
            f"{row['recipe']}: operators with the most self time (torch.profiler)",
            "",
            f"| operator | ms per step | share | calls in {profiled_steps} steps |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| `{op['operator']}` | {op['self_ms_per_step']:.2f} | {op['share']:.1%} | {op['calls']} |"
            for op in row["top_operators"]
        ]
    return "\n".join(lines)


def main(argv=None) -> int:
    from publish import git_commit
    from publish import machine as machine_details
    from throughput import machine_description

    args = parse_args(argv)
    git = git_commit()  # at the start: the commit profiled
    work_dir = Path("outputs/benchmarks/step_profile")
    machine = machine_description()
    command = "python benchmarks/step_profile.py " + " ".join(sys.argv[1:] if argv is None else argv)
    title = (
        f"step profile, {args.model_name_or_path}, batch {args.per_device_train_batch_size}, "
        f"{args.steps} timed steps, {machine}"
    )
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    report_dir = Path(args.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    json_path, markdown_path = (
        report_dir / f"step_profile-{stamp}.json",
        report_dir / f"step_profile-{stamp}.md",
    )
    rows = []
    for name in args.recipes:
        print(f"profiling {name} ...", flush=True)
        try:
            row = profile_recipe(name, args, work_dir)
        except StepProfileError as error:  # bad input: every recipe would fail alike
            print(error, file=sys.stderr)
            return 2
        except Exception as error:  # this recipe's failure, not a reason to lose the others
            detail = " ".join(str(error).split())[:300]
            row = {"recipe": name, "status": "failed", "note": f"{type(error).__name__}: {detail}"}
            print(f"  {name} failed: {row['note']}", flush=True)
        rows.append(row)
        if row.get("status") != "failed":
            ms = row["median_ms"]
            print(
                f"  forward {ms['forward']:.1f} ms, backward {ms['backward']:.1f} ms, "
                f"optimizer step {ms['optimizer_step']:.1f} ms; steady step {row['steady_step_ms']:.1f} ms"
                + (f", {row['peak']['fraction_of_peak']:.1%} of peak" if row.get("peak") else ""),
                flush=True,
            )
        report = {"command": command, "machine": machine, "machine_details": machine_details(), "git": git,
                  "created_at": stamp, "rows": rows}  # fmt: skip
        _write_atomically(json_path, json.dumps(report, indent=2) + "\n")
    table = markdown(rows, title, command, args.profiled_steps)
    _write_atomically(markdown_path, table + "\n")
    print("\n" + table)
    print(f"\nwritten: {json_path} and .md")
    return 0 if all(row.get("status") != "failed" for row in rows) else 1


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    temporary.replace(path)


if __name__ == "__main__":
    sys.exit(main())
