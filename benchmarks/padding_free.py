"""Padding-free batches against padded ones, side by side: real tokens a second in training, and the logits.

    python benchmarks/padding_free.py [--train_file /path/to/sst2/train.tsv] [--steps 20] [--device auto]

Two copies of one model from the same weights (default all-MiniLM-L6-v2, full_ft's model, real
weights; `--random_config NAME` builds a catalogue config with random weights instead, for a machine
that reaches no Hub): one takes the recipes' padded batches (each padded to its longest row, SDPA with
the mask), the other the same rows packed into one row (padding_free_model.py, beside this script). Batches are drawn
at random from --train_file (seed 0), so their lengths are the file's. Every batch is run once by both
(warm-up), then timed: one padded step and one packed step in turn (forward, backward, AdamW), so a
machine whose load changes slows both alike. Reported: real (non-padding) tokens a second of each, the
padding share of the padded batches, and the largest logit difference between the two copies in eval
mode on every batch (fp32 on a CPU; under bf16 autocast on a bf16 GPU, where the tolerance is bf16's).
Written to --report_dir as padding_free-<time>.json with the machine and the commit read at the start.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_name_or_path", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument(
        "--random_config", default=None, help="a planner catalogue name: its config, random weights"
    )
    parser.add_argument(
        "--tiny", action="store_true", help="--random_config scaled down (gpu_catalogue.py's)"
    )
    parser.add_argument(
        "--train_file",
        default=str(REPO_ROOT / "data" / "support_tickets" / "train.csv"),
        help="csv or tsv with a text column, or 'sst2-lengths': random words in SST-2's row lengths",
    )
    parser.add_argument("--text_column", default=None, help="default: 'text', else 'sentence'")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20, help="batches: each is run in warm-up, then timed")
    parser.add_argument("--device", default="auto", help="auto: cuda where there is one, else cpu")
    parser.add_argument("--report_dir", default=str(REPO_ROOT / "benchmarks" / "results"))
    return parser.parse_args(argv)


# SST-2's training sentences, words per row (whitespace-split), at these quantiles: measured on GLUE
# SST-2's train.tsv (67,349 rows, mean 9.4 words) on 2026-12-06, for `--train_file sst2-lengths`, which
# draws rows of those lengths from the tokenizer's whole words where the data are not at hand (a GPU
# machine reaches no Hub). Random words: the lengths, not the texts, decide the speed.
SST2_WORD_QUANTILES = (
    (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0),
    (1, 2, 3, 4, 5, 7, 9, 12, 15, 21, 26, 35, 52),
)


def sst2_like_texts(count: int, tokenizer) -> list[str]:
    import numpy

    generator = numpy.random.default_rng(0)
    words = sorted(
        token for token in tokenizer.get_vocab() if token.isalnum()
    )  # whole words, no [PAD] or ##s
    lengths = numpy.interp(generator.random(count), *SST2_WORD_QUANTILES).round().astype(int)
    return [" ".join(generator.choice(words, size=n)) for n in lengths]


def sampled_rows(args, tokenizer) -> list[list[dict]]:
    """--steps batches of --batch_size tokenized rows, drawn at random (seed 0) from --train_file."""
    import pandas

    count = args.steps * args.batch_size
    if args.train_file == "sst2-lengths":
        texts = sst2_like_texts(count, tokenizer)
    else:
        separator = "\t" if args.train_file.endswith(".tsv") else ","
        frame = pandas.read_csv(args.train_file, sep=separator, quoting=3 if separator == "\t" else 0)
        column = args.text_column or ("text" if "text" in frame.columns else "sentence")
        texts = frame[column].astype(str).sample(n=count, random_state=0, replace=True).tolist()
    encoded = tokenizer(texts, truncation=True, max_length=args.max_seq_length)
    rows = [
        {key: encoded[key][index] for key in encoded if key != "attention_mask"} | {"labels": index % 2}
        for index in range(len(texts))
    ]
    return [rows[start : start + args.batch_size] for start in range(0, len(rows), args.batch_size)]


def build_models(args, device):
    from padding_free_model import enable_padding_free
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from recipes_lib.modeling.sources import packaged_model_dir

    source = packaged_model_dir(args.model_name_or_path) or args.model_name_or_path
    tokenizer = AutoTokenizer.from_pretrained(source)
    if args.random_config:
        from gpu_catalogue import catalogue_config  # the catalogue's config, scaled down with --tiny

        config = catalogue_config(args.random_config, args.tiny, num_labels=2)
        config.vocab_size = max(config.vocab_size, len(tokenizer))
        padded = AutoModelForSequenceClassification.from_config(config, attn_implementation="sdpa")
    else:
        padded = AutoModelForSequenceClassification.from_pretrained(
            source, num_labels=2, attn_implementation="sdpa"
        )
    packed = copy.deepcopy(padded)
    enable_padding_free(packed)
    return tokenizer, padded.to(device), packed.to(device)


def main(argv=None) -> int:
    import torch
    from transformers import DataCollatorWithPadding

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from padding_free_model import PaddingFreeCollator, position_offset
    from publish import git_commit, machine

    args = parse_args(argv)
    git = git_commit()  # at the start: the commit measured
    device = torch.device(
        "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device.replace("auto", "cpu")
    )
    bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    torch.manual_seed(0)
    tokenizer, padded_model, packed_model = build_models(args, device)
    # The recipes' padding: to the longest row, on a GPU to a multiple of 8 (data/tokenize.py)
    collators = {
        "padded": DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8 if device.type == "cuda" else None),
        "packed": PaddingFreeCollator(position_offset(packed_model.config)),
    }
    models = {"padded": padded_model, "packed": packed_model}
    data = sampled_rows(args, tokenizer)
    batches = {name: [collate(rows) for rows in data] for name, collate in collators.items()}
    batches = {
        name: [{k: v.to(device) if torch.is_tensor(v) else v for k, v in b.items()} for b in values]
        for name, values in batches.items()
    }
    real_tokens = [sum(len(row["input_ids"]) for row in rows) for rows in data]
    padded_tokens = [batch["input_ids"].numel() for batch in batches["padded"]]

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)

    with torch.no_grad(), autocast():
        for model in models.values():
            model.eval()
        differences = [
            (models["padded"](**p).logits.float() - models["packed"](**q).logits.float()).abs().max().item()
            for p, q in zip(batches["padded"], batches["packed"], strict=True)
        ]
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=2e-5) for name, m in models.items()}

    def step(name, batch) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        with autocast():
            loss = models[name](**batch).loss
        loss.backward()
        optimizers[name].step()
        optimizers[name].zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started

    for model in models.values():
        model.train()
    for name in models:  # warm-up
        for batch in batches[name]:
            step(name, batch)
    times = {name: [] for name in models}
    for index in range(len(data)):
        for name in models:
            times[name].append(step(name, batches[name][index]))
    tokens_per_s = {name: sum(real_tokens) / sum(values) for name, values in times.items()}
    report = {
        "command": "python benchmarks/padding_free.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(), "git": git, "device": str(device), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "precision": "bf16 autocast" if bf16 else "fp32",
        "model": args.random_config or args.model_name_or_path, "train_file": args.train_file,
        "batches": len(data), "batch_size": args.batch_size,
        "real_tokens_per_batch_median": statistics.median(real_tokens),
        "padding_share": round(1 - sum(real_tokens) / sum(padded_tokens), 3),
        "real_tokens_per_s": {name: round(value, 1) for name, value in tokens_per_s.items()},
        "packed_over_padded": round(tokens_per_s["packed"] / tokens_per_s["padded"], 3),
        "median_step_ms": {name: round(1000 * statistics.median(v), 2) for name, v in times.items()},
        "max_logit_difference": max(differences),
    }  # fmt: skip
    print(
        f"{report['model']} on {device} ({report['precision']}), {len(data)} batches of {args.batch_size}, "
        f"padding {100 * report['padding_share']:.0f}% of the padded batches: real tokens/s padded "
        f"{report['real_tokens_per_s']['padded']:.0f}, packed {report['real_tokens_per_s']['packed']:.0f} "
        f"({report['packed_over_padded']:.2f}x); largest logit difference {report['max_logit_difference']:.2e}"
    )
    out = Path(args.report_dir)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    (out / f"padding_free-{stamp}.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
