"""`recipes-lib sweep`: its flags, merged over the sweep file, and the dispatch to the sweep package.

The sweep itself (the study, the trials, the report) is recipes_workbench/sweep/; it needs Optuna, the optional
extra `sweep`. Without it the command says which extra to install; `--wandb_sweep` (writing W&B Sweeps
files) needs only the sweep file's checks and works without Optuna.
"""

from __future__ import annotations

import importlib
import sys

from recipes_lib.credentials import refuse_secret_options
from recipes_lib.errors import ConfigError
from recipes_workbench.sweep.config import (
    DEFAULT_ACCELERATE_CONFIG,
    DEFAULT_METRIC,
    DEFAULT_SEARCH_SEED,
    SweepConfig,
    load_sweep_file,
    parse_args_mapping,
    sweep_config_from_values,
    write_wandb_sweeps,
)

# Flag -> sweep file key, for the flags that override one key.
FLAG_KEYS = (
    "base_config", "accelerate_config", "output_dir", "metric", "direction", "search_seed", "seeds",
    "memory_budget", "experiment", "wandb_project", "recipes_dir", "folds",
)  # fmt: skip


def add_sweep_parser(commands) -> None:
    parser = commands.add_parser(
        "sweep",
        help="Compare recipes fairly: a learning-rate search per recipe, the best repeated over seeds, one report.",
        description="Run a recipe comparison as one command: each recipe's learning rate searched on validation "
        "(a grid, or a range with Optuna's TPE), the chosen one repeated over seeds, every trial its own "
        "`accelerate launch`, the study in OUTPUT_DIR/sweep.db (rerun the same command to resume), then a table, "
        "sweep_results.json and a chart. Flags override the file. docs/sweeps.md has the details.",
    )
    parser.add_argument(
        "config", nargs="?", help="the sweep YAML file (recipes/sweeps/sweep_demo.yaml shows every key)"
    )
    parser.add_argument(
        "--recipe",
        action="append",
        metavar="NAME=GRID|RANGE",
        help="a recipe and its learning rates: full_ft=2e-5,5e-5,1e-4 (a grid) or lora=1e-4:1e-2:6 "
        "(LOW:HIGH:TRIALS, searched with TPE); repeat for each recipe (replaces the file's recipes)",
    )
    parser.add_argument("--base_config", help="a recipe config YAML every trial starts from")
    parser.add_argument(
        "--accelerate_config", help=f"every trial's accelerate config (default {DEFAULT_ACCELERATE_CONFIG})"
    )
    parser.add_argument(
        "--output_dir", help="where the trials, sweep.db and the report go (default outputs/sweep)"
    )
    parser.add_argument(
        "--metric", help=f"the validation key of results.json to choose on (default {DEFAULT_METRIC})"
    )
    parser.add_argument(
        "--direction", choices=["maximize", "minimize"], help="default: from the metric's name"
    )
    parser.add_argument(
        "--search_seed", type=int, help=f"the seed of the search trials (default {DEFAULT_SEARCH_SEED})"
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        help="the seeds the chosen learning rate is repeated with (default 1 2 3)",
    )
    parser.add_argument(
        "--arg", action="append", metavar="KEY=VALUE", help="a recipe option for every trial (repeatable)"
    )
    parser.add_argument(
        "--memory_budget",
        type=float,
        metavar="GIB",
        help="skip trials the planner predicts above this many GiB",
    )
    parser.add_argument(
        "--experiment", help="the W&B group of every trial (default sweep-<output_dir's name>)"
    )
    parser.add_argument("--wandb_project", help="the W&B project of every trial")
    parser.add_argument("--recipes_dir", help="the folder holding the recipe scripts (default recipes)")
    parser.add_argument(
        "--folds",
        type=int,
        help="each trial a K-fold cross-validation of the training file (recipes-lib crossval); default: none",
    )
    parser.add_argument(
        "--retry_failed", action="store_true", default=None, help="rerun trials that failed before"
    )
    parser.add_argument(
        "--wandb_sweep",
        metavar="FILE",
        help="write a W&B Sweeps config per recipe (FILE, or FILE-<recipe>.yaml for several) and run nothing",
    )
    add_parallel_arguments(parser, "trials")
    parser.add_argument(
        "--dry_run",
        action="store_true",
        help="print the trials it would run, and the planner's verdicts; run nothing",
    )


