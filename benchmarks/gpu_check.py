"""GPU check: every recipe on bert-base and bert-large shapes, measured against the memory planner.

    bash benchmarks/gpu_check.sh                      # on an H200-class GPU machine, < 8 minutes
    python benchmarks/gpu_check.py --cpu --tiny        # the same code path on a CPU, in about a minute
    bash benchmarks/gpu_check.sh --catalogue           # every catalogue model instead (gpu_catalogue.py)

No downloads: each model is a randomly initialised BERT built from its configuration (bert-base:
12 layers x 768, bert-large: 24 x 1024) with a WordPiece vocabulary of placeholder words, and the
data are synthetic sentences exactly `seq` tokens long (`--pad_to_max_length`), so every step is
batch x seq real tokens. Random weights change nothing about speed or memory.

Each recipe runs as the user runs it (`accelerate launch recipes/<recipe>.py`, bf16, batch 32,
seq 128, a fixed number of steps) and its results.json gives throughput and measured memory. The
table printed last has, per model and recipe: samples/s, tokens/s, MFU and peak memory measured vs
predicted by `recipes-lib plan`. Before it, `step_profile.py` times forward, backward and the
optimizer step of full_ft, adamw_8bit and lora on the first model (bert-base), for the step-time
targets (8-bit AdamW's step against fused AdamW's, LoRA's step against full fine-tuning's).

MFU = tokens/s x FLOPs per token / peak FLOP/s, with FLOPs per token = 6 x (non-embedding
parameters) + 12 x layers x hidden x seq (attention scores and weighted values, forward and
backward), the usual transformer estimate; peak = the card's dense bf16 rate (989 TFLOP/s for
H100/H200 SXM, by the datasheet). LoRA does not compute weight gradients of frozen matrices, so
the same formula overstates its work by up to 1/3: its MFU is comparable across recipes as
"useful model FLOPs", not as hardware utilisation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "src"))

MODEL_SHAPES = {
    # name: (hidden, layers, heads, intermediate)
    "bert-base": (768, 12, 12, 3072),
    "bert-large": (1024, 24, 16, 4096),
    "bert-tiny": (64, 2, 2, 256),
}
# Batches the step profile trains on by default: 3 warm-up + 20 timed + 3 profiled.
PROFILE_STEPS = 26
VOCAB_SIZE = 30522  # bert-base-uncased's, so embedding sizes match the real models
DENSE_BF16_PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "4090": 165e12}


def build_random_bert(directory: Path, shape: str, vocab_size: int) -> Path:
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    hidden, layers, heads, intermediate = MODEL_SHAPES[shape]
    directory.mkdir(parents=True, exist_ok=True)
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {
        token: i for i, token in enumerate(special + [f"w{i}" for i in range(vocab_size - len(special))])
    }
    BertTokenizerFast(vocab=vocab, do_lower_case=True, model_max_length=512).save_pretrained(directory)
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
    )
    BertForSequenceClassification(config).save_pretrained(directory)
    return directory


def write_synthetic_data(
    directory: Path, rows: int, words: int, vocab_size: int, seed: int = 0
) -> dict[str, Path]:
    """Sentences of `words` placeholder words: with [CLS] and [SEP], seq = words + 2 tokens each."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, count in (("train", rows), ("validation", 64)):
        path = directory / f"{split}.csv"
        lines = ["text,label"]
        for _ in range(count):
            lines.append(
                " ".join(f"w{rng.randrange(vocab_size - 5)}" for _ in range(words)) + f",{rng.randrange(2)}"
            )
        path.write_text("\n".join(lines) + "\n")
        paths[split] = path
    return paths


def flops_per_token(shape: str, seq: int) -> float:
    hidden, layers, _, intermediate = MODEL_SHAPES[shape]
    # Per layer: Q, K, V, output projections (4 h^2) and the FFN (2 h i), weights plus biases.
    non_embedding = layers * (4 * hidden * hidden + 2 * hidden * intermediate + 9 * hidden + intermediate)
    return 6 * non_embedding + 12 * layers * hidden * seq


