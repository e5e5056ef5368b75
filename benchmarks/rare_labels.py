"""Many labels, most of them rare (issue #50): does the documented multi-label command learn them?

    python benchmarks/rare_labels.py [--recipe full_ft|lora] [--seeds 0 1 2] [--train_rows 1200] [--output_dir outputs/rare_labels]
        [--name rare-labels] [--accelerate_config accelerate_configs/cpu.yaml] [-- recipe options]

Writes a seeded data set to OUTPUT_DIR/data/{train,validation,test}.jsonl: short texts, 24 labels, 4 of
them common (about 12-20% of rows) and 20 rare (1-4%), 0 to 3 labels a row. Each label has its own cue
words, so a model can learn it from the text; the noise: filler words shared by all labels, 1 row in 10
whose cue for one of its labels is dropped (the label stays), and 1 in 20 that carries a cue of a label it
does not have. Then it trains the documented multi-label command (docs/data-and-tasks.md, "The demo
tasks": full_ft, recipes/configs/demo_multilabel.yaml, --learning_rate 1e-4) once per seed on that data,
and records in benchmarks/results/NAME-<UTC>.json, per seed: validation macro-F1 at 0.5 (`eval_f1`), the
tuned one if the run reports it, the test split's, and how much the model's outputs vary across rows
(the mean over labels of the standard deviation of the probability; a collapsed model's is about 0).
Beside them: the macro-F1 of the best constant predictor on the same validation rows (every label
predicted for every row: F1 2p/(1+p) for a label of prevalence p; predicting none scores 0).

Recipe options after `--` reach every run: `--name rare-labels-weighted -- --class_weights balanced` is
the weighted arm beside the unweighted one (put --name before `--`). A finished seed's run (its
results.json) is not run again, and the record marks it `reused` (wall_s then leaves it out).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
REPO_ROOT = BENCHMARKS.parent
# The documented multi-label commands (docs/data-and-tasks.md, "The demo tasks"), by recipe.
COMMANDS = {
    "full_ft": ["recipes/full_ft.py", "--config", "recipes/configs/demo_multilabel.yaml", "--learning_rate", "1e-4"],
    "lora": ["recipes/lora.py", "--config", "recipes/configs/demo_multilabel.yaml"],
}  # fmt: skip

# label -> its cue words; the first 4 are the common labels.
LABELS = {
    "refund": ("refund", "money back", "reimburse"),
    "delivery": ("delivery", "parcel", "courier"),
    "login": ("login", "password", "sign in"),
    "praise": ("love it", "great job", "thank you so much"),
    "invoice": ("invoice", "receipt"),
    "discount": ("coupon", "discount code"),
    "damaged": ("broken", "cracked", "damaged"),
    "size": ("too small", "too big", "wrong size"),
    "color": ("wrong colour", "faded colour"),
    "battery": ("battery", "charger"),
    "app_crash": ("app crashes", "app freezes"),
    "subscription": ("subscription", "renewal"),
    "address": ("new address", "moved house"),
    "gift": ("gift wrap", "birthday present"),
    "warranty": ("warranty", "guarantee"),
    "privacy": ("my data", "privacy"),
    "language": ("translation", "in spanish"),
    "accessibility": ("screen reader", "large print"),
    "store_hours": ("opening hours", "closing time"),
    "recipe": ("recipe", "ingredients"),
    "pet": ("my dog", "my cat"),
    "weather": ("rain", "snow storm"),
    "music": ("playlist", "song"),
    "sports": ("football", "tennis match"),
}
COMMON = 4
# Each label's chance to be on a row: the common ones 12% to 20%, the rare ones 1% to 4%, evenly spaced.
RATES = [0.12 + 0.08 * i / (COMMON - 1) for i in range(COMMON)] + [
    0.01 + 0.03 * i / (len(LABELS) - COMMON - 1) for i in range(len(LABELS) - COMMON)
]
FILLERS = ("hi", "hello", "today", "again", "please", "quick question", "about my order", "not sure",
           "yesterday", "as soon as you can", "thanks", "honestly", "by the way", "also", "so")  # fmt: skip


def make_rows(count: int, rng: random.Random) -> list[dict]:
    """`count` rows {"text", "labels"}: each label drawn on its own, at its rate in RATES (at most 3 a row)."""
    names = list(LABELS)
    rows = []
    for _ in range(count):
        labels = [name for name, rate in zip(names, RATES, strict=True) if rng.random() < rate][:3]
        cues = [rng.choice(LABELS[name]) for name in labels]
        if cues and rng.random() < 0.1:  # a label whose cue is missing: it stays in the labels
            cues.pop(rng.randrange(len(cues)))
        if rng.random() < 0.05:  # a cue of a label the row does not have
            cues.append(rng.choice(LABELS[rng.choice([n for n in names if n not in labels])]))
        words = cues + rng.sample(FILLERS, rng.randint(1, 3))
        rng.shuffle(words)
        rows.append({"text": " ".join(words), "labels": sorted(labels, key=names.index)})
    return rows


def write_data(directory: Path, train_rows: int, seed: int = 0) -> dict[str, Path]:
    """train (train_rows), validation and test (a quarter of it each) under `directory`; the same files for a seed."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, count in (("train", train_rows), ("validation", train_rows // 4), ("test", train_rows // 4)):
        files[split] = directory / f"{split}.jsonl"
        # Whole or not at all: a second copy of this script (another seed, run beside it) may be reading it.
        temporary = directory / f".{split}.jsonl.{os.getpid()}"
        temporary.write_text("".join(json.dumps(row) + "\n" for row in make_rows(count, rng)))
        temporary.replace(files[split])
    return files


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def prevalence(rows: list[dict]) -> dict[str, float]:
    return {name: sum(name in row["labels"] for row in rows) / len(rows) for name in LABELS}


