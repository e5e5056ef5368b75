"""The sweep's study database, OUTPUT_DIR/sweep.db (Optuna's RDB storage on SQLite), and what the sweep
and its report read back from it.

Per recipe, two studies:

    <recipe>:search              the learning rates at search_seed: a GridSampler over the grid, or a
                                 TPESampler(seed=...) over the log range for `trials` trials
    <recipe>:seeds:lr=<lr>       the chosen learning rate at each seed of `seeds` (a GridSampler)

Every trial records, as user attributes, its phase, recipe, learning rate, seed, output_dir, log,
status (running, then complete, failed or interrupted) and reason, and the results.json figures the
report needs. Optuna's state: COMPLETE with the metric's value, or FAIL.

A trial whose sweep died (kill -9, a crash, a lost machine) is Optuna's own business: the storage
records the running trial's heartbeat, and a trial whose heartbeat stopped is failed by Optuna's
`fail_stale_trials` (which `study.optimize` runs before each trial, and the sweep once as it starts)
and handed to the storage's stale-trial callback, RequeueStaleTrials: what still runs of it is stopped
and Optuna's retry callback queues its parameters again, so the study's next trial reruns them.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from recipes_lib.errors import ConfigError
from recipes_lib.sweep.config import SweepConfig, format_lr
from recipes_lib.sweep.trials import COMPLETE, FAILED, INTERRUPTED, RUNNING, stop_orphans

STUDY_FILE = "sweep.db"
# Only the sweep holding OUTPUT_DIR's lock runs trials of this database, and it looks for stale trials
# only between its own trials, so a short grace period cannot fail a live trial; a sweep resumed right
# after a kill waits it out (up to GRACE_PERIOD_S + 1 s: SQLite's clock counts whole seconds).
HEARTBEAT_INTERVAL_S = 1
GRACE_PERIOD_S = 2
INTERRUPTED_REASON = (
    "the sweep stopped during this trial (killed, crashed or interrupted); it is rerun on resume"
)

# Optuna 4.9 renamed RetryFailedTrialCallback to RetryHeartbeatStaleTrialCallback and RDBStorage's
# failed_trial_callback to heartbeat_stale_trial_callback (the old names still work, with a warning);
# 4.0 to 4.8 have only the old ones.
if hasattr(optuna.storages, "RetryHeartbeatStaleTrialCallback"):
    RetryTrial = optuna.storages.RetryHeartbeatStaleTrialCallback
    STALE_TRIAL_CALLBACK = "heartbeat_stale_trial_callback"
else:
    RetryTrial = optuna.storages.RetryFailedTrialCallback
    STALE_TRIAL_CALLBACK = "failed_trial_callback"


def requeue(study, trial) -> None:
    """A WAITING copy of the trial, with its parameters, which the study's next trial runs (Optuna's
    retry callback; GridSampler's grid point comes with the parameters)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental in every Optuna version used
        RetryTrial()(study, trial)


class RequeueStaleTrials:
    """The storage's callback for a trial Optuna failed because its heartbeat stopped: the launcher and
    recipe of a killed sweep's trial outlive it, so they are stopped; then its parameters are queued
    again. It keeps the trials, so the sweep can say what it resumes."""

    def __init__(self) -> None:
        self.trials: list = []

    def __call__(self, study, trial) -> None:
        stop_orphans(trial.user_attrs.get("output_dir"))
        requeue(study, trial)
        self.trials.append(trial)


def storage_url(config: SweepConfig, file: str = STUDY_FILE) -> str:
    return f"sqlite:///{(Path(config.output_dir) / file).resolve()}"


