"""`recipes-lib crossval` and `recipes-lib label-issues`: their flags, and the dispatch to crossval/.

crossval takes the recipe's own arguments after its flags, as on the recipe's command line
(`--config FILE`, `--num_train_epochs 1`, ...); what it needs of them to make the folds (the training
file, the label column, the task) is read here from the --config file and the command line, the
command line winning, as in the recipe.
"""

from __future__ import annotations

import difflib
import sys
from typing import Any

from recipes_lib.errors import ConfigError
from recipes_workbench.cli import options_of
from recipes_workbench.cli.sweep import add_parallel_arguments, require_extra, workers_from_arguments
from recipes_workbench.recipes import RECIPES
from recipes_workbench.sweep.config import CROSSVAL_OWNED_OPTIONS

# The recipe's data arguments the folds are made from (and the test file the folds' ensemble scores).
DATA_KEYS = (
    "train_file", "label_column_name", "problem_type", "label_delimiter", "csv_quoting", "delimiter", "test_file"
)  # fmt: skip
# The crossval flags CrossvalSettings takes under their own names.
SETTINGS_FLAGS = (
    "recipe", "output_dir", "folds", "seed", "group_column", "metric", "experiment", "recipes_dir", "retry_failed",
    "keep_fold_models",
)  # fmt: skip


def add_crossval_parser(commands) -> None:
    parser = commands.add_parser(
        "crossval",
        allow_abbrev=False,  # an abbreviation of a recipe option must not turn into one of these
        help="K-fold cross-validation of a recipe: every training row predicted by a model that never saw it.",
        description="Split the training file into K stratified folds, train the recipe once per fold (each its own "
        "`accelerate launch`, the study in OUTPUT_DIR/crossval.db: rerun the same command to resume), and write "
        "every row's out-of-fold prediction (oof_predictions.jsonl) and the metric per fold with mean ± std "
        "(crossval_results.json). Any other option is passed to the recipe. docs/crossval.md has the details.",
    )
    parser.add_argument("recipe", help=f"the recipe: {', '.join(RECIPES)}")
    parser.add_argument("--folds", type=int, default=5, help="the number of folds K (default 5)")
    parser.add_argument("--output_dir", required=True, help="where the folds, the study and the results go")
    parser.add_argument(
        "--group_column", help="a column whose rows stay together (a customer, a thread): never on both sides"
    )
    parser.add_argument(
        "--seed", type=int, default=42, help="the seed of the split and of every fold's training (default 42)"
    )
    parser.add_argument("--config", help="the recipe's config YAML (as the recipe's own --config)")
    parser.add_argument(
        "--accelerate_config",
        help="every fold's accelerate config (default: accelerate_configs/single_gpu.yaml with a GPU, "
        "accelerate_configs/cpu.yaml without one)",
    )
    parser.add_argument(
        "--metric",
        help="the results.json key reported per fold (default eval_accuracy; multi-label eval_f1_micro; "
        "regression eval_mse)",
    )
    parser.add_argument(
        "--experiment", help="the W&B group of every fold (default crossval-<output_dir's name>)"
    )
    parser.add_argument("--recipes_dir", default="recipes", help="the folder holding the recipe scripts")
    parser.add_argument("--retry_failed", action="store_true", help="rerun folds that failed before")
    parser.add_argument(
        "--keep_fold_models",
        action="store_true",
        help="keep each fold's model (and checkpoints) in OUTPUT_DIR/fold-K; by default they are deleted once the "
        "fold has scored its held-out rows (and --test_file): the results need only its predictions",
    )
    add_parallel_arguments(parser, "folds")