def constant_macro_f1(rows: list[dict]) -> float:
    """The best constant predictor's macro-F1: every label on every row, F1 2p/(1+p) per label (0 if p is 0)."""
    return statistics.fmean(2 * p / (1 + p) for p in prevalence(rows).values())


def output_spread(predictions_file: Path) -> dict[str, float]:
    """How much the model's probabilities vary across rows: the mean and the least, over labels, of their
    standard deviation; and how many distinct label sets it predicts."""
    rows = read_jsonl(predictions_file)
    spreads = [
        statistics.pstdev(row["probabilities"][name] for row in rows) for name in rows[0]["probabilities"]
    ]
    return {
        "probability_std_mean": round(statistics.fmean(spreads), 4),
        "probability_std_min": round(min(spreads), 4),
        "distinct_predicted_sets": len({tuple(row["prediction"]) for row in rows}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", choices=sorted(COMMANDS), default="full_ft")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--train_rows", type=int, default=1200)
    parser.add_argument("--output_dir", default="outputs/rare_labels")
    parser.add_argument(
        "--name", default="rare-labels", help="the record's name: benchmarks/results/NAME-<UTC>.json"
    )
    parser.add_argument("--accelerate_config", default="accelerate_configs/cpu.yaml")
    args, recipe_options = parser.parse_known_args(argv)
    recipe_options = [option for option in recipe_options if option != "--"]
    output_dir = Path(args.output_dir)
    files = write_data(output_dir / "data", args.train_rows)
    validation = read_jsonl(files["validation"])

    sys.path.insert(0, str(BENCHMARKS))
    from publish import RESULTS_DIR, git_commit, machine

    started, git = time.monotonic(), git_commit()
    environment = {"WANDB_MODE": "offline", **os.environ}
    runs = []
    for seed in args.seeds:
        run_dir = output_dir / f"{args.name}-seed{seed}"
        reused = (run_dir / "results.json").is_file()  # a finished run is kept: rerunning resumes
        if not reused:
            command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", args.accelerate_config,
                       *COMMANDS[args.recipe], "--train_file", str(files["train"]), "--validation_file", str(files["validation"]),
                       "--test_file", str(files["test"]), *recipe_options, "--seed", str(seed),
                       "--output_dir", str(run_dir), "--overwrite_output_dir", "true"]  # fmt: skip
            print("$ " + " ".join(command), flush=True)
            if subprocess.run(command, env=environment).returncode != 0:
                return 1
        results = json.loads((run_dir / "results.json").read_text())
        runs.append(
            {
                "seed": seed,
                "eval_f1": results["eval_f1"],
                "eval_f1_micro": results.get("eval_f1_micro"),
                "eval_tuned_f1": results.get("eval_tuned_f1"),
                "test_f1": results.get("test_f1"),
                **output_spread(run_dir / "eval_predictions.jsonl"),
                "train_runtime_s": results.get("train_runtime_s"),
                "reused": reused,  # finished by an earlier call: wall_s does not include it
                "run_dir": str(run_dir),
            }
        )
    rates = prevalence(read_jsonl(files["train"]))
    f1 = [run["eval_f1"] for run in runs]
    record = {
        "name": args.name,
        "command": " ".join(
            ["python", "benchmarks/rare_labels.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "recipe_command": " ".join(["accelerate launch", *COMMANDS[args.recipe], *recipe_options]),
        "data": {
            "labels": len(LABELS),
            "rows": {split: len(read_jsonl(path)) for split, path in files.items()},
            "labels_under_5pct_of_train": sum(rate < 0.05 for rate in rates.values()),
            "train_prevalence": {name: round(rate, 4) for name, rate in rates.items()},
        },
        "constant_macro_f1": round(constant_macro_f1(validation), 4),
        "runs": runs,
        "eval_f1_mean": statistics.fmean(f1),
        "eval_f1_std": statistics.stdev(f1) if len(f1) > 1 else None,
        "beats_constant_every_seed": all(value > constant_macro_f1(validation) for value in f1),
        "wall_s": round(time.monotonic() - started, 1),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "git": git,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{args.name}-{datetime.now(timezone.utc).strftime('%Y-%m-%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(
        f"{len(LABELS)} labels ({record['data']['labels_under_5pct_of_train']} under 5% of train); validation "
        f"macro-F1 at 0.5 over seeds {args.seeds}: {', '.join(f'{v:.4f}' for v in f1)} (constant predictor "
        f"{record['constant_macro_f1']:.4f}); output std per label, mean: "
        f"{', '.join(str(run['probability_std_mean']) for run in runs)}. Record: {path.relative_to(REPO_ROOT)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
