"""The sweep's study database, OUTPUT_DIR/sweep.db (Optuna's RDB storage), and what the sweep and its
report read back from it. A trial whose sweep died is failed by Optuna's heartbeat and queued again by
RequeueStaleTrials (docs/sweeps.md, "The study, and resuming").
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from recipes_lib.credentials import QUERY_SECRET, URL_PASSWORD, redact
from recipes_lib.errors import ConfigError
from recipes_workbench.sweep.config import SweepConfig, format_lr
from recipes_workbench.sweep.trials import COMPLETE, FAILED, INTERRUPTED, RUNNING, stop_orphans

STUDY_FILE = "sweep.db"
# Only the sweep holding OUTPUT_DIR's lock runs trials of this database, and it looks for stale trials
# only between its own trials, so a short grace period cannot fail a live trial; a sweep resumed right
# after a kill waits it out (up to GRACE_PERIOD_S + 1 s: SQLite's clock counts whole seconds).
HEARTBEAT_INTERVAL_S = 1
GRACE_PERIOD_S = 2
# With trials in parallel (--workers, --storage) other trials run while this process looks for stale
# ones, so a heartbeat late by a few seconds (a busy machine, a distant database) must not fail a live
# trial: a longer grace period, and a resumed run waits for it while a dead worker's trial goes stale.
PARALLEL_HEARTBEAT_INTERVAL_S = 5
PARALLEL_GRACE_PERIOD_S = 30
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
        self.announce = False  # say so as it happens (trials in parallel: found while the workers wait)

    def __call__(self, study, trial) -> None:
        stop_orphans(trial.user_attrs.get("output_dir"))
        requeue(study, trial)
        self.trials.append(trial)
        if self.announce:
            print(f"Resuming: {trial.user_attrs.get('output_dir')} was left running by a worker that stopped "
                  "(its heartbeat did); it is rerun.")  # fmt: skip


class ClaimingRDBStorage(optuna.storages.RDBStorage):
    """Optuna's RDBStorage, its trial state changes one at a time among this process's threads.

    Taking a WAITING trial is Optuna's read-then-set in one session (SELECT ... FOR UPDATE): atomic on
    PostgreSQL and MySQL, but SQLite ignores FOR UPDATE, so two worker threads could both take one trial."""

    _state_lock = threading.Lock()

    def set_trial_state_values(self, trial_id, state, values=None) -> bool:
        with self._state_lock:
            return super().set_trial_state_values(trial_id, state, values)


# --- a study's storage given as a URL (--storage) ----------------------------------------------------------------------

# The driver SQLAlchemy loads for each URL scheme, and the pip package that has it. A bare postgresql://
# loads psycopg (3) under SQLAlchemy 2.1 and psycopg2 under 2.0: the 'postgres' extra installs both.
DRIVERS = {
    "psycopg2": "psycopg2-binary",
    "psycopg": "'psycopg[binary]'",
    "MySQLdb": "mysqlclient",
    "pymysql": "pymysql",
    "mysql": "mysql-connector-python",
    "asyncpg": "asyncpg",
    "pg8000": "pg8000",
}


def storage_error(url: str, error: BaseException) -> ConfigError:
    """One paragraph naming the --storage value and the fix, for what opening it raised."""
    shown = redact(url)
    missing = error
    while missing is not None and not (isinstance(missing, ImportError) and missing.name):
        missing = missing.__cause__ or missing.__context__  # Optuna re-raises the driver's ImportError
    if missing is not None:
        module = missing.name.split(".")[0]
        package = DRIVERS.get(module, module)
        return ConfigError(
            f"--storage {shown} needs the database driver {module}, which is not installed: pip install {package} "
            "(for PostgreSQL, pip install 'recipes-lib[postgres]' installs both of its drivers)."
        )
    # The driver's own words may quote the URL, or parse it otherwise (libpq splits user:p@ss@host at the first @).
    first_line = redact((str(error).strip().splitlines() or [type(error).__name__])[0], *url_secrets(url))
    name = type(error).__name__
    if name in ("ArgumentError", "NoSuchModuleError"):
        return ConfigError(
            f"--storage {shown} is not a database URL Optuna can open ({first_line}). Give "
            "postgresql://USER:PASSWORD@HOST:PORT/DATABASE or mysql+pymysql://USER:PASSWORD@HOST/DATABASE "
            "(every worker the same), or leave --storage out for the SQLite file beside the outputs."
        )
    return ConfigError(
        f"--storage {shown} could not be opened: {name}: {first_line}. Check that the database server runs and "
        "that this machine reaches it, and the URL's host, port, user, password and database name."
    )


def open_storage(
    config: SweepConfig,
    on_stale_trial: RequeueStaleTrials,
    file: str = STUDY_FILE,
    url: str | None = None,
    parallel: bool = False,
):
    """The study database with Optuna's heartbeat on: a trial left running by a dead sweep goes to
    `on_stale_trial`. `file`: the database's name in the output_dir (crossval keeps its own, crossval.db);
    `url`: another database instead (--storage, shared between machines); `parallel`: trials of other
    workers run meanwhile (the longer heartbeat grace period)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # the sweep says what failed, once
    location = url or f"sqlite:///{(Path(config.output_dir) / file).resolve()}"
    # SQLite: threads' writes (the heartbeats among them) wait for each other up to 60 s, not 5.
    engine = {"connect_args": {"timeout": 60}} if location.startswith("sqlite") else {}
    # Workers started together on an empty database all create Optuna's tables: all but one of them
    # meet the other's (an IntegrityError or ProgrammingError) and, a moment later, find them made.
    for attempt in range(3):
        try:
            with warnings.catch_warnings():
                # heartbeat_interval is experimental in every Optuna version used
                warnings.simplefilter("ignore")
                return ClaimingRDBStorage(
                    location,
                    engine_kwargs=engine,
                    heartbeat_interval=PARALLEL_HEARTBEAT_INTERVAL_S if parallel else HEARTBEAT_INTERVAL_S,
                    grace_period=PARALLEL_GRACE_PERIOD_S if parallel else GRACE_PERIOD_S,
                    **{STALE_TRIAL_CALLBACK: on_stale_trial},
                )
        except Exception as error:
            if url is None:
                raise
            racing = type(error).__name__ in ("IntegrityError", "ProgrammingError")
            if not racing or attempt == 2:
                raise storage_error(url, error) from None
            time.sleep(1 + attempt)
    raise AssertionError("unreachable")