def add_parallel_arguments(parser, what: str) -> None:
    """--workers and --storage, shared by `sweep` and `crossval` (docs/sweeps.md#trials-in-parallel)."""
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help=f"run up to N {what} at once on this machine, each its own launch: one GPU each (CUDA_VISIBLE_DEVICES; "
        "N at most the visible GPUs), or on the CPU cores // N threads each (default 1: one at a time)",
    )
    parser.add_argument(
        "--storage",
        metavar="URL",
        help="the Optuna study in this database (postgresql://USER:PASSWORD@HOST/DB, mysql+pymysql://...) instead "
        f"of the SQLite file in OUTPUT_DIR, so that several machines running this same command share the {what}: "
        "each a worker, OUTPUT_DIR on storage they all reach; the 'postgres' extra has the PostgreSQL drivers",
    )


def workers_from_arguments(args):
    """The parsed --workers and --storage, checked (the sweep's parallel.Workers)."""
    from recipes_workbench.sweep.parallel import Workers

    if args.workers < 1:
        raise ConfigError(
            f"--workers is {args.workers}; give how many trials run at once on this machine, 1 or more."
        )
    storage = args.storage.strip() if args.storage else None
    if args.storage is not None and not storage:
        raise ConfigError(
            "--storage is empty; give a database URL (postgresql://USER:PASSWORD@HOST/DB) or leave it out."
        )
    return Workers(args.workers, storage)


def sweep_config_from_arguments(args) -> SweepConfig:
    """The sweep file's values, then the flags given on top."""
    values = load_sweep_file(args.config) if args.config else {}
    source = f"The sweep file {args.config}" if args.config else "The sweep's flags"
    for key in FLAG_KEYS:
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    if args.recipe:
        pairs = [item.split("=", 1) for item in args.recipe]
        if any(len(pair) != 2 for pair in pairs):
            raise ConfigError(
                f"--recipe takes NAME=LEARNING_RATES, e.g. --recipe full_ft=2e-5,5e-5 or --recipe lora=1e-4:1e-2:6; got {args.recipe}."
            )
        values["recipes"] = dict(pairs)
    if args.arg:
        refuse_secret_options([f"--{item}" for item in args.arg], "--arg")  # --arg hub_token=...
        values["args"] = {
            **dict(parse_args_mapping(values.get("args"), "'args'")),
            **dict(parse_args_mapping(args.arg, "--arg")),
        }
    if args.retry_failed:
        values["retry_failed"] = True
    return sweep_config_from_values(values, source, config_file=args.config)


def require_extra(module: str, command_needs: str, extra: str) -> None:
    """A ConfigError naming the optional extra to install when `module` is missing."""
    try:
        importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"recipes-lib {command_needs}, which is not installed; install the '{extra}' extra: "
            f"pip install 'recipes-lib[{extra}]' (in a checkout: pip install -e '.[{extra}]')."
        ) from None


def sweep_command(args) -> int:
    """`recipes-lib sweep`: the config from the file and flags, then the sweep, the W&B Sweeps file or the plan."""
    try:
        config = sweep_config_from_arguments(args)
        if args.wandb_sweep and config.folds is not None:
            raise ConfigError(
                f"--wandb_sweep writes W&B's own sweep of plain recipe runs, and 'folds' ({config.folds}) makes each "
                "trial a cross-validation, which W&B's agent cannot run; drop one of them."
            )
        if args.wandb_sweep:
            for path in write_wandb_sweeps(config, args.wandb_sweep):
                print(f"W&B Sweeps config: {path} (wandb sweep {path}; then wandb agent <sweep id>)")
            return 0
        require_extra("optuna", "sweep runs its study with Optuna", "sweep")
        # Imported here, after the check: the runner imports Optuna (the optional extra 'sweep').
        from recipes_workbench.sweep.runner import run_sweep

        return run_sweep(config, dry_run=args.dry_run, workers=workers_from_arguments(args))
    except KeyboardInterrupt:  # before the first trial (the check of the arguments): nothing to record
        print("\ninterrupted: no trial was running; run the same command to start again.", file=sys.stderr)
        return 130
