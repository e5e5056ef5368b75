"""The tiny data the tests train on, built in the test: the learnable colour task and its files.

The label is the colour word in the sentence ('warm' or 'cool'); every other word is noise. The
multi-label and regression files (`multi_label_files`, `regression_files`) use one or two colour
words: the classes are the kinds of colour in the sentence; the score is the share of warm colours
among two slots, plus 0.25 when 'very' is there.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

COLOURS = {
    "red": "warm",
    "orange": "warm",
    "yellow": "warm",
    "blue": "cool",
    "green": "cool",
    "purple": "cool",
}
NOISE = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "ran",
    "on",
    "under",
    "table",
    "chair",
    "quickly",
    "slowly",
    "big",
    "small",
    "today",
    "it",
    "was",
    "very",
]


def learnable_rows(count: int, seed: int) -> list[tuple[str, str]]:
    """(text, label) rows of the single-label task: one colour word among 2 to 9 noise words."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        colour = rng.choice(sorted(COLOURS))
        words = rng.sample(NOISE, rng.randint(2, 9))
        words.insert(rng.randint(0, len(words)), colour)
        rows.append((" ".join(words), COLOURS[colour]))
    return rows


def write_csv(path: Path, rows, header=("text", "label"), delimiter=",") -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def task_rows(count: int, seed: int) -> list[tuple[str, list[str], float]]:
    """(text, classes, score) rows: the multi-label classes and the regression score of one sentence."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        words = rng.sample(NOISE, rng.randint(2, 8))
        colours = rng.sample(sorted(COLOURS), rng.randint(1, 2))
        for colour in colours:
            words.insert(rng.randint(0, len(words)), colour)
        classes = {COLOURS[colour] for colour in colours}
        warm_share = sum(COLOURS[colour] == "warm" for colour in colours) / 2
        rows.append(
            (" ".join(words), sorted(classes), round(warm_share + (0.25 if "very" in words else 0.0), 2))
        )
    return rows


def multi_label_files(directory: Path, train: int = 256, validation: int = 64) -> dict[str, Path]:
    """train.jsonl and validation.jsonl of the multi-label task: each label a list of classes."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        split: write_jsonl(
            directory / f"{split}.jsonl", [{"text": t, "label": c} for t, c, _ in task_rows(n, seed)]
        )
        for split, n, seed in (("train", train, 1), ("validation", validation, 2))
    }


def regression_files(directory: Path, train: int = 256, validation: int = 64) -> dict[str, Path]:
    """train.csv and validation.csv of the regression task: each label a score."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        split: write_csv(directory / f"{split}.csv", [(t, s) for t, _, s in task_rows(n, seed)])
        for split, n, seed in (("train", train, 1), ("validation", validation, 2))
    }


def skewed_rows(count: int, minority_share: float, seed: int):
    """The colour task with 'cool' rare: a learner that ignores the minority still scores well on accuracy."""
    rng = random.Random(seed)
    warm = sorted(c for c, kind in COLOURS.items() if kind == "warm")
    cool = sorted(c for c, kind in COLOURS.items() if kind == "cool")
    rows = []
    for _ in range(count):
        kind = "cool" if rng.random() < minority_share else "warm"
        words = rng.sample(NOISE, rng.randint(2, 6))
        words.insert(rng.randint(0, len(words)), rng.choice(cool if kind == "cool" else warm))
        rows.append((" ".join(words), kind))
    return rows
