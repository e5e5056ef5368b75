"""One trial of a sweep: a fresh `accelerate launch` of its recipe script (nothing shared between trials
in the sweep's process), waited for, its outcome read from its exit code, log and results.json; and the
processes of a trial whose sweep died, stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from recipes_lib.credentials import ENVIRONMENT_OF, canonical
from recipes_lib.results import RESULT_KEYS, RESULTS_FILE, read_results
from recipes_lib.tracking import names
from recipes_workbench.shared import CROSSVAL_RESULTS_FILE
from recipes_workbench.sweep.config import SweepConfig, format_lr

SEARCH, SEEDS = "search", "seeds"
# A trial's status: running while its process runs, then one of the other three.
RUNNING, COMPLETE, FAILED, INTERRUPTED = "running", "complete", "failed", "interrupted"
# The results.json figures a trial keeps in the study (the report reads them from there).
KEPT_KEYS = (
    "recipe", "model_name_or_path", "eval_split", "test_split", "peak_memory_gib", "peak_memory_source",
    "tensor_peak_gib", "optimizer_state_bytes", "params_trainable", "train_runtime_s", "epochs",
    "train_samples_per_s", "device", "precision",
)  # fmt: skip
# How accelerate launch reports the recipe's own exit code (it exits 1 itself): the single-process
# launcher's CalledProcessError, or torchrun's failure table.
EXIT_STATUS = re.compile(
    r"returned non-zero exit status (-?\d+)|exitcode\s*:\s*(-?\d+)|died with <Signals\.\w+: (\d+)>"
)
OUT_OF_MEMORY = re.compile(r"OutOfMemoryError|out of memory|CUBLAS_STATUS_ALLOC_FAILED", re.IGNORECASE)


@dataclass
class Trial:
    recipe: str
    phase: str
    learning_rate: float
    seed: int
    output_dir: Path
    log: Path
    command: list[str]
    chosen: str | None = None  # the seeds phase: the setting the search chose, "lora lr=0.001"
    # What its worker adds to the environment: CUDA_VISIBLE_DEVICES, or OMP_NUM_THREADS (parallel.py).
    environment: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.recipe} {self.phase} lr={format_lr(self.learning_rate)} seed={self.seed}"


@dataclass
class Outcome:
    status: str  # COMPLETE or FAILED
    reason: str = ""
    value: float | None = None
    exit_code: int | None = None
    wall_s: float = 0.0
    results: dict[str, Any] = field(default_factory=dict)


# --- one trial: launched, waited for, its outcome read -----------------------------------------------


def recipe_exit_code(launcher_code: int, log_text: str) -> int:
    """The recipe's own exit code: accelerate launch exits 1 for any failure and names the real code in its log."""
    if launcher_code <= 0:
        return launcher_code
    found = EXIT_STATUS.findall(log_text)
    if not found:
        return launcher_code
    status, torchrun, died = found[-1]
    return int(status or torchrun) if (status or torchrun) else -int(died)


def last_error(log_text: str) -> str:
    """The recipe's one-paragraph error ('error: ...'), or the log's last line that says what went wrong."""
    paragraphs = re.findall(r"^(?:error|interrupted): (.+)$", log_text, re.MULTILINE)
    if paragraphs:
        return paragraphs[-1].strip()
    lines = [line.strip() for line in log_text.splitlines() if re.search(r"Error|error|Killed", line)]
    return lines[-1][:500] if lines else "no error message in the log"


def failure_reason(exit_code: int, log_text: str) -> str:
    """Why a trial failed, in words: diverged (exit code 3), out of memory, killed, bad input, other."""
    message = last_error(log_text)
    if exit_code == 3:
        return f"diverged (TrainingDiverged, exit code 3): {message}"
    if OUT_OF_MEMORY.search(log_text):
        line = next((line for line in reversed(log_text.splitlines()) if OUT_OF_MEMORY.search(line)), "")
        return f"out of memory (exit code {exit_code}): {line.strip()[:300]}"
    if exit_code in (-9, 137):
        return "killed by SIGKILL (exit code -9): on a machine short of memory usually the kernel's out-of-memory killer"
    if exit_code == 2:
        return f"bad input (exit code 2): {message}"
    return f"exit code {exit_code}: {message}"


def read_outcome(trial: Trial, config: SweepConfig, launcher_code: int, wall_s: float) -> Outcome:
    log_text = trial.log.read_text(errors="replace") if trial.log.is_file() else ""
    if launcher_code != 0:
        code = recipe_exit_code(launcher_code, log_text)
        return Outcome(FAILED, failure_reason(code, log_text), exit_code=code, wall_s=wall_s)
    if config.folds is not None:
        return read_crossval_outcome(trial, config, wall_s)
    if not (trial.output_dir / RESULTS_FILE).is_file():
        return Outcome(
            FAILED, f"it exited 0 without writing {trial.output_dir / RESULTS_FILE}", 0, wall_s=wall_s
        )
    results = read_results(trial.output_dir)
    kept = {key: results.value(key) for key in KEPT_KEYS}
    kept[config.metric] = value = results.value(config.metric)
    # The metric's test twin, where the record has one (eval_tuned_f1 has none: its thresholds are validation's).
    kept[config.test_metric] = (
        results.value(config.test_metric) if config.test_metric in RESULT_KEYS else None
    )
    if value is None:
        reason = f"results.json has no value for {config.metric} (null or missing); choose a metric the runs report"
        return Outcome(FAILED, reason, exit_code=0, wall_s=wall_s, results=kept)
    return Outcome(COMPLETE, "", float(value), 0, wall_s, kept)


def read_crossval_outcome(trial: Trial, config: SweepConfig, wall_s: float) -> Outcome:
    """`folds`: the trial's crossval_results.json: its value the mean over the folds (their std beside it),
    the test figure the folds' mean on the test split, memory and speed those of its first fold's run."""
    path = trial.output_dir / CROSSVAL_RESULTS_FILE
    if not path.is_file():
        return Outcome(FAILED, f"it exited 0 without writing {path}", 0, wall_s=wall_s)
    crossval = json.loads(path.read_text())
    first_fold = read_results(Path(crossval["per_fold"][0]["output_dir"]))
    test = crossval.get("test") or {}
    kept = {key: first_fold.value(key) for key in KEPT_KEYS}
    kept.update({
        config.metric: crossval["mean"],
        f"{config.metric}_std_over_folds": crossval["std"],
        "folds": crossval["folds"],
        config.test_metric: test.get("mean"),
        f"{config.test_metric}_ensemble": test.get("ensemble"),
    })  # fmt: skip
    return Outcome(COMPLETE, "", float(crossval["mean"]), 0, wall_s, kept)


def launch_trial(trial: Trial, config: SweepConfig) -> Outcome:
    """Run the trial's `accelerate launch`, its output in its log; the outcome once it exits."""
    trial.log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(trial.log, "w") as log:
        log.write("$ " + " ".join(trial.command) + "\n")
        log.flush()
        process = subprocess.Popen(
            trial.command, stdout=log, stderr=subprocess.STDOUT, env=trial_environment(trial, config)
        )
        try:
            code = process.wait()
        except BaseException:  # Ctrl-C or SIGTERM: the trial goes with the sweep
            # The launcher and the recipe under it (the single-process launcher does not pass SIGTERM on).
            with contextlib.suppress(psutil.Error):
                parent = psutil.Process(process.pid)
                stop_processes([parent, *parent.children(recursive=True)])
            raise
    return read_outcome(trial, config, code, time.monotonic() - start)


def trial_environment(trial: Trial, config: SweepConfig) -> dict[str, str]:
    """This environment, the secret options the trial's command leaves out (--hub_token: HF_TOKEN,
    credentials.py), its worker's settings, and the sweep keys W&B's config gets."""
    options = (*config.args, *config.recipe(trial.recipe).args)
    secrets = {
        ENVIRONMENT_OF[canonical(key)]: " ".join(values)
        for key, values in options
        if canonical(key) in ENVIRONMENT_OF
    }
    return {
        **os.environ,
        **secrets,
        **trial.environment,
        "PYTHONUNBUFFERED": "1",
        names.SWEEP_CONFIG_VARIABLE: json.dumps(
            {names.SWEEP: config.group, names.SWEEP_PHASE: trial.phase}
            | ({names.SWEEP_CHOSEN: trial.chosen} if trial.chosen else {})
        ),
    }


def stop_processes(processes: list[psutil.Process], grace_s: float = 20.0) -> None:
    for member in processes:
        with contextlib.suppress(psutil.Error):
            member.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for member in alive:
        with contextlib.suppress(psutil.Error):
            member.kill()


def stop_orphans(output_dir: str | None) -> list[int]:
    """Kill what still runs of a trial whose sweep was killed (its launcher and recipe processes
    outlive it): the processes whose command line names the trial's --output_dir."""
    if not output_dir:
        return []
    killed = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = process.info.get("cmdline") or []
        if process.pid != os.getpid() and any(
            flag == "--output_dir" and value == output_dir
            for flag, value in zip(cmdline, cmdline[1:], strict=False)
        ):
            with contextlib.suppress(psutil.Error):
                process.kill()
                killed.append(process.pid)
    return killed
