"""`recipes-lib crossval`: K folds as the sweep's trials (one study in OUTPUT_DIR/crossval.db whose trials
are the folds, enqueued in order, resumable as a sweep is), then the out-of-fold predictions and the figures.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION
from recipes_lib.credentials import redact
from recipes_lib.data.files import write_jsonl
from recipes_lib.errors import ConfigError
from recipes_lib.results import read_results
from recipes_lib.training.checkpoints import RUN_WEIGHTS, checkpoints_in
from recipes_lib.whole_files import write_text_whole
from recipes_workbench.crossval.ensemble import format_test_summary, test_figures
from recipes_workbench.crossval.folds import (
    FOLDS_DIR,
    TrainingRows,
    assign_folds,
    fold_files,
    read_training_rows,
    write_fold_files,
)
from recipes_workbench.crossval.oof import OOF_FILE, RESULTS_FILE, format_summary, out_of_fold_rows
from recipes_workbench.shared import mean_and_std
from recipes_workbench.sweep.config import (
    LearningRateSearch,
    RecipeSweep,
    SweepConfig,
    check_paths,
    launch_prefix,
    metric_direction,
    recipe_arguments,
)
from recipes_workbench.sweep.parallel import ONE_WORKER, Workers, slot_environments
from recipes_workbench.sweep.runner import (
    LOG_DIR,
    Run,
    pending,
    prepare_retries,
    resumed_storage,
    with_progress,
)
from recipes_workbench.sweep.study import (
    check_search_space,
    claim_report,
    latest_by_key,
    open_study,
    status_of,
    study_trials,
)
from recipes_workbench.sweep.trials import COMPLETE, Outcome, Trial, launch_trial

STUDY_FILE = "crossval.db"
FOLD_PHASE = "fold"
DEFAULT_METRICS = {MULTI_LABEL: "eval_f1_micro", REGRESSION: "eval_mse"}
DEFAULT_METRIC = "eval_accuracy"
BAD_INPUT_EXIT_CODE = 2


@dataclass(frozen=True)
class CrossvalSettings:
    """What `recipes-lib crossval` was asked: the recipe and its arguments, the folds, where."""

    recipe: str
    output_dir: str
    folds: int = 5
    seed: int = 42
    group_column: str | None = None
    config_file: str | None = None
    recipe_args: tuple[tuple[str, tuple[str, ...]], ...] = ()
    data: tuple[tuple[str, Any], ...] = ()  # the recipe's data arguments, from --config then the command line
    accelerate_config: str = "accelerate_configs/single_gpu.yaml"
    metric: str | None = None
    experiment: str | None = None
    recipes_dir: str = "recipes"
    retry_failed: bool = False
    keep_fold_models: bool = False  # else each fold's weights and checkpoints go once it is complete

    @property
    def study_name(self) -> str:
        return f"{self.recipe}:folds"


@dataclass
class FoldTrial(Trial):
    fold: int = 0
    folds: int = 0

    @property
    def label(self) -> str:
        return f"{self.recipe} fold {self.fold + 1}/{self.folds}"


def engine_config(settings: CrossvalSettings, metric: str) -> SweepConfig:
    """The sweep's config for the folds: one recipe at its own learning rate, the folds' seed."""
    config = SweepConfig(
        recipes=(RecipeSweep(settings.recipe, LearningRateSearch()),),
        output_dir=settings.output_dir,
        base_config=settings.config_file,
        accelerate_config=settings.accelerate_config,
        metric=metric,
        direction=metric_direction(metric),
        search_seed=settings.seed,
        seeds=(settings.seed,),
        args=settings.recipe_args,
        experiment=settings.experiment or f"crossval-{Path(settings.output_dir).resolve().name}",
        recipes_dir=settings.recipes_dir,
        retry_failed=settings.retry_failed,
    )
    check_paths(config)
    return config


def fold_output_dir(settings: CrossvalSettings, fold: int) -> Path:
    return Path(settings.output_dir) / f"fold-{fold}"


def fold_trial(
    settings: CrossvalSettings, config: SweepConfig, training: TrainingRows, fold: int
) -> FoldTrial:
    """The fold's `accelerate launch`: the recipe's arguments, then the fold's files, seed and directory."""
    train_path, held_out_path = fold_files(training, settings.output_dir, fold)
    output_dir = fold_output_dir(settings, fold)
    command = [
        *launch_prefix(config, sys.executable),
        str(Path(config.recipes_dir) / f"{settings.recipe}.py"),
        *recipe_arguments(config, settings.recipe),
        "--train_file", str(train_path),
        "--validation_file", str(held_out_path),
        "--seed", str(settings.seed),
        "--output_dir", str(output_dir),
        "--overwrite_output_dir", "true",
        "--run_name", f"{settings.recipe} fold {fold + 1}/{settings.folds}",
    ]  # fmt: skip
    log = Path(settings.output_dir) / LOG_DIR / f"fold-{fold}.log"
    return FoldTrial(settings.recipe, FOLD_PHASE, None, settings.seed, output_dir, log, command,  # type: ignore[arg-type]
                     fold=fold, folds=settings.folds)  # fmt: skip


