"""The sweep: check, print the plan, run each recipe's search then its chosen learning rate over the
seeds, report; rerunning the same command resumes it (docs/sweeps.md, "The study, and resuming").
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from recipes_lib.credentials import redact
from recipes_lib.locking import lock_directory
from recipes_workbench.shared import format_table
from recipes_workbench.sweep.config import SweepConfig, format_lr, trial_command, trial_dir
from recipes_workbench.sweep.parallel import (
    ONE_WORKER,
    Phase,
    TrialFailed,
    TrialInterrupted,
    Workers,
    claim,
    drain,
    slot_environments,
)
from recipes_workbench.sweep.preflight import run_preflight
from recipes_workbench.sweep.report import RESULTS_JSON, format_report, report, summarize
from recipes_workbench.sweep.study import (
    INTERRUPTED_REASON,
    STUDY_FILE,
    RequeueStaleTrials,
    check_search_space,
    choose_learning_rate,
    claim_report,
    fail_stale_trials,
    is_done,
    latest_by_key,
    open_storage,
    open_study,
    requeue,
    search_results,
    search_sampler,
    search_study_name,
    seeds_sampler,
    seeds_study_name,
    skip_trial,
    status_of,
    study_trials,
    sweep_trials,
)
from recipes_workbench.sweep.trials import (
    COMPLETE,
    INTERRUPTED,
    RUNNING,
    SEARCH,
    SEEDS,
    Outcome,
    Trial,
    launch_trial,
)

LOG_DIR = "logs"


class SweepStopped(Exception):
    """SIGTERM reached the sweep: the running trial is stopped and recorded as interrupted."""

    def __init__(self, signal_number: int):
        super().__init__(signal.Signals(signal_number).name)
        self.exit_code = 128 + signal_number


# --- the phases ---------------------------------------------------------------------------------------


@dataclass
class Run:
    """What this run of the sweep command shares across trials: where, how, the workers' slots (the
    environment each adds to its trials: parallel.py), and the progress bar."""

    config: SweepConfig
    storage: Any
    launch: Callable[[Trial, SweepConfig], Outcome]
    bar: Any = None
    retry_before: dict[str, int] = field(default_factory=dict)  # study name -> its trial count at start
    shared: bool = False  # the study is in a database other machines' workers use too (--storage)
    slots: list[dict[str, str]] = field(default_factory=lambda: [{}])
    halt: threading.Event = field(default_factory=threading.Event)  # no worker takes another trial
    # Ctrl-C or SIGTERM stopped the trials.
    interrupted: threading.Event = field(default_factory=threading.Event)

    def phase(self, name: str, param: str, values: list | None, count: int, open_study, make_trial,
              on_outcome=None) -> Phase:  # fmt: skip
        """One study's trials for the workers to run (parallel.drain)."""
        return Phase(
            name, param, values, count, open_study,
            make_objective=lambda phase, slot: trial_objective(
                self, phase, make_trial, self.slots[slot], on_outcome
            ),
            is_done=lambda trial: self.done(trial, name),
        )  # fmt: skip

    def drain(self, phase: Phase) -> None:
        drain(phase, len(self.slots), self.halt, self.interrupted)

    def make_trial(self, recipe: str, phase: str, lr: float, seed: int, chosen: str | None = None) -> Trial:
        output_dir = trial_dir(self.config, recipe, lr, seed)
        log = Path(self.config.output_dir) / LOG_DIR / f"{recipe}-lr{format_lr(lr)}-seed{seed}.log"
        command = trial_command(self.config, recipe, lr, seed, sys.executable)
        return Trial(recipe, phase, lr, seed, output_dir, log, command, chosen)

    def done(self, trial, study_name: str) -> bool:
        return is_done(trial, self.config, self.retry_before.get(study_name, 0))


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


def prepare_retries(study, run: Run, param: str) -> None:
    """For each value whose newest trial was interrupted by Ctrl-C or SIGTERM (or failed before this run,
    with retry_failed): a WAITING copy with the same parameters (study.requeue), which the next trial
    runs. A killed sweep's trials were queued again already, by the heartbeat's callback (study.py)."""
    trials = study.get_trials(deepcopy=False)
    run.retry_before.setdefault(study.study_name, len(trials))  # the failures retry_failed reruns
    waiting = {trial.params.get(param) for trial in trials if trial.state.name == "WAITING"}
    for value, trial in latest_by_key(trials, lambda t: t.params.get(param)).items():
        if value is not None and value not in waiting and not run.done(trial, study.study_name):
            requeue(study, trial)


