"""Long sequences on the CPU: the planner against measured training steps, and a long-context run.

    python benchmarks/long_context.py planner   # tiny ModernBERT (2 and 6 layers) and EuroBERT at 512 to 8,192 tokens
    python benchmarks/long_context.py run       # a tiny ModernBERT reading 4,096-token threads whole, and head_tail at 512

planner: the tiny configs of tests/helpers/models.py (hidden 32; ModernBERT with 2 layers, global
attention in every other one and a 16-token window, and with 6, global in every third), made to
accept 8,192 positions, one full fine-tuning step of one padded row (its second half padding) at
each length, measured as tests/workbench/test_planner_families.py measures it (the tensors PyTorch creates,
on one thread), beside `plan_memory`'s plan of the same batch. Activation checkpointing too for
ModernBERT.

run: the long-document demo task (data/make_long_documents.py) with a longer history
(--sentences: 240 to 275 sentences, about 3,500 to 4,000 tokens a thread, the request at its end),
a tiny ModernBERT initialised at random with all-MiniLM-L6-v2's tokenizer (no long-context weights
load offline), trained by recipes/full_ft.py twice on the same rows: whole, at --max_seq_length
4096 (--long_text truncate: the threads fit, so nothing is cut), and with head_tail at 512. Reported per run: seconds
per optimizer step, the tensor peak the run measured beside the plan of the batch that set it
(results.json's memory_peak_batch), the process's peak RSS, and accuracy.

Each part writes benchmarks/results/long_context_<part>-<UTC time>.json with the machine and the
commit, and prints a Markdown table (benchmarks/RESULTS.md, "Long context").
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # tests.helpers: the tiny configs and the measured step the tests use

LENGTHS = (512, 2048, 8192)
# name: (model_type, config values beyond tests/helpers/models.py's tiny shape)
PLANNER_MODELS = {
    "modernbert (2 layers)": ("modernbert", {}),
    "modernbert (6 layers)": ("modernbert", {"num_hidden_layers": 6, "global_attn_every_n_layers": 3}),
    "eurobert (2 layers)": ("eurobert", {}),
}
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=["planner", "run"])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--train", type=int, default=120, help="run: training threads")
    parser.add_argument("--validation", type=int, default=60, help="run: validation threads")
    parser.add_argument("--sentences", type=int, nargs=2, default=[240, 275], help="run: history sentences")
    parser.add_argument("--max_seq_length", type=int, default=4096, help="run: the whole-thread length")
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--epochs", type=float, default=1)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--output_dir", default=str(REPO_ROOT / "outputs" / "long_context_demo"))
    parser.add_argument("--report_dir", default=str(REPO_ROOT / "benchmarks" / "results"))
    return parser.parse_args(argv)


# --- planner -----------------------------------------------------------------------------------------


def planner_rows(lengths) -> list[dict]:
    import torch

    from recipes_lib.config.recipe_spec import TrainingShape
    from recipes_workbench.planner import Setup, load_config, plan_memory
    from tests.helpers.models import build_tiny_family, measured_training_step

    torch.set_num_threads(1)  # as the tests measure (one_thread)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, (model_type, extra) in PLANNER_MODELS.items():
            model_dir = build_tiny_family(
                model_type,
                Path(scratch) / name.split()[0] / str(len(rows)),
                max_position_embeddings=8192,
                **extra,
            )
            for checkpointing in (False, True) if model_type == "modernbert" else (False,):
                for length in lengths:
                    measured = measured_training_step(model_dir, TrainingShape(), 1, length, checkpointing)
                    setup = Setup(batch_size=1, seq_length=length, padded=True, device="cpu",
                                  gradient_checkpointing=checkpointing)  # fmt: skip
                    plan = plan_memory(load_config(str(model_dir)), setup)
                    rows.append({
                        "model": name, "length": length, "checkpointing": checkpointing,
                        "measured_activations": measured["activations"], "planned_activations": plan.activations,
                        "measured_peak": measured["peak"], "planned_peak": plan.peak_tensors,
                        "activations_ratio": round(plan.activations / measured["activations"], 3),
                        "peak_ratio": round(plan.peak_tensors / measured["peak"], 3),
                        "planned_terms": plan.activation_terms,
                    })  # fmt: skip
                    print(f"{name} {length} ckpt={checkpointing}: peak {rows[-1]['peak_ratio']}", flush=True)
    return rows


def planner_table(rows) -> str:
    lines = [
        "| model | tokens | checkpointing | activations planned / measured (MiB) | ratio | peak planned / measured (MiB) | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        mib = 2**20
        lines.append(
            f"| {row['model']} | {row['length']:,} | {'yes' if row['checkpointing'] else 'no'} | "
            f"{row['planned_activations'] / mib:,.1f} / {row['measured_activations'] / mib:,.1f} | "
            f"{row['activations_ratio']:.3f} | {row['planned_peak'] / mib:,.1f} / {row['measured_peak'] / mib:,.1f} | "
            f"{row['peak_ratio']:.3f} |"
        )
    return "\n".join(lines)


# --- run ---------------------------------------------------------------------------------------------


def write_data(args, out_dir: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_long_documents", REPO_ROOT / "data" / "make_long_documents.py"
    )
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generator.main(out_dir, tuple(args.sentences), args.train, args.validation)


def build_model(model_dir: Path) -> dict:
    """A tiny ModernBERT at random (seed 0) with MiniLM's WordPiece tokenizer, saved like a Hub checkpoint."""
    import torch
    from transformers import AutoModel, AutoTokenizer, ModernBertConfig

    from recipes_lib.modeling.sources import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MINILM))
    tokenizer.model_max_length = 8192
    values = dict(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, global_attn_every_n_layers=2, local_attention=128, max_position_embeddings=8192,
        pad_token_id=tokenizer.pad_token_id, cls_token_id=tokenizer.cls_token_id,
        sep_token_id=tokenizer.sep_token_id, bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModel.from_config(ModernBertConfig(**values)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return values


def token_lengths(model_dir: Path, data_dir: Path) -> dict:
    import csv

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    out = {}
    for split in ("train", "validation"):
        with open(data_dir / f"{split}.csv", newline="") as handle:
            texts = [row["text"] for row in csv.DictReader(handle)]
        lengths = [len(ids) for ids in tokenizer(texts, verbose=False)["input_ids"]]
        out[split] = {"median": statistics.median(lengths), "min": min(lengths), "max": max(lengths)}
    return out


def train(args, model_dir: Path, data_dir: Path, name: str, max_seq_length: int, long_text: str) -> dict:
    output = Path(args.output_dir) / name
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file",
        str(REPO_ROOT / "accelerate_configs" / "cpu.yaml"), str(REPO_ROOT / "recipes" / "full_ft.py"),
        "--model_name_or_path", str(model_dir), "--train_file", str(data_dir / "train.csv"),
        "--validation_file", str(data_dir / "validation.csv"), "--text_column_names", "text",
        "--label_column_name", "label", "--max_seq_length", str(max_seq_length), "--long_text", long_text,
        "--per_device_train_batch_size", str(args.batch_size), "--num_train_epochs", str(args.epochs),
        "--learning_rate", str(args.learning_rate), "--eval_strategy", "no", "--save_strategy", "no",
        "--output_dir", str(output), "--report_to", "none", "--seed", "0",
    ]  # fmt: skip
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=REPO_ROOT)
    return json.loads((output / "results.json").read_text())


def planned_peak(model_dir: Path, results: dict) -> int | None:
    from recipes_workbench.planner import Setup, load_config, plan_memory

    batch = results.get("memory_peak_batch")
    if not batch:
        return None
    setup = Setup(batch_size=batch["rows"], seq_length=batch["length"], padded=batch["padded"], device="cpu")
    setup = setup.with_precision(results["precision"])
    return plan_memory(load_config(str(model_dir), num_labels=4), setup).peak_tensors


def run_rows(args) -> tuple[list[dict], dict, dict]:
    root = Path(args.output_dir)
    data_dir, model_dir = root / "data", root / "model"
    write_data(args, data_dir)
    config = build_model(model_dir)
    lengths = token_lengths(model_dir, data_dir)
    rows = []
    for name, max_seq_length, long_text in (
        ("whole", args.max_seq_length, "truncate"),
        ("head_tail", 512, "head_tail"),
    ):
        results = train(args, model_dir, data_dir, name, max_seq_length, long_text)
        plan = planned_peak(model_dir, results)
        measured = results.get("tensor_peak_gib")
        rows.append({
            "run": name, "max_seq_length": max_seq_length, "long_text": long_text,
            "eval_accuracy": results.get("eval_accuracy"), "train_steps": results.get("train_steps"),
            "train_runtime_s": results.get("train_runtime_s"),
            "s_per_step": round(results["train_runtime_s"] / results["train_steps"], 3),
            "peak_batch": results.get("memory_peak_batch"), "tensor_peak_gib": measured,
            "planned_peak_gib": round(plan / 2**30, 6) if plan else None,
            "plan_ratio": round(plan / 2**30 / measured, 3) if plan and measured else None,
            "peak_rss_gib": results.get("peak_memory_gib"), "precision": results.get("precision"),
        })  # fmt: skip
    return rows, config, lengths


def run_table(rows) -> str:
    lines = [
        "| run | max_seq_length | accuracy | steps | s / step | peak batch | tensor peak planned / measured (GiB) | ratio | peak RSS (GiB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        batch = row["peak_batch"] or {}
        lines.append(
            f"| {row['run']} ({row['long_text']}) | {row['max_seq_length']:,} | {row['eval_accuracy']:.3f} | "
            f"{row['train_steps']} | {row['s_per_step']:.2f} | {batch.get('rows')} x {batch.get('length')} | "
            f"{row['planned_peak_gib']:.3f} / {row['tensor_peak_gib']:.3f} | {row['plan_ratio']} | {row['peak_rss_gib']} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    from publish import git_commit, machine

    git = git_commit()
    command = "python benchmarks/long_context.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.part == "planner":
        rows = planner_rows(args.lengths)
        record = {"rows": rows}
        table = planner_table(rows)
    else:
        rows, config, lengths = run_rows(args)
        record = {"rows": rows, "model_config": config, "token_lengths": lengths, "arguments": vars(args)}
        table = run_table(rows)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    record = {"name": f"long_context_{args.part}", "command": command, "date": stamp, "machine": machine(),
              "git": git, **record}  # fmt: skip
    report = Path(args.report_dir) / f"long_context_{args.part}-{stamp}.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(record, indent=1) + "\n")
    print(table)
    print(f"wrote {report}")


if __name__ == "__main__":
    main()
