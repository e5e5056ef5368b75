"""AdamW state of each recipe on bert-base and bert-large, measured after one optimizer step.

    python benchmarks/optimizer_state.py [--report_dir benchmarks/results]

The models are built from `BertConfig` with random weights (no download; the state's size does
not depend on the values) and take one training step on a batch of 4 x 32 tokens, with the
optimizer each recipe builds: torch AdamW with the Trainer's groups (full_ft), bitsandbytes
AdamW8bit with 32-bit or 8-bit embedding state (adamw_8bit), torch AdamW over the LoRA adapters
and the head (lora; qlora's optimizer sees the same parameters). Then `optimizer_state_summary`,
the function that fills results.json, measures the state tensors. Needs about 6 GB of memory for
bert-large; runs on CPU in about a minute.
"""

from __future__ import annotations

import argparse
import json
import platform
from datetime import datetime, timezone
from pathlib import Path

import torch
from transformers import BertConfig, BertForSequenceClassification, TrainingArguments

from recipes_lib.modeling.adamw_8bit import create_adamw_8bit, decay_parameter_groups
from recipes_lib.modeling.adapters import LoraArguments, add_lora
from recipes_lib.modeling.optimizers import optimizer_state_summary

MIB = 2**20
SHAPES = {
    "bert-base": {},
    "bert-large": {
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
    },
}


def build_optimizer(recipe: str, model, training: TrainingArguments):
    if recipe == "adamw_8bit (32-bit embeddings)":
        return create_adamw_8bit(model, training, embedding_optimizer_bits=32)
    if recipe == "adamw_8bit (8-bit embeddings)":
        return create_adamw_8bit(model, training, embedding_optimizer_bits=8)
    return torch.optim.AdamW(decay_parameter_groups(model, training.weight_decay), lr=training.learning_rate)


def measure(shape: str, recipe: str, training: TrainingArguments) -> dict:
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(num_labels=2, **SHAPES[shape]))
    if recipe == "lora / qlora":
        model = add_lora(model, LoraArguments())
    optimizer = build_optimizer(recipe, model, training)
    inputs = torch.randint(1000, 2000, (4, 32))
    model(input_ids=inputs, labels=torch.tensor([0, 1, 0, 1])).loss.backward()
    optimizer.step()
    summary = optimizer_state_summary(optimizer, model)
    return {"model": shape, "recipe": recipe, **summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report_dir", default=None, help="Also write optimizer_state.json and .md here.")
    args = parser.parse_args()
    training = TrainingArguments(output_dir="unused", use_cpu=True, report_to="none")
    recipes = ("full_ft", "adamw_8bit (32-bit embeddings)", "adamw_8bit (8-bit embeddings)", "lora / qlora")
    rows = [measure(shape, recipe, training) for shape in SHAPES for recipe in recipes]

    lines = [
        "| model | recipe | optimizer state | vs full_ft | embeddings | other >= 4,096 elements | smaller tensors |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        full = next(r for r in rows if r["model"] == row["model"] and r["recipe"] == "full_ft")
        kinds = row["optimizer_state_bytes_by_parameter_kind"]
        lines.append(
            f"| {row['model']} | {row['recipe']} | {row['optimizer_state_bytes'] / MIB:,.1f} MiB "
            f"| {row['optimizer_state_bytes'] / full['optimizer_state_bytes']:.3f} "
            f"| {kinds['embedding'] / MIB:,.1f} MiB | {kinds['large'] / MIB:,.1f} MiB | {kinds['small'] / MIB:,.2f} MiB |"
        )
    machine = f"{platform.machine()}, {platform.system()}, torch {torch.__version__}"
    table = "\n".join(lines)
    print(table)
    print(f"\nmeasured {datetime.now(timezone.utc):%Y-%m-%d} on {machine}")
    if args.report_dir:
        report_dir = Path(args.report_dir)
        report_dir.mkdir(parents=True, exist_ok=True)
        (report_dir / "optimizer_state.json").write_text(
            json.dumps({"machine": machine, "rows": rows}, indent=2)
        )
        (report_dir / "optimizer_state.md").write_text(f"{table}\n\nMeasured on {machine}.\n")


if __name__ == "__main__":
    main()