def device_peak_flops() -> tuple[str, float | None]:
    import torch

    if not torch.cuda.is_available():
        return "cpu", None
    name = torch.cuda.get_device_name(0)
    for key, peak in DENSE_BF16_PEAK_FLOPS.items():
        if key in name:
            return name, peak
    return name, None


def predicted_peak_gib(model_dir: Path, recipe: str, batch: int, seq: int, bf16: bool) -> float | None:
    """The planner's predicted peak of all tensors, in GiB, for this run (the recipe with its default
    options, as run_recipe runs it), or None if the planner is not available.

    run_recipe pads every example to `seq` (no padding mask) and trains on CUDA with bf16 (on the
    CPU without), and the run reports torch.cuda.max_memory_allocated (CPU: the tracker's peak),
    which never includes the CUDA context, so neither does this figure.
    """
    try:
        from recipes_lib.config.registry import recipe_specs
        from recipes_lib.memory.planner import Setup, load_config, plan_memory
        from recipes_lib.units import GIB
    except ImportError:
        return None
    shape = recipe_specs()[recipe].default_shape()
    device = "cuda" if bf16 else "cpu"
    setup = Setup(shape=shape, batch_size=batch, seq_length=seq, bf16=bf16, device=device, padded=False)
    return plan_memory(load_config(str(model_dir)), setup).peak_tensors / GIB


def run_recipe(recipe: str, model_dir: Path, data: dict[str, Path], out: Path, args) -> dict | None:
    config = "cpu.yaml" if args.cpu else "single_gpu.yaml"
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO_ROOT / "accelerate_configs" / config),
        str(REPO_ROOT / "recipes" / f"{recipe}.py"),
        "--model_name_or_path", str(model_dir),
        "--train_file", str(data["train"]), "--validation_file", str(data["validation"]),
        "--max_seq_length", str(args.seq), "--pad_to_max_length", "true",
        "--per_device_train_batch_size", str(args.batch), "--max_steps", str(args.steps),
        "--bf16", str(not args.cpu).lower(),
        "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none",
        "--logging_steps", str(max(args.steps // 2, 1)), "--disable_tqdm", "true",
        "--output_dir", str(out), "--overwrite_output_dir", "true",
    ]  # fmt: skip
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=os.environ.copy())
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout)[-1500:]
        print(f"  {recipe} failed after {time.perf_counter() - started:.0f} s:\n{tail}", flush=True)
        return None
    return json.loads((out / "results.json").read_text())


def profile_steps(model_dir: Path, data: dict[str, Path], out_dir: Path, args) -> None:
    """Forward, backward and optimizer-step times per recipe (step_profile.py) on the first model.

    The step-time targets compare these: 8-bit AdamW's step against fused AdamW's, LoRA's whole
    step against full fine-tuning's. A failure here is reported and does not lose the table.
    """
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    import step_profile

    steps = ["--warmup_steps", "1", "--steps", "2", "--profiled_steps", "1"] if args.tiny else []
    recipes = [recipe for recipe in ("full_ft", "adamw_8bit", "lora") if recipe in args.recipes]
    print(f"step profile on {model_dir.name}: {' '.join(recipes)} ...", flush=True)
    try:
        step_profile.main(
            [
                "--model_name_or_path",
                str(model_dir),
                "--recipes",
                *recipes,
                "--train_file",
                str(data["train"]),
                "--validation_file",
                str(data["validation"]),
                "--max_seq_length",
                str(args.seq),
                "--per_device_train_batch_size",
                str(args.batch),
                *steps,
                "--report_dir",
                str(out_dir),
            ]  # fmt: skip
        )
    except Exception as error:  # a measurement that failed, not a reason to lose the others
        print(f"step profile failed: {type(error).__name__}: {error}", flush=True)