def folds_written(training: TrainingRows, assignment, output_dir: Path) -> bool:
    """Whether OUTPUT_DIR/folds holds these folds already (a resumed run, or another worker's), so they
    are not rewritten under a fold that reads them."""
    record = output_dir / FOLDS_DIR / "folds.json"
    try:
        written = json.loads(record.read_text())
    except (OSError, ValueError):
        return False
    return written == {"train_file": training.path, "folds": assignment.tolist()}


def run_crossval(
    settings: CrossvalSettings,
    launch: Callable[[Trial, SweepConfig], Outcome] = launch_trial,
    workers: Workers = ONE_WORKER,
) -> int:
    """Check and write the folds, run what is left of them (resuming), then the out-of-fold predictions
    and crossval_results.json. Returns the exit code. `workers`: folds at once here, and a study shared
    with other machines (sweep/parallel.py), whose output_dir must then be one all of them share."""
    output_dir = Path(settings.output_dir)
    training = read_training_rows(dict(settings.data))
    assignment, stratified = assign_folds(training, settings.folds, settings.seed, settings.group_column)
    metric = settings.metric or DEFAULT_METRICS.get(training.task, DEFAULT_METRIC)
    config = engine_config(settings, metric)
    slots = slot_environments(workers.count, settings.accelerate_config)
    with resumed_storage(config, workers, "crossval", "fold", STUDY_FILE) as storage:
        folds = list(range(settings.folds))

        # The folds in ascending order (a retry first), each enqueued with its number: Optuna's default
        # sampler never draws one. With --workers or --storage several run at once.
        def fold_study(slot: int):
            return open_study(storage, settings.study_name, config, sampler=None)

        study = fold_study(0)
        check_search_space(
            study,
            {"folds": settings.folds, "seed": settings.seed, "group_column": settings.group_column,
             "train_file": str(Path(training.path).resolve())},
        )  # fmt: skip
        if not folds_written(training, assignment, output_dir):
            write_fold_files(training, assignment, output_dir)
        launcher = launch if settings.keep_fold_models else pruning(launch)
        run = Run(config, storage, launcher, slots=slots, shared=workers.shared)
        prepare_retries(study, run, "fold")
        todo = pending(study.get_trials(deepcopy=False), run, settings.study_name, "fold", folds)
        print(
            f"Cross-validation of {settings.recipe} on {training.path}: {settings.folds} folds of "
            f"{len(training.rows)} rows ({training.task}), stratified on {stratified}; seed {settings.seed}; "
            f"{metric} on each held-out fold; {settings.accelerate_config}. Study: {redact(workers.storage) if workers.shared else output_dir / STUDY_FILE}; "
            f"W&B group: {config.group}. To run: {len(todo)} fold(s)"
            + (f", {workers.count} at once on this machine." if workers.count > 1 else ".")
        )

        def make_trial(trial) -> Trial:
            return fold_trial(settings, config, training, trial.suggest_categorical("fold", folds))

        phase = run.phase(settings.study_name, "fold", folds, 0, fold_study, make_trial, stop_on_bad_input)
        stopped = with_progress(
            run, "fold", len(todo), f"crossval {output_dir.name}", lambda: run.drain(phase)
        )
        if stopped is not None:
            return stopped
        return finish(settings, config, training, assignment, stratified, storage, workers.shared)


