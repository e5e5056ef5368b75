"""`--torch_compile` after warm-up: the steady-state training step, compiled against eager, side by side.

    python benchmarks/compile_steady.py [--train_file data/support_tickets/train.csv] [--steps 20]

throughput.py's `--switches` times whole runs, compilation included. This times what a long run would
see once compiled: all-MiniLM-L6-v2 (full_ft's model, real weights), AdamW, on batches of real texts
padded to their longest (the recipes' dynamic padding, so the lengths vary). Two copies of the model
start from the same weights: one eager, one `torch.compile`d as the Trainer compiles it (inductor,
`dynamic=None`: the first new length recompiles with dynamic shapes). Both first run every batch once
(the warm-up, in which the compiled copy compiles: its time is reported apart, with the number of
graphs dynamo made), then every batch again, one eager step and one compiled step in turn, so a
machine whose load changes slows both alike. Reported: the median step time of each, their ratio, and
the warm-up's cost in steady compiled steps, under the precision the recipe would pick here
(--precision to choose). `--pad_to_multiple_of N` buckets the padded lengths (the tokenizer's option)
so that a few graphs serve every batch, and `--dynamic false` compiles one static graph per length. Written to --report_dir as compile_steady-<time>.json, with the machine
(benchmarks/publish.py's) and the commit read at the start.
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
    parser.add_argument("--train_file", default=str(REPO_ROOT / "data" / "support_tickets" / "train.csv"))
    parser.add_argument("--text_column", default=None, help="default: 'text', else 'sentence'")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="batches: each is run in warm-up, then timed")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    parser.add_argument(
        "--pad_to_multiple_of",
        type=int,
        default=None,
        help="bucket the padded lengths (the tokenizer's own option), so few graphs serve every batch",
    )
    parser.add_argument("--dynamic", choices=["auto", "false"], default="auto",
                        help="auto: torch.compile(dynamic=None), as the Trainer; false: one static graph per length")  # fmt: skip
    parser.add_argument("--report_dir", default=str(REPO_ROOT / "benchmarks" / "results"))
    return parser.parse_args(argv)


def batches(args, tokenizer) -> list[dict]:
    import pandas
    import torch

    separator = "\t" if args.train_file.endswith(".tsv") else ","
    frame = pandas.read_csv(args.train_file, sep=separator)
    column = args.text_column or ("text" if "text" in frame.columns else "sentence")
    texts = frame[column].astype(str).tolist()[: args.steps * args.batch_size]
    out = []
    for start in range(0, len(texts), args.batch_size):
        batch = tokenizer(texts[start : start + args.batch_size], padding=True, truncation=True,
                          max_length=args.max_seq_length, pad_to_multiple_of=args.pad_to_multiple_of,
                          return_tensors="pt")  # fmt: skip
        batch["labels"] = torch.zeros(len(batch["input_ids"]), dtype=torch.long)
        out.append(dict(batch))
    return out


def main(argv=None) -> int:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from publish import git_commit, machine

    from recipes_lib.config.precision import choose_precision, detect_capability
    from recipes_lib.modeling.sources import packaged_model_dir

    args = parse_args(argv)
    git = git_commit()  # at the start: the commit measured
    precision = args.precision
    if precision == "auto":
        precision = choose_precision(detect_capability(True), bf16=None, fp16=None, launcher=None).precision
    source = packaged_model_dir(args.model_name_or_path) or args.model_name_or_path
    data = batches(args, AutoTokenizer.from_pretrained(source))
    torch.manual_seed(0)
    eager = AutoModelForSequenceClassification.from_pretrained(source, num_labels=2)
    compiled_model = copy.deepcopy(eager)
    models = {
        "eager": eager,
        "compiled": torch.compile(compiled_model, dynamic=None if args.dynamic == "auto" else False),
    }
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=2e-5) for name, m in models.items()}

    def step(name, batch) -> float:
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = models[name](**batch).loss
        loss.backward()
        optimizers[name].step()
        optimizers[name].zero_grad(set_to_none=True)
        return time.perf_counter() - started

    for model in models.values():
        model.train()
    torch._dynamo.utils.counters.clear()
    warmup = {name: sum(step(name, batch) for batch in data) for name in models}
    graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    times = {name: [] for name in models}
    for batch in data:
        for name in models:
            times[name].append(step(name, batch))
    medians = {name: statistics.median(values) for name, values in times.items()}
    lengths = sorted({int(batch["input_ids"].shape[1]) for batch in data})
    recompiled = int(torch._dynamo.utils.counters["stats"]["unique_graphs"]) - graphs
    # Steps until compiling pays back: the warm-up's extra time over the steady gain per step.
    gain = medians["eager"] - medians["compiled"]
    payback = (warmup["compiled"] - warmup["eager"]) / gain if gain > 0 else None
    report = {
        "command": "python benchmarks/compile_steady.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(), "git": git, "threads": torch.get_num_threads(), "precision": precision,
        "batches": len(data), "batch_size": args.batch_size, "padded_lengths": lengths,
        "pad_to_multiple_of": args.pad_to_multiple_of, "dynamic": args.dynamic,
        "warmup_s": {name: round(value, 2) for name, value in warmup.items()},
        "graphs_after_warmup": graphs, "graphs_made_in_timed_steps": recompiled,
        "median_step_ms": {name: round(1000 * value, 2) for name, value in medians.items()},
        "step_ms": {name: [round(1000 * v, 2) for v in values] for name, values in times.items()},
        "compiled_over_eager": round(medians["compiled"] / medians["eager"], 3),
        "steps_to_pay_back_compiling": None if payback is None else round(payback),
    }  # fmt: skip
    print(
        f"{precision}, {len(data)} batches of {args.batch_size} ({len(lengths)} padded lengths, "
        f"{lengths[0]}-{lengths[-1]}), {report['threads']} thread(s): median step eager "
        f"{report['median_step_ms']['eager']:.1f} ms, compiled {report['median_step_ms']['compiled']:.1f} ms "
        f"({report['compiled_over_eager']:.3f}x); warm-up eager {warmup['eager']:.1f} s, compiled "
        f"{warmup['compiled']:.1f} s ({graphs} graphs; {recompiled} more in the timed steps); "
        f"pays back after {report['steps_to_pay_back_compiling'] or 'never'} steps"
    )
    report_dir = Path(args.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / f"compile_steady-{datetime.now(timezone.utc).strftime('%Y-%m-%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
