"""How well `recipes-lib label-issues` finds wrong labels: a fraction of the demo's training labels flipped
at a fixed seed, a cross-validation of the noisy file, cleanlab's flags against the flipped rows.

    python benchmarks/label_noise.py --output_dir outputs/label_noise [--fraction 0.1] [--folds 5]
        [--seed 0] [--retrain_seeds 0 1 2] [--accelerate_config accelerate_configs/cpu.yaml]
        [-- recipe options, e.g. --num_train_epochs 1]

Writes OUTPUT_DIR/noisy_train.csv (the flipped rows listed in flipped_rows.json), runs `recipes-lib
crossval` and `recipes-lib label-issues` on it (OUTPUT_DIR/crossval), and prints and writes
OUTPUT_DIR/label_noise.json: the flagged rows' precision and recall against the flipped ones, the
cross-validation's figures (and, with a --test_file among the recipe options, each fold's and the folds'
ensemble's on it), and the wall time. With --retrain_seeds, the recipe is then trained once per seed on
the noisy file and once on the cleaned one (`--drop_label_issues`), both scored on the config's validation
file, and the two sets of figures are compared with the sweep's Welch test (sweep/report.py). Rerun the
same command to resume: a finished cross-validation fold or retraining run is not run again.
`make label-noise-demo` runs it with the demo's settings.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path


def flip_labels(labels: list[str], fraction: float, seed: int) -> tuple[list[str], list[int]]:
    """`fraction` of the rows (rounded) given another class, drawn uniformly: (the new labels, the flipped rows)."""
    rng = random.Random(seed)
    classes = sorted(set(labels))
    flipped = sorted(rng.sample(range(len(labels)), round(fraction * len(labels))))
    noisy = list(labels)
    for row in flipped:
        noisy[row] = rng.choice([name for name in classes if name != labels[row]])
    return noisy, flipped


def detection(flagged: set[int], flipped: set[int]) -> dict[str, float | int]:
    """Precision (flagged rows that were flipped) and recall (flipped rows that were flagged)."""
    hits = len(flagged & flipped)
    return {
        "flipped": len(flipped),
        "flagged": len(flagged),
        "flagged_and_flipped": hits,
        "precision": hits / len(flagged) if flagged else 0.0,
        "recall": hits / len(flipped) if flipped else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train_file", default="data/support_tickets/train.csv")
    parser.add_argument("--config", default="recipes/configs/demo.yaml")
    parser.add_argument("--recipe", default="full_ft")
    parser.add_argument("--output_dir", default="outputs/label_noise")
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--accelerate_config", default="accelerate_configs/cpu.yaml")
    parser.add_argument("--retrain_seeds", type=int, nargs="*", default=[],
                        help="train on the noisy and on the cleaned file once per seed and compare")  # fmt: skip
    args, recipe_options = parser.parse_known_args(argv)
    recipe_options = [option for option in recipe_options if option != "--"]
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    with open(args.train_file, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    noisy, flipped = flip_labels([row["label"] for row in rows], args.fraction, args.seed)
    noisy_file = output_dir / "noisy_train.csv"
    with open(noisy_file, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({**row, "label": label} for row, label in zip(rows, noisy, strict=True))
    (output_dir / "flipped_rows.json").write_text(json.dumps(flipped) + "\n")

    from publish import git_commit, machine

    started = time.monotonic()
    git = git_commit()  # at the start: the commit the runs run from (dirty: src or recipes changed)
    crossval_dir = output_dir / "crossval"
    cli = [sys.executable, "-m", "recipes_workbench.cli"]
    crossval = [*cli, "crossval", args.recipe, "--folds", str(args.folds), "--seed", str(args.seed),
                "--output_dir", str(crossval_dir), "--accelerate_config", args.accelerate_config,
                "--config", args.config, "--train_file", str(noisy_file), *recipe_options]  # fmt: skip
    for command in (crossval, [*cli, "label-issues", str(crossval_dir), "--drop_label_issues"]):
        print("$ " + " ".join(command), flush=True)
        if subprocess.run(command).returncode != 0:
            return 1
    with open(crossval_dir / "label_issues.csv", newline="", encoding="utf-8") as handle:
        flagged = {int(line["row"]) for line in csv.DictReader(handle)}
    crossval_results = json.loads((crossval_dir / "crossval_results.json").read_text())
    record = {
        "command": " ".join(
            ["python", "benchmarks/label_noise.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "train_file": args.train_file,
        "rows": len(rows),
        "fraction": args.fraction,
        "seed": args.seed,
        "recipe": args.recipe,
        "folds": args.folds,
        "recipe_options": recipe_options,
        crossval_results["metric"] + "_mean": crossval_results["mean"],
        crossval_results["metric"] + "_std": crossval_results["std"],
        crossval_results["metric"] + "_per_fold": crossval_results.get("per_fold"),
        "test": crossval_results.get("test"),
        **detection(flagged, set(flipped)),
        # This command's own time: a resumed cross-validation counts only what this run did.
        "wall_s": round(time.monotonic() - started, 1),
    }
    if args.retrain_seeds:
        record["retrained"] = retrain(
            args, recipe_options, noisy_file, crossval_dir, crossval_results["metric"]
        )
        if record["retrained"] is None:
            return 1
        record["wall_s"] = round(time.monotonic() - started, 1)
    # The machine (CPU model and flags, versions, load) and the commit, as every record under benchmarks/results.
    record.update(date=datetime.now(timezone.utc).isoformat(timespec="seconds"), machine=machine(), git=git)
    (output_dir / "label_noise.json").write_text(json.dumps(record, indent=2) + "\n")
    print(
        f"{record['flipped']} of {len(rows)} labels flipped (seed {args.seed}); {record['flagged']} rows flagged: "
        f"precision {record['precision']:.3f}, recall {record['recall']:.3f}. {crossval_dir / 'label_issues.csv'}"
    )
    for line in retrained_lines(record.get("retrained")):
        print(line)
    return 0


def retrain(
    args, recipe_options: list[str], noisy_file: Path, crossval_dir: Path, metric: str
) -> dict | None:
    """The recipe trained on the noisy file and on the cleaned one, once per seed: each file's figures on the
    validation file and Welch's test of the difference. None if a run failed (its output says why)."""
    from recipes_workbench.sweep.report import compare_pair

    cleaned_file = next(crossval_dir.glob("train_cleaned.*"))
    values: dict[str, list[float]] = {}
    for name, train_file in (("noisy", noisy_file), ("cleaned", cleaned_file)):
        values[name] = []
        for seed in args.retrain_seeds:
            run_dir = Path(args.output_dir) / "retrain" / f"{name}-seed{seed}"
            if not (run_dir / "results.json").is_file():  # a finished run is kept: rerunning resumes
                command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", args.accelerate_config,
                           f"recipes/{args.recipe}.py", "--config", args.config, "--train_file", str(train_file),
                           *recipe_options, "--seed", str(seed), "--output_dir", str(run_dir),
                           "--overwrite_output_dir", "true"]  # fmt: skip
                print("$ " + " ".join(command), flush=True)
                if subprocess.run(command).returncode != 0:
                    return None
            values[name].append(json.loads((run_dir / "results.json").read_text())[metric])
    figures = {
        name: {
            "values": runs,
            "mean": statistics.fmean(runs),
            "std": statistics.stdev(runs) if len(runs) > 1 else None,
        }
        for name, runs in values.items()
    }
    pair = compare_pair(
        {"recipe": "cleaned", "validation": figures["cleaned"]},
        {"recipe": "noisy", "validation": figures["noisy"]},
        "validation",
        metric,
    )
    return {
        "seeds": args.retrain_seeds,
        "metric": metric,
        "cleaned_file": str(cleaned_file),
        **figures,
        "pair": pair,
    }


def retrained_lines(retrained: dict | None) -> list[str]:
    if not retrained:
        return []

    def figure(name: str) -> str:
        spread = retrained[name]["std"]
        return f"{retrained[name]['mean']:.4f}" + (f" ± {spread:.4f}" if spread is not None else "")

    return [
        f"Retrained over seeds {retrained['seeds']} ({retrained['metric']} on the validation file): "
        f"noisy {figure('noisy')}, cleaned {figure('cleaned')}; {retrained['pair']['verdict']}."
    ]


if __name__ == "__main__":
    sys.exit(main())
