"""Running a recipe from a test: its arguments (one builder), in this process, or through `accelerate launch`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.repo import ACCELERATE_CONFIGS, REPO_ROOT, load_recipe, recipe_script

RECORD_RESULTS_WRITES = Path(__file__).resolve().parent / "scripts" / "record_results_writes.py"

# A short run: two optimizer steps of 8 examples at the recipe's own learning rate, no evaluation
# during training and 16 examples at the end, nothing saved but the model, any earlier run replaced.
QUICK: dict[str, Any] = {
    "steps": 2,
    "epochs": None,
    "learning_rate": None,
    "batch_size": 8,
    "eval_strategy": "no",
    "max_eval_samples": 16,
    "overwrite": True,
}

# For a run whose measured peak is compared with the plan (after **QUICK, which it overrides): 16
# examples, so two steps an epoch, and three steps. The third is the second epoch's first, which
# holds the longest example again (the training sampler puts its step first in every epoch), now
# with the optimizer state the first step made: the moment the plan is for. Two steps miss it
# under the full-model recipes' default `--length_grouping wide`, which sorts a small epoch whole:
# no other batch is as long as the first, which runs before the optimizer state exists, so the
# measured peak is a shorter batch's and falls below the plan (11% on the tiny ELECTRA).
INTO_SECOND_EPOCH = ("--max_train_samples", "16", "--max_steps", "3")


def run_args(
    model: Path | str,
    data: dict[str, Path],
    output_dir: Path,
    *extra: str,
    steps: int | None = None,
    epochs: int | None = 10,
    batch_size: int = 16,
    learning_rate: str | None = "2e-3",
    eval_strategy: str | None = None,
    max_eval_samples: int | None = None,
    save_strategy: str = "no",
    overwrite: bool = False,
    report_to: str | None = "none",
) -> list[str]:
    """A recipe's command-line arguments for a run on a tiny model and data ({"train": ..., "validation": ...}).

    The defaults learn the task: 10 epochs of batch 16 at lr 2e-3, evaluated as the recipe
    evaluates. `**QUICK` is the short run. None leaves an option out (the recipe's default):
    `steps` (--max_steps), `epochs`, `learning_rate`, `eval_strategy`, `max_eval_samples`,
    `report_to` (None: W&B, the recipes' default). `extra` comes last, so it overrides any of these.
    """
    optional = {
        "--learning_rate": learning_rate,
        "--num_train_epochs": epochs,
        "--max_steps": steps,
        "--max_eval_samples": max_eval_samples,
        "--eval_strategy": eval_strategy,
    }
    return [
        "--model_name_or_path", str(model),
        "--train_file", str(data["train"]),
        "--validation_file", str(data["validation"]),
        "--output_dir", str(output_dir),
        *(("--overwrite_output_dir", "true") if overwrite else ()),
        "--max_seq_length", "32",
        "--per_device_train_batch_size", str(batch_size),
        *(item for flag, value in optional.items() if value is not None for item in (flag, str(value))),
        "--save_strategy", save_strategy,
        *(("--report_to", report_to) if report_to is not None else ()),
        "--disable_tqdm", "true",
        *extra,
    ]  # fmt: skip


# The distill recipe's own options: the teacher, trained by full_ft, does not take them.
DISTILL_OPTIONS = ("--teacher", "--distill_temperature", "--distill_alpha", "--transfer_file")


def with_teacher(recipe_name: str, args: list[str]) -> list[str]:
    """`args`, plus a --teacher for the distill recipe when they name none (the tests that run every recipe).

    The teacher is a two-step full_ft run on the same model and data, in OUTPUT_DIR-teacher beside
    the run (reused when it finished), so it has the run's classes and task whatever the data.
    """
    if recipe_name != "distill" or "--teacher" in args:
        return args
    output_dir = Path(args[args.index("--output_dir") + 1])
    teacher_dir = output_dir.with_name(f"{output_dir.name}-teacher")
    if not (teacher_dir / "results.json").is_file():
        teacher_args = []
        skip = False
        for item in args:
            if skip:
                skip = False
            elif item in DISTILL_OPTIONS or item in (
                "--resume_from_checkpoint",
                "--save_steps",
            ):  # it saves nothing
                skip = True
            else:
                teacher_args.append(item)
        teacher_args[teacher_args.index("--output_dir") + 1] = str(teacher_dir)
        teacher_args += ["--max_steps", "2", "--eval_strategy", "no", "--save_strategy", "no"]
        teacher_args += ["--overwrite_output_dir", "true", "--report_to", "none"]
        load_recipe("full_ft").main(teacher_args)
    return [*args, "--teacher", str(teacher_dir)]


def run_in_process(recipe_name: str, args: list[str]) -> dict[str, Any]:
    """The recipe script's own main(args), in this process: results.json's contents.

    Faster than `accelerate launch` (no new interpreter, no second import of torch), and the same
    code the launched script runs.
    """
    # main returns the run's RunResults; the tests read it as the file's keys.
    return load_recipe(recipe_name).main(with_teacher(recipe_name, args)).to_dict()


def accelerate_launch_command(
    script: Path, args: list[str], accelerate_config: str = "cpu.yaml", *launch_options: str
) -> list[str]:
    """`accelerate launch --config_file accelerate_configs/CONFIG [OPTIONS] SCRIPT ARGS`, with this Python."""
    args = with_teacher(script.stem, args)
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(ACCELERATE_CONFIGS / accelerate_config),
        *launch_options,
        str(script), *args,
    ]  # fmt: skip


def run_recipe_process(
    recipe: str, args: list[str], accelerate_config: str = "cpu.yaml", timeout: int = 600, env=None
) -> subprocess.CompletedProcess:
    """Run a recipe the way a user does: `accelerate launch --config_file ... recipes/X.py ARGS`.

    `env`: the process's whole environment (default: this one's).
    """
    command = accelerate_launch_command(recipe_script(recipe), args, accelerate_config)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT, env=env)


def run_recording_results_writes(
    recipe: str, args: list[str], ledger: Path, accelerate_config: str, *launch_options: str
) -> subprocess.CompletedProcess:
    """`accelerate launch` a recipe through scripts/record_results_writes.py, which logs each results.json
    write (the writing process's RANK) in `ledger`; the run must succeed."""
    args = with_teacher(recipe, args)
    command = accelerate_launch_command(
        RECORD_RESULTS_WRITES, [str(recipe_script(recipe)), *args], accelerate_config, *launch_options
    )
    # One thread per process, as torchrun gives each of the 2 processes: on the 2 shared cores of the
    # test machine a multi-threaded 1-process run stalls on busy cores (measured: 55 s; 15 s with one).
    environment = {**os.environ, "RESULTS_WRITE_LEDGER": str(ledger), "OMP_NUM_THREADS": "1"}
    completed = subprocess.run(
        command, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, env=environment
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed
