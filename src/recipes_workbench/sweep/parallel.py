"""Trials in parallel, `--workers N` on one machine, `--storage URL` shared between machines: each phase's
values enqueued in one Optuna study, taken by worker threads (docs/sweeps.md, "Trials in parallel").
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from recipes_lib.errors import ConfigError
from recipes_workbench.sweep.study import fail_stale_trials_of
from recipes_workbench.sweep.trials import stop_processes

LIVE = ("WAITING", "RUNNING")
POLL_S = 0.5  # how often a worker with nothing to take looks again while others' trials run


@dataclass(frozen=True)
class Workers:
    """How many trials at once on this machine, and the study's storage when shared with others."""

    count: int = 1
    # An RDB URL (postgresql://, mysql://); None: the SQLite file beside the outputs.
    storage: str | None = None

    @property
    def shared(self) -> bool:
        return self.storage is not None

    @property
    def parallel(self) -> bool:
        """Whether another trial of the study can run while one of this process's does."""
        return self.count > 1 or self.shared


ONE_WORKER = Workers()  # the default: one trial at a time, the SQLite file beside the outputs


# --- each worker's slot: one GPU, or its share of the cores ------------------------------------------------


def runs_on_cpu(accelerate_config: str) -> bool:
    with contextlib.suppress(OSError, yaml.YAMLError):
        values = yaml.safe_load(Path(accelerate_config).read_text()) or {}
        return isinstance(values, dict) and bool(values.get("use_cpu"))
    return False


def visible_gpus() -> list[str]:
    """The GPUs a trial may use, as CUDA_VISIBLE_DEVICES names them: its own entries when it is set,
    else `nvidia-smi -L`'s (the sweep's process never opens CUDA itself)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        devices = [device.strip() for device in listed.split(",") if device.strip()]
        # CUDA stops at the first invalid entry: "-1" (or "") hides every device.
        return [] if not devices or devices[0].startswith("-") else devices
    try:  # no nvidia-smi: FileNotFoundError
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    count = sum(line.startswith("GPU ") for line in listing.splitlines())
    return [str(index) for index in range(count)]


def cpu_cores() -> int:
    """The cores this process may run on (a container's or taskset's limit included)."""
    with contextlib.suppress(AttributeError, OSError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def slot_environments(count: int, accelerate_config: str) -> list[dict[str, str]]:
    """The environment each worker's trials add to the sweep's own: with one worker nothing (a trial
    sees what the command saw); on GPUs one device each; on the CPU the cores split evenly."""
    if count == 1:
        return [{}]
    gpus = [] if runs_on_cpu(accelerate_config) else visible_gpus()
    if gpus:
        if count > len(gpus):
            shown = os.environ.get("CUDA_VISIBLE_DEVICES")
            where = f"CUDA_VISIBLE_DEVICES={shown}" if shown is not None else "nvidia-smi -L"
            raise ConfigError(
                f"--workers {count} runs {count} trials at once, one GPU each, but {len(gpus)} GPU(s) are visible "
                f"({where}). Give --workers {len(gpus)} or fewer, make more GPUs visible, or run the trials on "
                "the CPU with --accelerate_config accelerate_configs/cpu.yaml."
            )
        return [{"CUDA_VISIBLE_DEVICES": gpus[slot]} for slot in range(count)]
    threads = str(max(1, cpu_cores() // count))
    # torch's intra-op threads and accelerate's CPU launcher both follow OMP_NUM_THREADS.
    return [{"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads} for _ in range(count)]


# --- the workers ---------------------------------------------------------------------------------------------


@dataclass
class Phase:
    """One study's trials: the `values` of `param` to run (a grid, the seeds, the folds), or with no
    values `count` trials whose value the study's sampler draws (TPE)."""

    name: str
    param: str
    values: list | None
    count: int
    open_study: Callable[[int], Any]  # worker slot -> the study (a TPE sampler seeded for that slot)
    make_objective: Callable[[Any, int], Callable[[Any], float]]  # (phase, slot) -> the trial's objective
    is_done: Callable[[Any], bool]  # whether a trial settles its value (study.is_done, with retry_failed)


class TrialFailed(Exception):
    """The trial ran and failed (diverged, out of memory, ...): Optuna records it as FAIL, the sweep goes on."""


class TrialInterrupted(Exception):
    """A worker thread's trial was stopped because the sweep was interrupted (Ctrl-C, SIGTERM)."""


def key_of(trial, param: str):
    """A trial's value of `param`: its own, or the one it was enqueued with (WAITING trials have no params)."""
    if param in trial.params:
        return trial.params[param]
    return (trial.system_attrs.get("fixed_params") or {}).get(param)


def enqueue_missing(study, phase: Phase, depth: int) -> list:
    """Enqueue, in order, what no trial of the study covers yet (settled, waiting or running), until
    `depth` trials wait (this machine's workers: a retry queued at the start still runs first, as
    with one worker, and machines sharing the study queue little twice); the study's trials."""
    trials = study.get_trials(deepcopy=False)
    live = [trial for trial in trials if trial.state.name in LIVE]
    room = depth - sum(trial.state.name == "WAITING" for trial in live)
    if phase.values is not None:
        covered = {key_of(trial, phase.param) for trial in live}
        covered |= {trial.params.get(phase.param) for trial in trials if phase.is_done(trial)}
        missing = [value for value in phase.values if value not in covered][: max(0, room)]
        for value in missing:
            study.enqueue_trial({phase.param: value})
    else:
        missing = [None] * min(room, phase.count - sum(map(phase.is_done, trials)) - len(live))
        for _ in missing:
            study.enqueue_trial({})  # a slot: the sampler draws its value when the trial runs
    return study.get_trials(deepcopy=False) if missing else trials


def claim(trial, phase: Phase) -> bool:
    """Whether the trial this worker just took runs: it came from the queue (not a fresh one made
    because another worker emptied the queue first) and no other trial runs its value. Of several
    copies of one value the lowest-numbered live one runs; a drawn slot runs while fewer than
    `count` trials have settled or hold a lower number."""
    trials = trial.study.get_trials(deepcopy=False)
    own = next(frozen for frozen in trials if frozen.number == trial.number)
    if not own.params and "fixed_params" not in own.system_attrs:
        return False
    others = [frozen for frozen in trials if frozen.number != own.number]

    def ahead(frozen) -> bool:
        return phase.is_done(frozen) or (frozen.state.name in LIVE and frozen.number < own.number)

    value = key_of(own, phase.param)
    if value is None:
        return phase.values is None and sum(map(ahead, others)) < phase.count
    return not any(key_of(frozen, phase.param) == value and ahead(frozen) for frozen in others)


def work(phase: Phase, slot: int, slots: int, halt: threading.Event) -> None:
    """One worker: take the phase's waiting trials one at a time until none is waiting or running."""
    objective = phase.make_objective(phase, slot)
    while not halt.is_set():
        study = phase.open_study(slot)
        states = {trial.state.name for trial in enqueue_missing(study, phase, depth=slots)}
        if "WAITING" in states:
            study.optimize(objective, n_trials=1, catch=(TrialFailed,))
        elif "RUNNING" in states:
            # Another worker's trial: wait for it; if that worker died, its heartbeat stops and the
            # trial is failed and queued again here, for this worker to take.
            fail_stale_trials_of(study)
            halt.wait(POLL_S)
        else:
            return


def drain(phase: Phase, slots: int, halt: threading.Event, interrupted: threading.Event) -> None:
    """Run the phase with `slots` workers. One worker runs in this thread, as the sweep always has (Ctrl-C
    reaches its trial's wait); several are threads, and Ctrl-C or SIGTERM in this one stops their trials
    (each recorded as interrupted) before it is raised again. A worker's error is raised here."""
    if slots == 1:
        work(phase, 0, 1, halt)
        return
    errors: list[BaseException] = []

    def run_worker(slot: int) -> None:
        try:
            work(phase, slot, slots, halt)
        except BaseException as error:  # noqa: BLE001 - raised again in the main thread
            errors.append(error)
            halt.set()

    threads = [
        threading.Thread(target=run_worker, args=(slot,), name=f"worker-{slot}") for slot in range(slots)
    ]
    for thread in threads:
        thread.start()
        time.sleep(0.2)  # staggered: the first trials' enqueues and claims do not all meet at once
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        interrupted.set()
        halt.set()
        # Every process this one started (the trials' launchers and recipes): the workers' waits then return.
        stop_processes(psutil.Process().children(recursive=True))
        for thread in threads:
            thread.join()
        raise
    stopped = [error for error in errors if not isinstance(error, TrialInterrupted)]
    if stopped:
        raise stopped[0]