def trial_objective(
    run: Run,
    phase: Phase,
    make_trial: Callable[[Any], Trial],
    environment: dict[str, str],
    on_outcome: Callable[[Trial, Outcome], None] | None = None,
) -> Callable[[Any], float]:
    """The Optuna objective of one trial of `phase`: launch it (with its worker's `environment`), record
    its outcome; a failed one raises TrialFailed. A trial parallel.claim refuses (a value another worker
    runs) ends PRUNED unlaunched; `on_outcome` may stop the run after a trial (crossval's bad input)."""

    def objective(trial) -> float:
        if not claim(trial, phase):
            skip_trial("another trial runs this value")
        spec = make_trial(trial)
        spec.environment = dict(environment)
        set_attributes(trial, phase=spec.phase, recipe=spec.recipe, learning_rate=spec.learning_rate,
                       seed=spec.seed, output_dir=str(spec.output_dir), log=str(spec.log), chosen=spec.chosen,
                       status=RUNNING)  # fmt: skip
        try:
            outcome = run.launch(spec, run.config)
        except BaseException:  # Ctrl-C, SIGTERM: Optuna records FAIL; this says it was cut short
            set_attributes(trial, status=INTERRUPTED, reason=INTERRUPTED_REASON)
            raise
        if run.interrupted.is_set():  # another thread stopped this trial's processes: not a failure
            set_attributes(trial, status=INTERRUPTED, reason=INTERRUPTED_REASON)
            raise TrialInterrupted(spec.label)
        set_attributes(trial, status=outcome.status, reason=outcome.reason, exit_code=outcome.exit_code,
                       wall_s=round(outcome.wall_s, 1), results=outcome.results)  # fmt: skip
        report_progress(run, spec, outcome)
        if on_outcome is not None:
            on_outcome(spec, outcome)
        if outcome.status != COMPLETE:
            raise TrialFailed(outcome.reason)
        return outcome.value

    return objective


def set_attributes(trial, **attributes) -> None:
    for key, value in attributes.items():
        trial.set_user_attr(key, value)


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


def run_search(run: Run, recipe: str) -> None:
    """The learning-rate search at search_seed: the grid (GridSampler) or `trials` TPE trials."""
    config, name = run.config, search_study_name(recipe)
    search = config.recipe(recipe).learning_rates
    study = open_study(run.storage, name, config, search_sampler(config, recipe, 0))
    grid = list(search.grid) if search.is_grid else None
    space = {"grid": grid} if grid else {"low": search.low, "high": search.high, "trials": search.trials}
    check_search_space(study, {**space, "seed": config.search_seed})
    prepare_retries(study, run, "learning_rate")

    def make_trial(trial) -> Trial:
        if search.is_grid:
            lr = trial.suggest_categorical("learning_rate", grid)
        else:
            lr = trial.suggest_float("learning_rate", search.low, search.high, log=True)
        return run.make_trial(recipe, SEARCH, lr, config.search_seed)

    def search_study(slot: int):  # each worker's own Study object (and sampler), on the shared storage
        if search.is_grid:
            return open_study(run.storage, name, config, search_sampler(config, recipe, 0))
        # TPE seeded by how many trials are done: the same draws after a resume (one worker)
        done = sum(run.done(trial, name) for trial in study.get_trials(deepcopy=False))
        worker = None if len(run.slots) == 1 and not run.shared else slot
        return open_study(run.storage, name, config, search_sampler(config, recipe, done, worker))

    run.drain(run.phase(name, "learning_rate", grid, search.trials, search_study, make_trial))


def run_seeds(run: Run, recipe: str, chosen_lr: float) -> None:
    """The chosen learning rate at each seed of `seeds` but search_seed (GridSampler over the seeds)."""
    config, name = run.config, seeds_study_name(recipe, chosen_lr)
    seeds = list(config.seeds_to_run)
    if not seeds:
        return
    chosen = f"{recipe} lr={format_lr(chosen_lr)}"

    def seeds_study(slot: int):
        return open_study(run.storage, name, config, seeds_sampler(seeds))

    study = seeds_study(0)
    check_search_space(study, {"learning_rate": chosen_lr, "seeds": seeds})
    prepare_retries(study, run, "seed")

    def make_trial(trial) -> Trial:
        return run.make_trial(recipe, SEEDS, chosen_lr, trial.suggest_categorical("seed", seeds), chosen)

    run.drain(run.phase(name, "seed", seeds, 0, seeds_study, make_trial))


# --- before anything runs: the trials and an estimate of their time ------------------------------------