def pruning(launch: Callable[[Trial, SweepConfig], Outcome]) -> Callable[[Trial, SweepConfig], Outcome]:
    """The launcher, then a complete fold's weights and checkpoints deleted: the fold scored its held-out
    rows (and the test file) in its own process, and the cross-validation reads only those predictions
    and results.json. A 5-fold bert-base keeps 5 x 0.4 GB less; --keep_fold_models keeps them."""

    def launch_and_prune(trial: Trial, config: SweepConfig) -> Outcome:
        outcome = launch(trial, config)
        if outcome.status == COMPLETE:  # its weights (full model, adapter, merged model) and checkpoints
            weights = [path for pattern in RUN_WEIGHTS for path in trial.output_dir.glob(pattern)]
            for path in [*checkpoints_in(trial.output_dir), *weights]:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        return outcome

    return launch_and_prune


def stop_on_bad_input(fold: Trial, outcome: Outcome) -> None:
    """A fold whose recipe refused its arguments (exit code 2): every other fold would too, so none
    other is started (those other workers run go on to their end)."""
    if outcome.exit_code == BAD_INPUT_EXIT_CODE:
        raise ConfigError(
            f"The recipe refused the fold's arguments, so no other fold was started: {outcome.reason} "
            f"(log: {fold.log}). Fix the arguments and rerun the same command with --retry_failed."
        )


def finish(
    settings: CrossvalSettings,
    config: SweepConfig,
    training: TrainingRows,
    assignment,
    stratified: str,
    storage,
    shared: bool = False,
) -> int:
    """The out-of-fold predictions and crossval_results.json, once every fold is complete; with a study
    shared between machines, by one worker only (the one that claims the report, sweep/study.py)."""
    latest = latest_by_key(study_trials(storage, settings.study_name), lambda trial: trial.params.get("fold"))
    per_fold = []
    for fold in range(settings.folds):
        trial = latest.get(fold)
        per_fold.append({
            "fold": fold,
            "status": "to run" if trial is None else status_of(trial),
            config.metric: None if trial is None else trial.value,
            "rows_held_out": int((assignment == fold).sum()),
            "output_dir": str(fold_output_dir(settings, fold)),
            "model_kept": settings.keep_fold_models,
            "reason": None if trial is None else trial.user_attrs.get("reason") or None,
        })  # fmt: skip
    unfinished = [row for row in per_fold if row["status"] != COMPLETE]
    values = [row[config.metric] for row in per_fold]
    print(format_summary(config.metric, values))
    if unfinished:
        for row in unfinished:
            print(f"fold {row['fold']}: {row['status']}: {row['reason'] or 'not run'}")
        print(
            "Not every fold is complete, so no out-of-fold predictions were written; rerun the same command "
            "(--retry_failed reruns the failed folds)."
        )
        return 1
    output_dir = Path(settings.output_dir)
    settled = len(study_trials(storage, settings.study_name))
    if shared and not claim_report(storage, f"{settings.study_name}:report:{settled}"):
        print(
            f"Every fold is complete; another worker writes {output_dir / OOF_FILE} and {output_dir / RESULTS_FILE}."
        )
        return 0
    fold_dirs = {fold: fold_output_dir(settings, fold) for fold in range(settings.folds)}
    rows = out_of_fold_rows(training, assignment, fold_dirs)
    write_jsonl(output_dir / OOF_FILE, rows)
    test = test_figures(training, dict(settings.data), config.metric, fold_dirs, output_dir)
    if test is not None:
        print(format_test_summary(test))
    first_run = read_results(fold_output_dir(settings, 0))
    results = {
        "recipe": settings.recipe,
        "train_file": training.path,
        "data_arguments": dict(settings.data),
        "task": training.task,
        "label_column": training.label_column,
        "text_columns": first_run.text_columns,
        "classes": [str(name) for name in training.labels.names],
        "folds": settings.folds,
        "seed": settings.seed,
        "group_column": settings.group_column,
        "stratified_on": stratified,
        "metric": config.metric,
        "direction": config.direction,
        **mean_and_std([float(value) for value in values]),
        "per_fold": per_fold,
        "oof_predictions": str(output_dir / OOF_FILE),
        # With --test_file: each fold's model on the test split, mean ± std, and the folds' ensemble.
        "test": test,
    }
    write_text_whole(output_dir / RESULTS_FILE, json.dumps(results, indent=2) + "\n")
    print(f"Out-of-fold predictions: {output_dir / OOF_FILE}; figures: {output_dir / RESULTS_FILE}.")
    if training.task != REGRESSION:
        print(f"Rows most likely mislabelled: recipes-lib label-issues {output_dir}")
    return 0