def fail_stale_trials(storage, wait: bool = True) -> None:
    """Fail every trial a dead sweep left RUNNING (and so hand it to the storage's callback) before the
    sweep plans its trials. Under the sweep's lock every RUNNING trial is stale; Optuna calls it so once
    its heartbeat is GRACE_PERIOD_S old, so this waits that long at most. Without `wait` (trials in
    parallel: a RUNNING trial may be another worker's, alive), one look: the workers look again while
    they wait for running trials (parallel.py)."""
    studies = [
        optuna.load_study(study_name=study.study_name, storage=storage) for study in storage.get_all_studies()
    ]
    deadline = time.monotonic() + GRACE_PERIOD_S + 2
    while True:
        running = [
            study for study in studies if study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        ]
        for study in running:
            fail_stale_trials_of(study)
        if not running or not wait or time.monotonic() > deadline:
            return
        time.sleep(0.5)


def fail_stale_trials_of(study) -> None:
    """One look for the study's stale trials (a worker waiting for others' trials makes it)."""
    with warnings.catch_warnings(), contextlib.suppress(optuna.exceptions.OptunaError):
        warnings.simplefilter("ignore")  # fail_stale_trials is experimental in every Optuna version used
        optuna.storages.fail_stale_trials(study)


def claim_report(storage, name: str) -> bool:
    """Whether this worker writes the outputs: the one that creates the marker study `name` (study
    names are unique in the storage, so of workers finishing together exactly one does)."""
    try:
        storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], study_name=name)
    except optuna.exceptions.DuplicatedStudyError:
        return False
    return True


def skip_trial(reason: str):
    """End the running trial unlaunched, as PRUNED (a value another worker runs: parallel.claim)."""
    raise optuna.TrialPruned(reason)


def search_sampler(config: SweepConfig, recipe: str, finished: int, slot: int | None = None):
    """GridSampler for a grid; for a range TPE, seeded so that a resumed sweep draws what the uninterrupted
    one would have, or per worker (`slot`) with constant_liar (docs/sweeps.md, "Trials in parallel")."""
    search = config.recipe(recipe).learning_rates
    if search.is_grid:
        return optuna.samplers.GridSampler({"learning_rate": list(search.grid)}, seed=config.search_seed)
    startup = max(1, min(10, search.trials // 2))
    if slot is None:
        return optuna.samplers.TPESampler(seed=config.search_seed + finished, n_startup_trials=startup)
    seed = config.search_seed + finished + 7919 * (slot + 1) + os.getpid()
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True)


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
        trials += [t for t in study_trials(storage, study.study_name) if t.state.name != "PRUNED"]
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
    """{key(trial): the newest trial with that key} (WAITING retries left out, and PRUNED copies: a
    value a parallel worker had queued again, taken and not run, parallel.claim)."""
    latest: dict = {}
    for trial in trials:
        if trial.state.name not in ("WAITING", "PRUNED"):
            latest[key(trial)] = trial
    return latest


def search_results(trials: list) -> list:
    """The latest trial of each learning rate of a search study (a rerun replaces an interrupted one)."""
    latest = latest_by_key(trials, lambda trial: trial.params.get("learning_rate"))
    return [latest[lr] for lr in sorted(lr for lr in latest if lr is not None)]


def choose_learning_rate(trials: list, direction: str) -> float | None:
    """The learning rate of the best complete trial (ties: the lowest rate); None without one."""
    complete = [trial for trial in trials if trial.state.name == "COMPLETE" and trial.value is not None]
    if not complete:
        return None
    sign = 1 if direction == "maximize" else -1
    best = max(complete, key=lambda trial: (sign * trial.value, -trial.params["learning_rate"]))
    return best.params["learning_rate"]


def url_secrets(url: str) -> list[str]:
    """The password and secret query values of `url`, and the pieces of a password holding an unescaped
    `@` (a driver that splits there names the rest as the host in its error)."""
    found = [
        m.group(0)[len(m.group("head")) :] for m in (*URL_PASSWORD.finditer(url), *QUERY_SECRET.finditer(url))
    ]
    return [*found, *(piece for value in found for piece in value.split("@"))]