def planned_trials(run: Run, preflight: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every trial of the sweep as it stands: done (with its figure), to run, or skipped by the planner."""
    config, rows = run.config, []
    for recipe in config.recipes:
        name, answer, search = recipe.name, preflight.get(recipe.name, {}), recipe.learning_rates
        skip = answer if answer.get("fits") is False else None
        search_name = search_study_name(name)
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


def _row(recipe, phase, lr, seed, trial=None, skip=None) -> dict[str, Any]:
    row = dict(recipe=recipe, phase=phase, learning_rate=lr, seed=seed, status="to run", value=None)
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
    means = {recipe: sum(times) / len(times) for recipe, times in by_recipe.items()}
    total = sum(means.get(row["recipe"], overall) for row in todo)
    guessed = sorted({row["recipe"] for row in todo} - set(by_recipe))
    note = f" ({', '.join(guessed)}: no finished trial yet, at the mean of the others)" if guessed else ""
    return total, f"from the wall time of this sweep's {len(finished)} finished trials, per recipe{note}"


def format_plan(
    config: SweepConfig,
    preflight: dict[str, dict[str, Any]],
    rows: list[dict[str, Any]],
    workers: Workers = ONE_WORKER,
) -> str:
    study = redact(workers.storage) if workers.shared else Path(config.output_dir) / STUDY_FILE
    at_once = f"; {workers.count} trials at once on this machine" if workers.count > 1 else ""
    lines = [
        f"Sweep {config.name}: {', '.join(r.name for r in config.recipes)}; {config.metric} on validation "
        f"({config.direction}); search at seed {config.search_seed}, then the chosen learning rate at seeds "
        f"{', '.join(map(str, config.seeds))}. Study: {study}; W&B group: "
        f"{config.group}; launched with accelerate --config_file {config.accelerate_config}{at_once}.",
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


@contextlib.contextmanager
def resumed_storage(config: SweepConfig, workers: Workers, command: str, unit: str, file: str = STUDY_FILE):
    """The study's storage, OUTPUT_DIR held meanwhile (with a shared study the database, not the lock,
    keeps trials apart), and what a killed run left running failed and queued again (study.py). The lock
    of a killed run of this same command is taken over: rerunning it is how it resumes; another
    command's (a recipe run, an export) is refused. `unit`: "trial" or "fold"."""
    output_dir = Path(config.output_dir)
    with (
        contextlib.nullcontext()
        if workers.shared
        else lock_directory(
            output_dir,
            command,
            stale_advice=f"Or give this {command} another output_dir. ",
            resumes_itself=True,
        )
    ):
        stale = RequeueStaleTrials()
        storage = open_storage(
            config, on_stale_trial=stale, file=file, url=workers.storage, parallel=workers.parallel
        )
        fail_stale_trials(storage, wait=not workers.parallel)
        if stale.trials:
            print(f"Resuming: {len(stale.trials)} {unit}(s) interrupted by the last run will be rerun: "
                  + ", ".join(str(t.user_attrs.get("output_dir")) for t in stale.trials))  # fmt: skip
        stale.announce = True
        yield storage


def with_progress(run: Run, unit: str, total: int, description: str, work: Callable[[], None]) -> int | None:
    """`work()` under a progress bar of `total` trials; Ctrl-C or SIGTERM: the running one is recorded as
    interrupted and the exit code returned (None when the work ended)."""
    try:
        with stop_on_sigterm(), tqdm(total=total, unit=unit, desc=description) as bar:
            run.bar = bar
            work()
    except (KeyboardInterrupt, SweepStopped) as error:
        print(
            f"\ninterrupted: the running {unit} is recorded as interrupted; run the same command to resume."
        )
        return getattr(error, "exit_code", 130)
    return None


def run_recipes(run: Run, preflight: dict[str, dict[str, Any]]) -> None:
    for recipe in run.config.recipes:
        if preflight.get(recipe.name, {}).get("fits") is False:
            continue  # skipped before launch, with the planner's prediction as the reason (in the plan)
        run_search(run, recipe.name)
        search = search_results(study_trials(run.storage, search_study_name(recipe.name)))
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
    workers: Workers = ONE_WORKER,
) -> int:
    """The whole sweep: check, print the plan, run what is left (resuming), report (`draw`: with its
    chart). Returns the exit code. `workers`: trials at once here, and a study shared with other machines."""
    output_dir = Path(config.output_dir)
    slots = slot_environments(workers.count, config.accelerate_config)
    output_dir.mkdir(parents=True, exist_ok=True)
    with resumed_storage(config, workers, "sweep", "trial") as storage:
        answers = preflight(config)
        run = Run(config, storage, launch, slots=slots, shared=workers.shared)
        rows = planned_trials(run, answers)
        print(format_plan(config, answers, rows, workers))
        if dry_run:
            return 0
        todo = sum(row["status"] == "to run" for row in rows)
        stopped = with_progress(run, "trial", todo, f"sweep {config.name}", lambda: run_recipes(run, answers))
        if stopped is not None:
            return stopped
        settled = sum(1 for trial in sweep_trials(storage) if trial.user_attrs.get("phase"))
        if workers.shared and not claim_report(storage, f"{config.name}:report:{settled}"):
            print(format_report(summarize(config, storage, answers)))
            print(
                f"Every trial has finished; another worker writes {output_dir / RESULTS_JSON} (and the chart)."
            )
            return 0
        report(config, storage, answers, draw=draw)
    return 0
