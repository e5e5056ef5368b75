"""LoRA's default learning rate, measured: lora at several rates next to full_ft at its default.

    python benchmarks/lora_learning_rate.py \\
        --train_file ../shared/data/sst2/train.tsv --validation_file ../shared/data/sst2/dev.tsv

The budget of the acceptance check: all-MiniLM-L6-v2, the first 4,000 training sentences, 1 epoch
(125 steps of 32), accuracy on the whole dev set. Each run is one `accelerate launch` of the
recipe, as a user runs it; a run whose results.json is already in --work_dir is not repeated.
Writes benchmarks/results/lora_learning_rate.json and .md, with the machine they ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def run(recipe: str, learning_rate: str | None, seed: int, args, work_dir: Path) -> dict:
    name = f"{recipe}_lr{learning_rate or 'default'}_seed{seed}"
    output_dir = work_dir / name
    if not (output_dir / "results.json").is_file():
        command = [
            sys.executable, "-m", "accelerate.commands.launch",
            "--config_file", str(REPO_ROOT / "accelerate_configs" / args.accelerate_config),
            str(REPO_ROOT / "recipes" / f"{recipe}.py"),
            "--model_name_or_path", args.model_name_or_path,
            "--train_file", args.train_file, "--validation_file", args.validation_file,
            "--max_train_samples", str(args.max_train_samples), "--num_train_epochs", "1",
            "--seed", str(seed), "--output_dir", str(output_dir), "--overwrite_output_dir", "true",
            "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true",
            *(["--learning_rate", learning_rate] if learning_rate else []),
        ]  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        subprocess.run(command, check=True, env=env, cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
    results = json.loads((output_dir / "results.json").read_text())
    return {
        "recipe": recipe,
        "learning_rate": results["config"]["learning_rate"],
        "seed": seed,
        "eval_accuracy": results["eval_accuracy"],
        "device": results["device"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train_file", required=True)
    parser.add_argument("--validation_file", required=True)
    parser.add_argument("--model_name_or_path", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--max_train_samples", type=int, default=4000)
    parser.add_argument("--learning_rates", nargs="+", default=["5e-4", "1e-3", "2e-3"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 7])
    parser.add_argument("--accelerate_config", default="cpu.yaml")
    parser.add_argument("--work_dir", default="outputs/benchmarks/lora_learning_rate")
    parser.add_argument("--report_dir", default="benchmarks/results")
    args = parser.parse_args()

    work_dir = Path(args.work_dir)
    rows = []
    for seed in args.seeds:
        rows.append(run("full_ft", None, seed, args, work_dir))
        rows += [run("lora", rate, seed, args, work_dir) for rate in args.learning_rates]

    lines = ["| recipe | learning rate | seed | dev accuracy |", "|---|---|---|---|"]
    lines += [
        f"| {r['recipe']} | {r['learning_rate']:g} | {r['seed']} | {r['eval_accuracy']:.4f} |"
        for r in sorted(rows, key=lambda r: (r["recipe"], r["learning_rate"], r["seed"]))
    ]
    machine = f"{rows[0]['device']}, {platform.system()} {platform.machine()}"
    table = "\n".join(lines)
    print(table)
    report_dir = Path(args.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    setup = {
        "model": args.model_name_or_path,
        "train_file": Path(args.train_file).name,
        "max_train_samples": args.max_train_samples,
        "epochs": 1,
        "machine": machine,
    }
    (report_dir / "lora_learning_rate.json").write_text(json.dumps({**setup, "rows": rows}, indent=2) + "\n")
    (report_dir / "lora_learning_rate.md").write_text(
        f"{table}\n\n{args.model_name_or_path}, first {args.max_train_samples} sentences of "
        f"{Path(args.train_file).name}, 1 epoch; measured on {machine}.\n"
    )


if __name__ == "__main__":
    main()
