"""The sweep's trials: an Optuna study in OUTPUT_DIR/sweep.db, each trial one `accelerate launch`.

Per recipe, two studies (Optuna's RDB storage, SQLite):

    <recipe>:search              the learning rates at search_seed: a GridSampler over the grid, or a
                                 TPESampler(seed=...) over the log range for `trials` trials
    <recipe>:seeds:lr=<lr>       the chosen learning rate at each seed of `seeds` (a GridSampler)

A grid's points are enqueued one at a time in ascending order, so the trials run in the order they
were printed and a rerun knows which are left. Every trial records, as user attributes, its phase,
recipe, learning rate, seed, output_dir, log, status (complete, failed, interrupted) and reason, and
the results.json figures the report needs. Optuna's state: COMPLETE with the metric's value, or FAIL.

Resuming: rerunning the same command reopens the study. A trial still RUNNING there was cut short
(the sweep was killed): it becomes FAIL with status "interrupted", any of its processes still alive
are stopped, and its parameters run again (its directory is replaced: --overwrite_output_dir true).
Finished trials, complete or failed, are not rerun (`retry_failed` reruns the failed ones).

Nothing is shared between trials in this process: no model, no data, no CUDA context. The sweep's
own process never imports torch; the arguments and the planner are checked in a child process
(sweep_preflight.py), and each trial is a fresh `accelerate launch` with its own output_dir and W&B run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from recipes_lib.cli.sweep import SweepConfig, format_lr, recipe_arguments, trial_command, trial_dir
from recipes_lib.errors import ConfigError
from recipes_lib.results import RESULTS_FILE, read_results
from recipes_lib.tracking import names

STUDY_FILE = "sweep.db"
LOCK_FILE = ".sweep.lock"
LOG_DIR = "logs"
SEARCH, SEEDS = "search", "seeds"
COMPLETE, FAILED, INTERRUPTED = "complete", "failed", "interrupted"
INTERRUPTED_REASON = (
    "the sweep stopped during this trial (killed, crashed or interrupted); it is rerun on resume"
)
# The results.json figures a trial keeps in the study (the report reads them from there).
RESULT_KEYS = (
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
    """One trial to launch: the recipe at a learning rate and seed, in its own directory."""

    recipe: str
    phase: str
    learning_rate: float
    seed: int
    output_dir: Path
    log: Path
    command: list[str]
    chosen: str | None = None  # the seeds phase: the setting the search chose, "lora lr=0.001"

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


class SweepStopped(Exception):
    """SIGTERM reached the sweep: the running trial is stopped and recorded as interrupted."""

    def __init__(self, signal_number: int):
        super().__init__(signal.Signals(signal_number).name)
        self.exit_code = 128 + signal_number


# --- the study database -------------------------------------------------------------------------------


def storage_url(config: SweepConfig) -> str:
    return f"sqlite:///{(Path(config.output_dir) / STUDY_FILE).resolve()}"


def open_storage(config: SweepConfig):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # the sweep says what failed, once
    return optuna.storages.RDBStorage(storage_url(config))


def search_sampler(config: SweepConfig, recipe: str, finished: int):
    """GridSampler for a grid; for a range, TPE seeded from search_seed and the trials already done, so
    a resumed sweep samples what the uninterrupted one would have."""
    import optuna

    search = config.recipe(recipe).learning_rates
    if search.is_grid:
        return optuna.samplers.GridSampler({"learning_rate": list(search.grid)}, seed=config.search_seed)
    startup = max(1, min(10, search.trials // 2))
    return optuna.samplers.TPESampler(seed=config.search_seed + finished, n_startup_trials=startup)


def open_study(storage, name: str, config: SweepConfig, sampler):
    import optuna

    return optuna.create_study(
        study_name=name, storage=storage, load_if_exists=True, direction=config.direction, sampler=sampler
    )


def seeds_study_name(recipe: str, learning_rate: float) -> str:
    return f"{recipe}:seeds:lr={format_lr(learning_rate)}"


def sweep_trials(storage) -> list:
    """Every trial of every study in the database (FrozenTrial), oldest first."""
    trials = []
    for study in storage.get_all_studies():
        trials += study_trials(storage, study.study_name)
    return sorted(trials, key=lambda trial: (trial.datetime_start is None, trial.datetime_start or 0))


def status_of(trial) -> str:
    return trial.user_attrs.get("status") or (COMPLETE if trial.state.name == "COMPLETE" else INTERRUPTED)


def is_done(trial, config: SweepConfig, retry_before: int) -> bool:
    """Whether a trial settles its parameters: complete, or failed (unless failures from before this
    run are retried)."""
    if trial.state.name == "COMPLETE":
        return True
    if trial.state.name != "FAIL" or status_of(trial) != FAILED:  # WAITING retries copy the attributes
        return False
    return not (config.retry_failed and trial.number < retry_before)


def recover_interrupted(storage, config: SweepConfig) -> list:
    """Trials a killed sweep left RUNNING: their processes stopped, each marked FAIL, status interrupted."""
    from optuna.trial import TrialState

    recovered = []
    for study in storage.get_all_studies():
        study_id = storage.get_study_id_from_name(study.study_name)
        for trial in storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            stop_orphans(trial.user_attrs.get("output_dir"))
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
            storage.set_trial_user_attr(trial_id, "status", INTERRUPTED)
            storage.set_trial_user_attr(trial_id, "reason", INTERRUPTED_REASON)
            storage.set_trial_state_values(trial_id, TrialState.FAIL)
            recovered.append(trial)
    return recovered


def stop_orphans(output_dir: str | None) -> list[int]:
    """Kill what still runs of a trial whose sweep was killed (its launcher and recipe processes
    outlive it): the processes whose command line names the trial's --output_dir."""
    if not output_dir:
        return []
    import psutil

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