def main(argv=None) -> int:
    """The recipe check below, or with --catalogue the catalogue check (gpu_catalogue.py)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--catalogue" in argv:
        sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
        import gpu_catalogue

        return gpu_catalogue.main(argv)
    return recipe_check(argv)


def recipe_check(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (checks the script, not the GPU)")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer BERT instead of bert-base/bert-large")
    parser.add_argument("--models", nargs="+", default=None)
    parser.add_argument("--recipes", nargs="+", default=["full_ft", "adamw_8bit", "lora", "qlora"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument(
        "--step_profile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time forward/backward/optimizer step per recipe (benchmarks/step_profile.py)",
    )
    parser.add_argument("--work_dir", default="/tmp/gpu_check")
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parser.parse_args(argv)
    if args.tiny:
        args.batch, args.seq, args.steps = min(args.batch, 8), min(args.seq, 32), min(args.steps, 4)
    models = args.models or (["bert-tiny"] if args.tiny else ["bert-base", "bert-large"])
    vocab_size = 1000 if args.tiny else VOCAB_SIZE
    work = Path(args.work_dir)
    device_name, peak_flops = device_peak_flops()
    data = write_synthetic_data(
        work / "data",
        rows=args.batch * max(args.steps, PROFILE_STEPS),
        words=args.seq - 2,
        vocab_size=vocab_size,
    )

    rows = []
    for shape in models:
        model_dir = build_random_bert(work / shape, shape, vocab_size)
        for recipe in args.recipes:
            if not (REPO_ROOT / "recipes" / f"{recipe}.py").is_file():
                print(f"  {recipe}: no recipes/{recipe}.py, skipped", flush=True)
                continue
            print(f"{shape} / {recipe} ...", flush=True)
            results = run_recipe(recipe, model_dir, data, work / "runs" / f"{shape}-{recipe}", args)
            if results is None:
                rows.append({"model": shape, "recipe": recipe, "status": "failed"})
                continue
            tokens_per_s = results["train_samples_per_s"] * args.seq  # every token is real here
            mfu = tokens_per_s * flops_per_token(shape, args.seq) / peak_flops if peak_flops else None
            rows.append(
                {
                    "model": shape,
                    "recipe": recipe,
                    "status": "ok",
                    "samples_per_s": results["train_samples_per_s"],
                    "tokens_per_s": round(tokens_per_s),
                    "mfu": round(mfu, 4) if mfu is not None else None,
                    "peak_allocated_gib": results["peak_memory_gib"],
                    "peak_reserved_gib": results["peak_memory_reserved_gib"],
                    "predicted_peak_gib": predicted_peak_gib(
                        model_dir, recipe, args.batch, args.seq, not args.cpu
                    ),
                    "memory_breakdown_gib": results.get("memory_breakdown_gib"),
                    "optimizer_state_bytes": results.get("optimizer_state_bytes"),
                    "params_trainable": results["params_trainable"],
                }
            )

    header = f"{'model':<11} {'recipe':<11} {'samples/s':>9} {'tokens/s':>9} {'MFU':>6} {'alloc GiB':>9} {'reserv GiB':>10} {'plan GiB':>8}"
    lines = [f"device: {device_name}; batch {args.batch}, seq {args.seq}, {args.steps} steps", header]
    for row in rows:
        if row["status"] != "ok":
            lines.append(f"{row['model']:<11} {row['recipe']:<11} FAILED")
            continue

        def fmt(value, spec):
            return format(value, spec) if value is not None else "-"

        lines.append(
            f"{row['model']:<11} {row['recipe']:<11} {row['samples_per_s']:>9.1f} {row['tokens_per_s']:>9d} "
            f"{fmt(row['mfu'], '>6.1%')} {fmt(row['peak_allocated_gib'], '>9.2f')} "
            f"{fmt(row['peak_reserved_gib'], '>10.2f')} {fmt(row['predicted_peak_gib'], '>8.2f')}"
        )
    table = "\n".join(lines)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "gpu_check-cpu-tiny" if args.cpu else "gpu_check"
    (out_dir / f"{stem}.json").write_text(
        json.dumps({"device": device_name, "args": vars(args), "rows": rows}, indent=2)
    )
    (out_dir / f"{stem}.txt").write_text(table + "\n")
    # After the table is saved (a crash here loses nothing), before it is printed (it comes last).
    if args.step_profile and "full_ft" in args.recipes:
        profile_steps(work / models[0], data, out_dir, args)
    print("\n" + table)
    return 0 if all(row["status"] == "ok" for row in rows) or args.cpu else 1


if __name__ == "__main__":
    sys.exit(main())