def open_storage(config: SweepConfig, on_stale_trial: RequeueStaleTrials, file: str = STUDY_FILE):
    """The study database with Optuna's heartbeat on: a trial left running by a dead sweep goes to
    `on_stale_trial`. `file`: the database's name in the output_dir (crossval keeps its own, crossval.db)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # the sweep says what failed, once
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # heartbeat_interval is experimental in every Optuna version used
        return optuna.storages.RDBStorage(
            storage_url(config, file),
            heartbeat_interval=HEARTBEAT_INTERVAL_S,
            grace_period=GRACE_PERIOD_S,
            **{STALE_TRIAL_CALLBACK: on_stale_trial},
        )


def fail_stale_trials(storage) -> None:
    """Fail every trial a dead sweep left RUNNING (and so hand it to the storage's callback) before the
    sweep plans its trials. Under the sweep's lock every RUNNING trial is stale; Optuna calls it so once
    its heartbeat is GRACE_PERIOD_S old, so this waits that long at most."""
    studies = [
        optuna.load_study(study_name=study.study_name, storage=storage) for study in storage.get_all_studies()
    ]
    deadline = time.monotonic() + GRACE_PERIOD_S + 2
    while True:
        running = [
            study for study in studies if study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # fail_stale_trials is experimental in every Optuna version used
            for study in running:
                optuna.storages.fail_stale_trials(study)
        if not running or time.monotonic() > deadline:
            return
        time.sleep(0.5)


def search_sampler(config: SweepConfig, recipe: str, finished: int):
    """GridSampler for a grid; for a range, TPE seeded from search_seed and the trials already done, so
    a resumed sweep samples what the uninterrupted one would have."""
    search = config.recipe(recipe).learning_rates
    if search.is_grid:
        return optuna.samplers.GridSampler({"learning_rate": list(search.grid)}, seed=config.search_seed)
    startup = max(1, min(10, search.trials // 2))
    return optuna.samplers.TPESampler(seed=config.search_seed + finished, n_startup_trials=startup)


def seeds_sampler(seeds: list[int]):
    return optuna.samplers.GridSampler({"seed": seeds}, seed=0)


def open_study(storage, name: str, config: SweepConfig, sampler):
    return optuna.create_study(
        study_name=name, storage=storage, load_if_exists=True, direction=config.direction, sampler=sampler
    )


def check_search_space(study, space: dict[str, Any]) -> None:
    """A study keeps the grid (or range, or seeds) it was made with: another one needs another output_dir."""
    recorded = study.user_attrs.get("search_space")
    if recorded is None:
        study.set_user_attr("search_space", space)
    elif recorded != space:
        raise ConfigError(
            f"This output_dir's study {study.study_name} was run with {recorded}, not {space}. Give the changed "
            "sweep another output_dir (or restore the old values to resume this one)."
        )


def search_study_name(recipe: str) -> str:
    return f"{recipe}:search"


def seeds_study_name(recipe: str, learning_rate: float) -> str:
    return f"{recipe}:seeds:lr={format_lr(learning_rate)}"


# --- reading the trials back ---------------------------------------------------------------------------


def study_trials(storage, name: str) -> list:
    """The trials of one study of the database, by number ([] when it does not exist yet)."""
    if name not in {study.study_name for study in storage.get_all_studies()}:
        return []
    return storage.get_all_trials(storage.get_study_id_from_name(name), deepcopy=False)


def sweep_trials(storage) -> list:
    """Every trial of every study in the database (FrozenTrial), oldest first."""
    trials = []
    for study in storage.get_all_studies():
        trials += study_trials(storage, study.study_name)
    return sorted(trials, key=lambda trial: (trial.datetime_start is None, trial.datetime_start or 0))


def status_of(trial) -> str:
    """complete, failed or interrupted. A trial Optuna failed for its stopped heartbeat still says
    "running" (its sweep died before it could say more): it was interrupted."""
    status = trial.user_attrs.get("status")
    if status in (None, RUNNING):
        return COMPLETE if trial.state.name == "COMPLETE" else INTERRUPTED
    return status


def reason_of(trial) -> str | None:
    """Why a trial failed or was interrupted, in words; None for a complete one."""
    return trial.user_attrs.get("reason") or (INTERRUPTED_REASON if status_of(trial) == INTERRUPTED else None)


def is_done(trial, config: SweepConfig, retry_before: int) -> bool:
    """Whether a trial settles its parameters: complete, or failed (unless failures from before this
    run are retried)."""
    if trial.state.name == "COMPLETE":
        return True
    if trial.state.name != "FAIL" or status_of(trial) != FAILED:  # WAITING retries copy the attributes
        return False
    return not (config.retry_failed and trial.number < retry_before)


def latest_by_key(trials, key) -> dict:
    """{key(trial): the newest trial with that key} (WAITING retries left out)."""
    latest: dict = {}
    for trial in trials:
        if trial.state.name != "WAITING":
            latest[key(trial)] = trial
    return latest


def search_results(trials: list) -> list:
    """The latest trial of each learning rate of a search study (a rerun replaces an interrupted one)."""
    latest = latest_by_key(trials, lambda trial: trial.params.get("learning_rate"))
    return [latest[lr] for lr in sorted(lr for lr in latest if lr is not None)]


def seeds_results(trials: list) -> list:
    """The latest trial of each seed of a seeds study."""
    latest = latest_by_key(trials, lambda trial: trial.params.get("seed"))
    return [trial for seed, trial in latest.items() if seed is not None]


def choose_learning_rate(trials: list, direction: str) -> float | None:
    """The learning rate of the best complete trial (ties: the lowest rate); None without one."""
    complete = [trial for trial in trials if trial.state.name == "COMPLETE" and trial.value is not None]
    if not complete:
        return None
    sign = 1 if direction == "maximize" else -1
    best = max(complete, key=lambda trial: (sign * trial.value, -trial.params["learning_rate"]))
    return best.params["learning_rate"]