def add_label_issues_parser(commands) -> None:
    parser = commands.add_parser(
        "label-issues",
        help="The rows most likely mislabelled: a cross-validation's training rows, or a run's validation rows.",
        description="cleanlab's find_label_issues and label-quality scores over held-out probabilities: a "
        "recipes-lib crossval directory's oof_predictions.jsonl (every training row), or a single run's "
        "eval_predictions.jsonl (the rows of its validation file only). Writes label_issues.csv in DIR, worst "
        "first, and label_issues.json (the counts, and whether the model had learnt: a model no better than "
        "the majority class flags its own errors; a class it never predicts is named, and its rows are left "
        "out of the issues), and prints the top rows and a count of suspects per class. "
        "The 'data-quality' extra.",
    )
    parser.add_argument(
        "directory", help="a recipes-lib crossval output_dir, or a run's output_dir (its validation rows)"
    )
    parser.add_argument("--top", type=int, default=10, help="how many rows to print (default 10)")
    parser.add_argument(
        "--drop_label_issues",
        nargs="?",
        const="",
        metavar="FILE",
        help="also write the file without the flagged rows, to retrain and compare: to FILE, or "
        "DIR/train_cleaned.<ext> (a crossval: the training file) or DIR/validation_cleaned.<ext> (a run: its "
        "validation file)",
    )
    parser.add_argument(
        "--drop_most_of_a_class",
        action="store_true",
        help="let --drop_label_issues remove more than half of a class's rows (refused by default: that is more "
        "often a class the model never learnt than wrong labels)",
    )


def recipe_option_pairs(tokens: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """['--num_train_epochs', '1', '--bf16', '--x=2'] -> (('num_train_epochs', ('1',)), ('bf16', ()), ('x', ('2',)))."""
    pairs: list[tuple[str, list[str]]] = []
    for token in tokens:
        if token.startswith("--"):
            key, _, value = token[2:].partition("=")
            pairs.append((key, [value] if value else []))
        elif pairs:
            pairs[-1][1].append(token)
        else:
            raise ConfigError(
                f"'{token}' is not an option: after the recipe's name, crossval takes options (--key value), "
                "its own and the recipe's."
            )
    for key, _ in pairs:
        if key in CROSSVAL_OWNED_OPTIONS:
            raise ConfigError(
                f"--{key} is set for every fold by {CROSSVAL_OWNED_OPTIONS[key]}; leave it out of the recipe's "
                "arguments."
            )
    return tuple((key, tuple(values)) for key, values in pairs)


def data_values(config_file: str | None, pairs) -> dict[str, Any]:
    """The recipe's data arguments: the --config file's (read, and refused, as the recipe reads it), then
    the command line's."""
    from recipes_lib.config.parsing import load_config_file  # transformers' argument parser: not for --help

    loaded = {} if config_file is None else load_config_file(config_file)
    values = {key: loaded[key] for key in DATA_KEYS if loaded.get(key) is not None}
    for key, value in values.items():  # the folds are made from these before any recipe checks them
        if isinstance(value, list | dict):
            raise ConfigError(
                f"Config file '{config_file}': key '{key}' is {value!r}, a {type(value).__name__}; it takes one value."
            )
    for key, tokens in pairs:
        if key in DATA_KEYS and tokens:
            values[key] = " ".join(tokens)
    return values


def check_recipe_name(name: str) -> None:
    """A recipe of the registry, or a ConfigError naming the closest (before any fold or file is made)."""
    if name not in RECIPES:
        close = difflib.get_close_matches(name, list(RECIPES), n=1, cutoff=0.5)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(
            f"'{name}' is not a recipe.{hint} crossval takes a recipe's name first: {', '.join(RECIPES)} "
            "(e.g. recipes-lib crossval full_ft --folds 5 --output_dir outputs/cv --config recipes/configs/demo.yaml)."
        )


def crossval_command(args, recipe_tokens: list[str]) -> int:
    try:
        check_recipe_name(args.recipe)
        require_extra("optuna", "crossval runs its folds as the sweep's trials, with Optuna", "sweep")
        from recipes_workbench.crossval.runner import CrossvalSettings, run_crossval
        from recipes_workbench.sweep.config import machine_accelerate_config

        pairs = recipe_option_pairs(recipe_tokens)
        settings = CrossvalSettings(
            config_file=args.config,
            recipe_args=pairs,
            data=tuple(data_values(args.config, pairs).items()),
            accelerate_config=args.accelerate_config or machine_accelerate_config(),
            **options_of(args, *SETTINGS_FLAGS),
        )
        return run_crossval(settings, workers=workers_from_arguments(args))
    except KeyboardInterrupt:
        print("\ninterrupted: no fold was running; run the same command to start again.", file=sys.stderr)
        return 130


def label_issues_command(args) -> int:
    require_extra("cleanlab", "label-issues uses cleanlab", "data-quality")
    from recipes_workbench.crossval.label_issues import label_issues

    return label_issues(
        args.directory,
        top=args.top,
        drop_to=args.drop_label_issues,
        drop_most_of_a_class=args.drop_most_of_a_class,
    )
