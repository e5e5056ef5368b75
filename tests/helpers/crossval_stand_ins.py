"""The cross-validation's tests without training: small training files of every task type, a
stand-in launcher that writes what a fold's run writes, and the settings and out-of-fold file of a
crossval. Used by tests/workbench/test_crossval.py, tests/workbench/test_parallel.py and the parallel worker.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

from recipes_lib.results import RESULTS_FILE as RUN_RESULTS_FILE
from recipes_workbench.crossval.oof import OOF_FILE
from recipes_workbench.crossval.runner import CrossvalSettings
from recipes_workbench.sweep.trials import COMPLETE, Outcome
from tests.helpers.data import learnable_rows, write_csv, write_jsonl
from tests.helpers.repo import ACCELERATE_CONFIGS, RECIPES_DIR


def single_label_file(directory: Path, rows: int = 60, groups: int | None = None) -> Path:
    """Rows of two classes, 'cool' and 'warm'; with `groups`, a customer column."""
    records = learnable_rows(rows, seed=3)
    if groups is None:
        return write_csv(directory / "train.csv", records)
    with_groups = [(text, label, f"customer-{i % groups}") for i, (text, label) in enumerate(records)]
    return write_csv(directory / "train.csv", with_groups, header=("text", "label", "customer"))


TEAMS = ["billing", "shipping", "technical"]
# Every way the recipe reads a multi-label column (data/labels.py): the data arguments it needs, the class
# names it gives the model, and a row's classes (names from TEAMS) written that way.
MULTI_LABEL_FORMATS = {
    "names": ({}, TEAMS, lambda classes: classes),
    "ids": ({}, ["0", "1", "2"], lambda classes: [TEAMS.index(c) for c in classes]),
    "multi_hot": ({}, ["0", "1", "2"], lambda classes: [int(team in classes) for team in TEAMS]),
    "delimited": ({"label_delimiter": ";"}, TEAMS, lambda classes: ";".join(classes)),
}


def multi_label_value(classes: list[str], label_format: str = "names"):
    return MULTI_LABEL_FORMATS[label_format][2](classes)


def multi_label_file(directory: Path, rows: int = 40, label_format: str = "names") -> Path:
    rng = random.Random(4)
    records = [
        {
            "text": f"ticket {i}",
            "labels": multi_label_value(sorted(rng.sample(TEAMS, rng.randint(1, 2))), label_format),
        }
        for i in range(rows)
    ]
    if label_format == "delimited":
        return write_csv(
            directory / "train.csv", [(r["text"], r["labels"]) for r in records], header=("text", "labels")
        )
    return write_jsonl(directory / "train.jsonl", records)


def classes_in(value, label_format: str) -> list[str]:
    """A row's classes as TEAMS names, from the value as the file holds it (a CSV cell: its text)."""
    if label_format == "delimited":
        return value.split(";")
    if label_format == "multi_hot":
        return [team for team, flag in zip(TEAMS, value, strict=True) if flag]
    if label_format == "ids":
        return [TEAMS[i] for i in value]
    return value


def regression_file(directory: Path, rows: int = 40) -> Path:
    rng = random.Random(5)
    return write_csv(directory / "train.csv", [(f"ticket {i}", round(rng.random(), 3)) for i in range(rows)],
                     header=("text", "urgency"))  # fmt: skip


# --- the folds -------------------------------------------------------------------------------------------


def held_out_of(command: list[str]) -> Path:
    return Path(command[command.index("--validation_file") + 1])


