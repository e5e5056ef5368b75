"""Shared fixtures: a tiny BERT and tiny datasets the tests build themselves, all offline and on CPU."""

from __future__ import annotations

import csv
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from recipes_lib.config.registry import RECIPES as REGISTERED_RECIPES

REPO_ROOT = Path(__file__).resolve().parent.parent
# Every recipe, from the registry the CLI and the Makefile read (recipes_lib/config/registry.py).
RECIPES = tuple(REGISTERED_RECIPES)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The learnable task: the label is the colour word in the sentence; everything else is noise.
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
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def learnable_rows(count: int, seed: int) -> list[tuple[str, str]]:
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


def build_tiny_bert(
    directory: Path, hidden_size: int = 32, layers: int = 2, intermediate_size: int = 64
) -> Path:
    """A randomly initialised BERT with a WordPiece vocabulary of the test words, saved like a Hub model."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    words = sorted(set(COLOURS) | set(NOISE) | set("abcdefghijklmnopqrstuvwxyz0123456789.,!?'"))
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + words)}
    # transformers 5 builds the WordPiece tokenizer from a vocab mapping (`vocab_file=` is gone).
    tokenizer = BertTokenizerFast(vocab=vocab, do_lower_case=True, model_max_length=128)
    config = BertConfig(
        vocab_size=len(SPECIAL_TOKENS) + len(words),
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=intermediate_size,
        max_position_embeddings=128,
        # Dropout off: runs are deterministic, so resumed and reloaded models can be compared exactly.
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    BertForSequenceClassification(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def learnable_data(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("learnable-data")
    return {
        "train": write_csv(directory / "train.csv", learnable_rows(256, seed=1)),
        "validation": write_csv(directory / "validation.csv", learnable_rows(64, seed=2)),
    }


def run_recipe_process(
    recipe: str, args: list[str], accelerate_config: str = "cpu.yaml", timeout: int = 600, env=None
):
    """Run a recipe the way a user does: `accelerate launch --config_file ... recipes/X.py ARGS`.

    `env`: the process's whole environment (default: this one's).
    """
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO_ROOT / "accelerate_configs" / accelerate_config),
        str(REPO_ROOT / "recipes" / f"{recipe}.py"), *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT, env=env)


def tiny_run_args(tiny_bert: Path, data: dict[str, Path], output_dir: Path, *extra: str) -> list[str]:
    """Arguments for a fast run of any recipe on the tiny model and the learnable data."""
    return [
        "--model_name_or_path", str(tiny_bert),
        "--train_file", str(data["train"]),
        "--validation_file", str(data["validation"]),
        "--output_dir", str(output_dir),
        "--max_seq_length", "32",
        "--per_device_train_batch_size", "16",
        "--learning_rate", "2e-3",
        "--num_train_epochs", "10",
        "--save_strategy", "no",
        "--report_to", "none",
        "--disable_tqdm", "true",
        *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def one_thread():
    """One CPU thread in this process and in the recipe processes it starts (for the whole module).

    Runs are then bit-for-bit repeatable (resumed == uninterrupted), and bitsandbytes' CPU 8-bit
    optimizer, which issues many small ops per tensor, does not stall on OpenMP threads
    competing for the two shared cores of the test machine.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        yield
    torch.set_num_threads(threads)


def load_recipe(name: str):
    """recipes/<name>.py imported from its file (its `__main__` block does not run): `SPEC`, `main(argv)`."""
    import importlib.util

    path = REPO_ROOT / "recipes" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_recipe_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