@contextlib.contextmanager
def sweep_lock(output_dir: Path) -> Iterator[None]:
    """One sweep at a time per output_dir (the lock goes with the process, kill -9 included)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    output_dir.mkdir(parents=True, exist_ok=True)
    with open(output_dir / LOCK_FILE, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise ConfigError(
                f"Another sweep is running on {output_dir} (process {handle.read().strip() or '?'}); wait for it, "
                "or give this one another output_dir."
            ) from None
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        yield


# --- the preflight: arguments parsed and memory planned, in a child process ---------------------------


def accelerate_settings(path: str) -> tuple[dict[str, str], int, str]:
    """What `accelerate launch --config_file PATH` tells the recipe through its environment (the device
    and precision it decides with), the number of processes and how they shard, for the planner."""
    values = yaml.safe_load(Path(path).read_text()) or {}
    env = {"ACCELERATE_MIXED_PRECISION": str(values.get("mixed_precision") or "no")}
    if values.get("use_cpu"):
        env["ACCELERATE_USE_CPU"] = "true"
    kind = str(values.get("distributed_type", "NO")).upper()
    sharding = "none"
    if kind == "FSDP":
        env["ACCELERATE_USE_FSDP"] = "true"
        strategy = str((values.get("fsdp_config") or {}).get("fsdp_sharding_strategy", "FULL_SHARD")).upper()
        sharding = "fsdp_shard_grad_op" if "GRAD_OP" in strategy else "fsdp_full_shard"
    elif kind == "DEEPSPEED":
        env["ACCELERATE_USE_DEEPSPEED"] = "true"
        stage = int((values.get("deepspeed_config") or {}).get("zero_stage", 2))
        sharding = {1: "zero1", 2: "zero2", 3: "zero3"}.get(stage, "none")
    return env, int(values.get("num_processes") or 1), sharding


def run_preflight(config: SweepConfig) -> dict[str, dict[str, Any]]:
    """{recipe: the preflight's answer}; arguments that do not parse stop the sweep here, before any trial."""
    env, processes, sharding = accelerate_settings(config.accelerate_config)
    probe_dir = str(Path(config.output_dir) / "preflight")
    request = {
        "recipes": {
            recipe.name: [
                *recipe_arguments(config, recipe.name),
                "--learning_rate",
                repr(_first_lr(config, recipe.name)),
                "--seed",
                str(config.search_seed),
                "--output_dir",
                probe_dir,
            ]  # fmt: skip
            for recipe in config.recipes
        },
        "memory_budget_gib": config.memory_budget_gib,
        "num_processes": processes,
        "sharding": sharding,
    }
    completed = subprocess.run(
        [sys.executable, "-m", "recipes_lib.cli.sweep_preflight"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env={**os.environ, **env, "TOKENIZERS_PARALLELISM": "false"},
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not lines:
        raise ConfigError(
            f"The sweep's check of the recipes' arguments failed: {completed.stderr.strip()[-2000:]}"
        )
    answers = json.loads(lines[-1])
    for name, answer in answers.items():
        if "error" in answer:
            raise ConfigError(
                f"The arguments of {name}'s trials do not parse, so no trial was started: {answer['error']}"
            )
    return answers


def _first_lr(config: SweepConfig, recipe: str) -> float:
    search = config.recipe(recipe).learning_rates
    return search.grid[0] if search.is_grid else search.low


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
    """The trial's outcome from its exit code, its log and its results.json."""
    log_text = trial.log.read_text(errors="replace") if trial.log.is_file() else ""
    if launcher_code != 0:
        code = recipe_exit_code(launcher_code, log_text)
        return Outcome(FAILED, failure_reason(code, log_text), exit_code=code, wall_s=wall_s)
    if not (trial.output_dir / RESULTS_FILE).is_file():
        return Outcome(
            FAILED, f"it exited 0 without writing {trial.output_dir / RESULTS_FILE}", 0, wall_s=wall_s
        )
    results = read_results(trial.output_dir)
    kept = {key: results.get(key) for key in RESULT_KEYS}
    kept.update({key: results.get(key) for key in (config.metric, config.test_metric)})
    value = results.get(config.metric)
    if value is None:
        reason = f"results.json has no value for {config.metric} (null or missing); choose a metric the runs report"
        return Outcome(FAILED, reason, exit_code=0, wall_s=wall_s, results=kept)
    return Outcome(COMPLETE, "", float(value), 0, wall_s, kept)


def launch_trial(trial: Trial, config: SweepConfig) -> Outcome:
    """Run the trial's `accelerate launch`, its output in its log; the outcome once it exits."""
    trial.log.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        names.SWEEP_CONFIG_VARIABLE: json.dumps(
            {names.SWEEP: config.group, names.SWEEP_PHASE: trial.phase}
            | ({names.SWEEP_CHOSEN: trial.chosen} if trial.chosen else {})
        ),
    }
    start = time.monotonic()
    with open(trial.log, "w") as log:
        log.write("$ " + " ".join(trial.command) + "\n")
        log.flush()
        process = subprocess.Popen(trial.command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            code = process.wait()
        except BaseException:  # Ctrl-C or SIGTERM: the trial goes with the sweep
            stop_process_tree(process)
            raise
    return read_outcome(trial, config, code, time.monotonic() - start)


def stop_process_tree(process: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM to the launcher and the recipe under it (the single-process launcher does not pass it
    on), then SIGKILL to whatever is left after the grace period."""
    import psutil

    try:
        parent = psutil.Process(process.pid)
        tree = [parent, *parent.children(recursive=True)]
    except psutil.Error:
        return
    for member in tree:
        with contextlib.suppress(psutil.Error):
            member.terminate()
    _, alive = psutil.wait_procs(tree, timeout=grace_s)
    for member in alive:
        with contextlib.suppress(psutil.Error):
            member.kill()


# --- the phases ---------------------------------------------------------------------------------------


class TrialFailed(Exception):
    """The trial ran and failed (diverged, out of memory, ...): Optuna records it as FAIL, the sweep goes on."""


@dataclass
class Run:
    """What this run of the sweep command shares across trials: where, how, and the progress bar."""

    config: SweepConfig
    storage: Any
    launch: Callable[[Trial, SweepConfig], Outcome]
    bar: Any = None
    retry_before: dict[str, int] = field(default_factory=dict)  # study name -> its trial count at start

    def make_trial(self, recipe: str, phase: str, lr: float, seed: int, chosen: str | None = None) -> Trial:
        output_dir = trial_dir(self.config, recipe, lr, seed)
        log = Path(self.config.output_dir) / LOG_DIR / f"{recipe}-lr{format_lr(lr)}-seed{seed}.log"
        command = trial_command(self.config, recipe, lr, seed, sys.executable)
        return Trial(recipe, phase, lr, seed, output_dir, log, command, chosen)

    def done(self, trial, study_name: str) -> bool:
        return is_done(trial, self.config, self.retry_before.get(study_name, 0))


def latest_by_key(trials, key: Callable) -> dict:
    """{key(trial): the newest trial with that key} (WAITING retries left out)."""
    latest: dict = {}
    for trial in trials:
        if trial.state.name != "WAITING":
            latest[key(trial)] = trial
    return latest


def pending(trials: list, run: Run, name: str, param: str, values: list | None, count: int = 0) -> list:
    """The values of `param` still to run, in order: those of `values` without a finished trial; with no
    values (a TPE range), the unfinished trials' values, then None for each trial still to sample."""
    done = [trial for trial in trials if run.done(trial, name)]
    if values is not None:
        finished = {trial.params.get(param) for trial in done}
        return [value for value in values if value not in finished]
    latest = latest_by_key(trials, lambda trial: trial.params.get(param))
    unfinished = [value for value, trial in latest.items() if value is not None and not run.done(trial, name)]
    left = max(0, count - len(done))
    return (unfinished + [None] * left)[:left]


def retry_callback():
    """Optuna's callback that re-queues a failed trial with its parameters (and GridSampler's grid point):
    RetryHeartbeatStaleTrialCallback since Optuna 4.9, RetryFailedTrialCallback before (the same call)."""
    import optuna

    storages = optuna.storages
    callback = (
        getattr(storages, "RetryHeartbeatStaleTrialCallback", None) or storages.RetryFailedTrialCallback
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental / renamed: the call is the same in every version used
        return callback()


def prepare_retries(study, run: Run, param: str) -> None:
    """For each value whose newest trial was interrupted (or failed before this run, with retry_failed):
    a WAITING copy with the same parameters (retry_callback), which the next trial runs."""
    trials = study.get_trials(deepcopy=False)
    waiting = {trial.params.get(param) for trial in trials if trial.state.name == "WAITING"}
    for value, trial in latest_by_key(trials, lambda t: t.params.get(param)).items():
        if value is not None and value not in waiting and not run.done(trial, study.study_name):
            retry_callback()(study, trial)


def trial_objective(run: Run, make_trial: Callable[[Any], Trial]) -> Callable[[Any], float]:
    """The Optuna objective of one trial: launch it, record its outcome; a failed one raises TrialFailed."""

    def objective(trial) -> float:
        spec = make_trial(trial)
        attributes = {"phase": spec.phase, "recipe": spec.recipe, "learning_rate": spec.learning_rate,
                      "seed": spec.seed, "output_dir": str(spec.output_dir), "log": str(spec.log),
                      "chosen": spec.chosen, "status": "running"}  # fmt: skip
        for key, value in attributes.items():
            trial.set_user_attr(key, value)
        try:
            outcome = run.launch(spec, run.config)
        except BaseException:  # Ctrl-C, SIGTERM: Optuna records FAIL; this says it was cut short
            trial.set_user_attr("status", INTERRUPTED)
            trial.set_user_attr("reason", INTERRUPTED_REASON)
            raise
        for key, value in (("status", outcome.status), ("reason", outcome.reason), ("exit_code", outcome.exit_code),
                           ("wall_s", round(outcome.wall_s, 1)), ("results", outcome.results)):  # fmt: skip
            trial.set_user_attr(key, value)
        report_progress(run, spec, outcome)
        if outcome.status != COMPLETE:
            raise TrialFailed(outcome.reason)
        return outcome.value

    return objective


def report_progress(run: Run, spec: Trial, outcome: Outcome) -> None:
    figure = (
        f"{run.config.metric} {outcome.value:.4f}"
        if outcome.status == COMPLETE
        else f"FAILED: {outcome.reason}"
    )
    line = f"{spec.label}: {figure} ({outcome.wall_s:.0f} s; log {spec.log})"
    if run.bar is not None:
        run.bar.write(line)
        run.bar.update(1)
    else:
        print(line)


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


def run_search(run: Run, recipe: str) -> None:
    """The learning-rate search at search_seed: the grid (GridSampler) or `trials` TPE trials."""
    config, name = run.config, f"{recipe}:search"
    search = config.recipe(recipe).learning_rates
    study = open_study(run.storage, name, config, search_sampler(config, recipe, 0))
    space = (
        {"grid": list(search.grid)}
        if search.is_grid
        else {"low": search.low, "high": search.high, "trials": search.trials}
    )
    check_search_space(study, {**space, "seed": config.search_seed})
    run.retry_before.setdefault(name, len(study.trials))
    prepare_retries(study, run, "learning_rate")
    grid = list(search.grid) if search.is_grid else None

    def make_trial(trial) -> Trial:
        if search.is_grid:
            lr = trial.suggest_categorical("learning_rate", grid)
        else:
            lr = trial.suggest_float("learning_rate", search.low, search.high, log=True)
        return run.make_trial(recipe, SEARCH, lr, config.search_seed)

    for _ in pending(study.get_trials(deepcopy=False), run, name, "learning_rate", grid, search.trials):
        if not search.is_grid:  # TPE seeded by how many trials are done: the same draws after a resume
            done = sum(run.done(trial, name) for trial in study.get_trials(deepcopy=False))
            study = open_study(run.storage, name, config, search_sampler(config, recipe, done))
        study.optimize(trial_objective(run, make_trial), n_trials=1, catch=(TrialFailed,))


def run_seeds(run: Run, recipe: str, chosen_lr: float) -> None:
    """The chosen learning rate at each seed of `seeds` but search_seed (GridSampler over the seeds)."""
    import optuna

    config, name = run.config, seeds_study_name(recipe, chosen_lr)
    seeds = list(config.seeds_to_run)
    if not seeds:
        return
    study = open_study(run.storage, name, config, optuna.samplers.GridSampler({"seed": seeds}, seed=0))
    check_search_space(study, {"learning_rate": chosen_lr, "seeds": seeds})
    run.retry_before.setdefault(name, len(study.trials))
    prepare_retries(study, run, "seed")
    chosen = f"{recipe} lr={format_lr(chosen_lr)}"

    def make_trial(trial) -> Trial:
        return run.make_trial(recipe, SEEDS, chosen_lr, trial.suggest_categorical("seed", seeds), chosen)

    for _ in pending(study.get_trials(deepcopy=False), run, name, "seed", seeds):
        study.optimize(trial_objective(run, make_trial), n_trials=1, catch=(TrialFailed,))


# --- before anything runs: the trials and an estimate of their time ------------------------------------


def planned_trials(run: Run, preflight: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every trial of the sweep as it stands: done (with its figure), to run, or skipped by the planner."""
    from recipes_lib.cli.sweep_report import choose_learning_rate

    config, rows = run.config, []
    for recipe in config.recipes:
        name, answer, search = recipe.name, preflight.get(recipe.name, {}), recipe.learning_rates
        skip = answer if answer.get("fits") is False else None
        search_name = f"{name}:search"
        trials = study_trials(run.storage, search_name)
        run.retry_before.setdefault(search_name, len(trials))
        grid = list(search.grid) if search.is_grid else None
        todo = pending(trials, run, search_name, "learning_rate", grid, search.trials)
        latest = latest_by_key(trials, lambda trial: trial.params.get("learning_rate"))
        done = {lr: trial for lr, trial in latest.items() if run.done(trial, search_name)}
        rows += [
            _row(name, SEARCH, lr, config.search_seed, trial=trial) for lr, trial in sorted(done.items())
        ]
        rows += [_row(name, SEARCH, lr, config.search_seed, skip=skip) for lr in todo]
        # The best so far: the seeds it has already run show as done (a search still running may change it).
        chosen = choose_learning_rate(list(done.values()), config.direction)
        seeds_done = {}
        if chosen is not None:
            seeds_name = seeds_study_name(name, chosen)
            seeds_trials = study_trials(run.storage, seeds_name)
            run.retry_before.setdefault(seeds_name, len(seeds_trials))
            seeds_done = {t.params.get("seed"): t for t in seeds_trials if run.done(t, seeds_name)}
        for seed in config.seeds_to_run:
            rows.append(_row(name, SEEDS, chosen, seed, trial=seeds_done.get(seed), skip=skip))
    return rows


def study_trials(storage, name: str) -> list:
    """The trials of one study of the database, by number ([] when it does not exist yet)."""
    if name not in {study.study_name for study in storage.get_all_studies()}:
        return []
    return storage.get_all_trials(storage.get_study_id_from_name(name), deepcopy=False)


def _row(recipe, phase, lr, seed, trial=None, skip=None) -> dict[str, Any]:
    row = {
        "recipe": recipe,
        "phase": phase,
        "learning_rate": lr,
        "seed": seed,
        "status": "to run",
        "value": None,
    }
    if trial is not None:
        row.update(status=status_of(trial), value=trial.value, wall_s=trial.user_attrs.get("wall_s"))
    elif skip is not None:
        row.update(status="skipped", reason=skip.get("reason"))
    return row


def time_estimate(rows: list[dict[str, Any]]) -> tuple[float | None, str]:
    """(seconds for the trials to run, how it was estimated): the mean wall time of this sweep's finished
    trials of the same recipe, else of any recipe; none before any trial has finished."""
    finished = [row for row in rows if row.get("wall_s")]
    todo = [row for row in rows if row["status"] == "to run"]
    if not todo:
        return 0.0, "nothing left to run"
    if not finished:
        return None, (
            "no estimate yet: no trial of this sweep has finished (the progress bar estimates the rest once the "
            "first has)"
        )
    overall = sum(row["wall_s"] for row in finished) / len(finished)
    by_recipe: dict[str, list[float]] = {}
    for row in finished:
        by_recipe.setdefault(row["recipe"], []).append(row["wall_s"])
    total = sum(
        sum(by_recipe[row["recipe"]]) / len(by_recipe[row["recipe"]])
        if row["recipe"] in by_recipe
        else overall
        for row in todo
    )
    guessed = sorted({row["recipe"] for row in todo} - set(by_recipe))
    note = f" ({', '.join(guessed)}: no finished trial yet, at the mean of the others)" if guessed else ""
    return total, f"from the wall time of this sweep's {len(finished)} finished trials, per recipe{note}"


def format_plan(config: SweepConfig, preflight: dict[str, dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    from recipes_lib.units import format_table

    lines = [
        f"Sweep {config.name}: {', '.join(r.name for r in config.recipes)}; {config.metric} on validation "
        f"({config.direction}); search at seed {config.search_seed}, then the chosen learning rate at seeds "
        f"{', '.join(map(str, config.seeds))}. Study: {Path(config.output_dir) / STUDY_FILE}; W&B group: "
        f"{config.group}; launched with accelerate --config_file {config.accelerate_config}.",
    ]
    for recipe in config.recipes:
        answer = preflight.get(recipe.name, {})
        lines.append(
            f"  {recipe.name}: {recipe.learning_rates.describe()}; memory: {answer.get('reason', '-')}"
        )
    table = [
        [row["recipe"], row["phase"], "chosen" if row["learning_rate"] is None else format_lr(row["learning_rate"]),
         str(row["seed"]), row["status"] + (f": {row['reason']}" if row["status"] == "skipped" else ""),
         "-" if row["value"] is None else f"{row['value']:.4f}"]
        for row in rows
    ]  # fmt: skip
    lines.append(format_table(["recipe", "phase", "learning rate", "seed", "status", config.metric], table))
    seconds, how = time_estimate(rows)
    todo = sum(row["status"] == "to run" for row in rows)
    if not todo:
        lines.append("To run: nothing; every trial has finished (the report follows).")
    else:
        estimate = "" if seconds is None else f"about {max(1, round(seconds / 60))} min, "
        lines.append(f"To run: {todo} trial{'s' * (todo != 1)}; {estimate}{how}.")
    return "\n".join(lines)


# --- the sweep -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """SIGTERM (SLURM, Kubernetes, `kill`) stops the sweep as Ctrl-C does: the running trial is ended
    and recorded as interrupted, so the same command resumes."""

    def handler(signal_number, frame):
        raise SweepStopped(signal_number)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_recipes(run: Run, preflight: dict[str, dict[str, Any]]) -> None:
    """Each recipe in turn: its search, then its chosen learning rate at every seed."""
    from recipes_lib.cli.sweep_report import choose_learning_rate, search_results

    for recipe in run.config.recipes:
        if preflight.get(recipe.name, {}).get("fits") is False:
            continue  # skipped before launch, with the planner's prediction as the reason (in the plan)
        run_search(run, recipe.name)
        search = search_results(study_trials(run.storage, f"{recipe.name}:search"))
        chosen = choose_learning_rate(search, run.config.direction)
        if chosen is None:
            print(f"{recipe.name}: no search trial finished; no learning rate to repeat over the seeds.")
            continue
        run_seeds(run, recipe.name, chosen)


def run_sweep(
    config: SweepConfig,
    launch: Callable[[Trial, SweepConfig], Outcome] = launch_trial,
    preflight: Callable[[SweepConfig], dict[str, dict[str, Any]]] = run_preflight,
    dry_run: bool = False,
    draw: bool = True,
) -> int:
    """The whole sweep: check, print the plan, run what is left (resuming), report (`draw`: with its
    chart). Returns the exit code."""
    from tqdm.auto import tqdm

    from recipes_lib.cli.sweep_report import report

    output_dir = Path(config.output_dir)
    with sweep_lock(output_dir):
        answers = preflight(config)
        storage = open_storage(config)
        recovered = recover_interrupted(storage, config)
        run = Run(config, storage, launch)
        if recovered:
            print(f"Resuming: {len(recovered)} trial(s) interrupted by the last run will be rerun: "
                  + ", ".join(str(t.user_attrs.get("output_dir")) for t in recovered))  # fmt: skip
        rows = planned_trials(run, answers)
        print(format_plan(config, answers, rows))
        if dry_run:
            return 0
        todo = sum(row["status"] == "to run" for row in rows)
        try:
            with stop_on_sigterm(), tqdm(total=todo, unit="trial", desc=f"sweep {config.name}") as bar:
                run.bar = bar
                run_recipes(run, answers)
        except (KeyboardInterrupt, SweepStopped) as error:
            code = getattr(error, "exit_code", 130)
            print(
                "\ninterrupted: the running trial is recorded as interrupted; run the same command to resume."
            )
            return code
        report(config, storage, answers, draw=draw)
    return 0


def sweep_command(args) -> int:
    """`recipes-lib sweep`: the config from the file and flags, then the sweep, the W&B Sweeps file or the plan."""
    from recipes_lib.cli.sweep import sweep_config_from_arguments, write_wandb_sweeps
    from recipes_lib.errors import RecipeError

    try:
        config = sweep_config_from_arguments(args)
        if args.wandb_sweep:
            for path in write_wandb_sweeps(config, args.wandb_sweep):
                print(f"W&B Sweeps config: {path} (wandb sweep {path}; then wandb agent <sweep id>)")
            return 0
        return run_sweep(config, dry_run=args.dry_run)
    except RecipeError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:  # before the first trial (the check of the arguments): nothing to record
        print("\ninterrupted: no trial was running; run the same command to start again.", file=sys.stderr)
        return 130