def read_rows(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


class FoldStandIn:
    """Writes what a fold's run writes (eval_predictions.jsonl for its held-out file, results.json) and
    launches nothing. Predictions: the given label, confidently, so they can be checked row by row."""

    def __init__(self, task: str = "single", interrupt_at: int | None = None, label_format: str = "names"):
        self.task, self.interrupt_at, self.launched = task, interrupt_at, []
        self.label_format = label_format

    def __call__(self, trial, config) -> Outcome:
        if self.interrupt_at is not None and len(self.launched) == self.interrupt_at:
            self.interrupt_at = None
            self.interrupted = trial.fold
            raise KeyboardInterrupt
        self.launched.append(trial.fold)
        assert trial.command[trial.command.index("--train_file") + 1].endswith(
            f"folds/{trial.fold}/train" + held_out_of(trial.command).suffix
        )
        rows = read_rows(held_out_of(trial.command))
        trial.output_dir.mkdir(parents=True, exist_ok=True)
        with open(trial.output_dir / "eval_predictions.jsonl", "w") as handle:
            for row in rows:
                handle.write(json.dumps(self.prediction(row)) + "\n")
        value = round(0.8 + 0.01 * trial.fold, 4)
        results = {config.metric: value, "text_columns": ["text"]}
        if "--test_file" in trial.command:
            results.update(self.score_test(trial))
        (trial.output_dir / RUN_RESULTS_FILE).write_text(json.dumps(results))
        # What a real fold leaves besides its predictions: its weights and a checkpoint.
        (trial.output_dir / "model.safetensors").write_bytes(b"weights")
        (trial.output_dir / "checkpoint-4").mkdir(exist_ok=True)
        (trial.output_dir / "checkpoint-4" / "model.safetensors").write_bytes(b"weights")
        return Outcome(COMPLETE, value=value, exit_code=0, wall_s=1.0, results={config.metric: value})

    def prediction(self, row: dict) -> dict:
        if self.task == "regression":
            return {"prediction": float(row["urgency"])}
        if self.task == "multi":
            names = MULTI_LABEL_FORMATS[self.label_format][1]
            given = set(classes_in(row["labels"], self.label_format))
            return {
                "prediction": [name for name, team in zip(names, TEAMS, strict=True) if team in given],
                "probabilities": {
                    name: 0.9 if team in given else 0.1 for name, team in zip(names, TEAMS, strict=True)
                },
            }
        other = {"cool": "warm", "warm": "cool"}[row["label"]]
        return {"prediction": row["label"], "probabilities": {row["label"]: 0.9, other: 0.1}}

    def score_test(self, trial) -> dict:
        """Each fold's model right on every test row but a third of them (row % 3 == fold), and so
        each differently wrong: 0.9 for the right class, or 0.4 where it is wrong. The three folds
        averaged are right on every row ((0.9 + 0.9 + 0.4) / 3 > 0.5)."""
        test_rows = read_rows(Path(trial.command[trial.command.index("--test_file") + 1]))
        lines, right = [], 0
        for index, row in enumerate(test_rows):
            label = row.get("label") or "cool"
            other = {"cool": "warm", "warm": "cool"}[label]
            p = 0.4 if index % 3 == trial.fold else 0.9
            lines.append(
                {
                    "prediction": label if p > 0.5 else other,
                    "probabilities": {label: p, other: round(1 - p, 6)},
                }
            )
            right += p > 0.5
        with open(trial.output_dir / "test_predictions.jsonl", "w") as handle:
            handle.writelines(json.dumps(line) + "\n" for line in lines)
        labelled = bool(test_rows) and bool(test_rows[0].get("label"))
        return {"test_split": "test.csv", **({"test_accuracy": right / len(test_rows)} if labelled else {})}


def settings_for(
    tmp_path: Path, train: Path, folds: int = 3, keep_fold_models: bool = False, **data
) -> CrossvalSettings:
    recipe_args = (("test_file", (str(data["test_file"]),)),) if "test_file" in data else ()
    return CrossvalSettings(
        recipe="full_ft", output_dir=str(tmp_path / "cv"), folds=folds, seed=7,
        data=(("train_file", str(train)), *data.items()), accelerate_config=str(ACCELERATE_CONFIGS / "cpu.yaml"),
        recipes_dir=str(RECIPES_DIR), recipe_args=recipe_args, keep_fold_models=keep_fold_models,
    )  # fmt: skip


def read_oof(settings: CrossvalSettings) -> list[dict]:
    return [json.loads(line) for line in (Path(settings.output_dir) / OOF_FILE).read_text().splitlines()]
