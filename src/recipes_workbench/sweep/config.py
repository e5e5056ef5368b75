"""What a sweep is (docs/sweeps.md, "The sweep file"): the YAML file and `recipes-lib sweep`'s flags, every
key checked before anything runs, and each trial's command. It reads and checks only (no torch, no Optuna):
`--wandb_sweep` and the parser need nothing more.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from recipes_lib.credentials import ENVIRONMENT_OF, canonical, is_secret_option
from recipes_lib.errors import ConfigError
from recipes_lib.results import RESULT_KEYS
from recipes_workbench.recipes import RECIPES

DEFAULT_ACCELERATE_CONFIG = "accelerate_configs/single_gpu.yaml"
CPU_ACCELERATE_CONFIG = "accelerate_configs/cpu.yaml"


def machine_accelerate_config() -> str:
    """The accelerate config that fits this machine: single_gpu.yaml with a CUDA GPU, cpu.yaml without."""
    import torch

    return DEFAULT_ACCELERATE_CONFIG if torch.cuda.is_available() else CPU_ACCELERATE_CONFIG


DEFAULT_METRIC = "eval_accuracy"
DEFAULT_SEARCH_SEED = 42  # the recipes' own default seed: a search trial is a plain run at that lr
DEFAULT_SEEDS = (1, 2, 3)
# Recipe options the sweep sets for every trial itself: a base config or `args` may not set them.
SWEEP_OWNED_OPTIONS = {
    "learning_rate": "each recipe's `learning_rate` entry",
    "seed": "`search_seed` and `seeds`",
    "output_dir": "the sweep's `output_dir` (each trial in OUTPUT_DIR/<recipe>/lr<lr>-seed<seed>)",
    "overwrite_output_dir": "the sweep (a rerun trial replaces its own directory)",
    "run_name": "the sweep (<recipe> lr=<lr> seed=<seed>)",
    "experiment": "the sweep's `experiment` (one W&B group per sweep)",
    "resume_from_checkpoint": "the sweep (an interrupted trial is rerun from the start)",
}
# Metrics where lower is better; any other is maximised unless `direction` says otherwise.
LOWER_IS_BETTER = re.compile(r"(loss|mse|mae|error)$")

TOP_LEVEL_KEYS = {
    "recipes": "{recipe: {learning_rate: [grid] or {low, high, trials}, args: {option: value}}}",
    "base_config": "a recipe config YAML shared by every trial (e.g. recipes/configs/demo.yaml)",
    "accelerate_config": f"the accelerate config every trial is launched with (default {DEFAULT_ACCELERATE_CONFIG})",
    "output_dir": "where the trials, the study database and the report go",
    "metric": f"the results.json key the learning rate is chosen on, on validation (default {DEFAULT_METRIC})",
    "direction": "maximize or minimize (default: minimize for *loss, *mse, *mae, *error; else maximize)",
    "search_seed": f"the seed of the learning-rate search (default {DEFAULT_SEARCH_SEED})",
    "seeds": f"the seeds the chosen learning rate is repeated with (default {list(DEFAULT_SEEDS)})",
    "args": "recipe options for every trial, as on the recipe's command line: {num_train_epochs: 5}",
    "memory_budget": "GiB: trials the planner predicts above it are skipped before launch",
    "experiment": "the W&B group of every trial (default: sweep-<output_dir's name>)",
    "wandb_project": "the W&B project of every trial (default: the recipes' own)",
    "recipes_dir": "where the recipe scripts are (default: recipes)",
    "retry_failed": "true: rerun trials that failed before (diverged, out of memory); default false",
    "folds": "K: each trial is a K-fold cross-validation of the base config's training file (recipes-lib "
    "crossval), its figure the mean over the folds' held-out rows; default: none (one validation split)",
}
# Recipe options a cross-validation sets for every fold itself (`folds`, recipes-lib crossval): `args`
# may not set them.
CROSSVAL_OWNED_OPTIONS = {
    "validation_file": "crossval (each fold's held-out rows)",
    "output_dir": "crossval's --output_dir (each fold in OUTPUT_DIR/fold-K)",
    "overwrite_output_dir": "crossval (a rerun fold replaces its own directory)",
    "run_name": "crossval (<recipe> fold K/N)",
    "experiment": "crossval's --experiment (one W&B group per cross-validation)",
    "resume_from_checkpoint": "crossval (an interrupted fold is rerun from the start)",
    "max_eval_samples": "nobody: every held-out row must be predicted",
}
RECIPE_KEYS = {
    "learning_rate": "a list of learning rates (a grid), or {low: L, high: H, trials: N} (TPE, log scale)",
    "args": "recipe options for this recipe's trials only, e.g. {lora_r: 16}",
}
RANGE_KEYS = ("low", "high", "trials")


@dataclass(frozen=True)
class LearningRateSearch:
    """A grid of learning rates, or a log-scale range searched with Optuna's TPE for `trials` trials."""

    grid: tuple[float, ...] = ()
    low: float | None = None
    high: float | None = None
    trials: int = 0

    @property
    def is_grid(self) -> bool:
        return bool(self.grid)

    def describe(self) -> str:
        if self.is_grid:
            return "grid " + ", ".join(format_lr(lr) for lr in self.grid)
        return f"TPE over [{format_lr(self.low)}, {format_lr(self.high)}] (log), {self.trials} trials"


@dataclass(frozen=True)
class RecipeSweep:
    name: str
    learning_rates: LearningRateSearch
    args: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (option, its value's command-line tokens)


@dataclass(frozen=True)
class SweepConfig:
    recipes: tuple[RecipeSweep, ...]
    output_dir: str
    base_config: str | None = None
    accelerate_config: str = DEFAULT_ACCELERATE_CONFIG
    metric: str = DEFAULT_METRIC
    direction: str = "maximize"
    search_seed: int = DEFAULT_SEARCH_SEED
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    args: tuple[tuple[str, tuple[str, ...]], ...] = ()
    memory_budget_gib: float | None = None
    experiment: str | None = None
    wandb_project: str | None = None
    recipes_dir: str = "recipes"
    retry_failed: bool = False
    folds: int | None = None  # each trial a K-fold cross-validation (recipes-lib crossval); None: one split
    config_file: str | None = field(default=None, compare=False)

    @property
    def group(self) -> str:
        """The W&B group of every trial: one per sweep."""
        return self.experiment or f"sweep-{Path(self.output_dir).resolve().name}"

    @property
    def name(self) -> str:
        return Path(self.output_dir).resolve().name

    @property
    def test_metric(self) -> str:
        """The same metric on the test split, when the trials have one."""
        return test_metric_of(self.metric)

    @property
    def seeds_to_run(self) -> tuple[int, ...]:
        """The seeds phase's new trials: the search trial already ran at search_seed."""
        return tuple(seed for seed in self.seeds if seed != self.search_seed)

    def recipe(self, name: str) -> RecipeSweep:
        return next(recipe for recipe in self.recipes if recipe.name == name)


def test_metric_of(metric: str) -> str:
    """eval_accuracy -> test_accuracy: the same figure on the test split (results.json's test_* key)."""
    return "test_" + metric.removeprefix("eval_")


def format_lr(lr: float | None) -> str:
    """2e-05 -> 2e-5, 0.001 -> 0.001: as the run names write it (6 significant digits)."""
    if lr is None:
        return "-"
    return f"{lr:.6g}".replace("e-0", "e-").replace("e+0", "e+")


# --- reading values ---------------------------------------------------------------------------------


def _number(value: Any, what: str, positive: bool = True) -> float:
    """A float from YAML or the command line (YAML reads 2e-5, without a dot, as a string: accepted)."""
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or (positive and number <= 0):
        raise ConfigError(
            f"{what} is {value!r}; it must be a {'positive ' if positive else ''}number such as 2e-5 "
            "(in YAML, 2.0e-5 or '2e-5')."
        )
    return number


def _integer(value: Any, what: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not (
        isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("-").isdigit())
    ):
        raise ConfigError(f"{what} is {value!r}; it must be a whole number.")
    number = int(value)
    if minimum is not None and number < minimum:
        raise ConfigError(f"{what} is {number}; it must be at least {minimum}.")
    return number


def _text(value: Any, what: str, default: str | None = None) -> str | None:
    """A path or a name: a string (a bare number in YAML read as one); a list, a mapping or true/false
    refused (str() would make a directory named "['a']")."""
    if value is None or value == "":
        return default
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{what} is {value!r}, a {type(value).__name__}; give one path or name, as text.")
    return str(value)


def _refuse_unknown(keys, valid: dict[str, str], where: str) -> None:
    for key in keys:
        if key not in valid:
            close = difflib.get_close_matches(str(key), list(valid), n=1, cutoff=0.6)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            listed = "; ".join(f"{name}: {meaning}" for name, meaning in valid.items())
            raise ConfigError(f"{where} has an unknown key '{key}'.{hint} The keys are: {listed}.")


def parse_learning_rates(value: Any, where: str) -> LearningRateSearch:
    """[lr, ...] (a grid), {low, high, trials} (a range for TPE), or the command line's 'a,b,c' / 'low:high:trials'."""
    if isinstance(value, str) and ":" in value:  # the command line's LOW:HIGH:TRIALS
        parts = value.split(":")
        if len(parts) != 3:
            raise ConfigError(f"{where} is '{value}'; a range is LOW:HIGH:TRIALS, e.g. 1e-5:1e-3:6.")
        value = dict(zip(RANGE_KEYS, parts, strict=True))
    elif isinstance(value, str):  # the command line's A,B,C (or one rate YAML read as a string)
        value = [part for part in value.split(",") if part.strip()]
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, list | tuple):
        grid = tuple(_number(item, f"A learning rate of {where}") for item in value)
        if not grid:
            raise ConfigError(f"{where} lists no learning rate; give at least one, e.g. [2.0e-5, 5.0e-5].")
        if len(set(grid)) != len(grid):
            raise ConfigError(f"{where} lists a learning rate twice ({[format_lr(lr) for lr in grid]}).")
        return LearningRateSearch(grid=tuple(sorted(grid)))
    if isinstance(value, dict):
        _refuse_unknown(value, {key: "" for key in RANGE_KEYS}, where)
        missing = [key for key in RANGE_KEYS if key not in value]
        if missing:
            raise ConfigError(
                f"{where} is a range without {', '.join(missing)}; give {{low: 1.0e-5, high: 1.0e-3, trials: 6}}."
            )
        low, high = (_number(value[key], f"'{key}' of {where}") for key in ("low", "high"))
        if low >= high:
            raise ConfigError(
                f"{where} has low {format_lr(low)} not below high {format_lr(high)}; swap them."
            )
        return LearningRateSearch(
            low=low, high=high, trials=_integer(value["trials"], f"'trials' of {where}", 1)
        )
    raise ConfigError(
        f"{where} is {value!r}; give a list of learning rates (a grid, e.g. [2.0e-5, 5.0e-5]) or a range "
        "{low: 1.0e-5, high: 1.0e-3, trials: 6} searched with Optuna's TPE."
    )


def parse_args_mapping(value: Any, where: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """{option: value} (or 'option=value' strings) as command-line arguments; sweep-owned options refused."""
    if value is None:
        return ()
    if isinstance(value, list | tuple):  # the command line's KEY=VALUE items
        pairs = [str(item).split("=", 1) for item in value]
        if any(len(pair) != 2 for pair in pairs):
            raise ConfigError(f"{where} items are KEY=VALUE, e.g. num_train_epochs=5; got {list(value)}.")
        value = dict(pairs)
    if not isinstance(value, dict):
        raise ConfigError(
            f"{where} is {value!r}; give a mapping of recipe options, e.g. {{num_train_epochs: 5}}."
        )
    pairs = []
    for key, item in value.items():
        key = str(key).removeprefix("--")
        if key in SWEEP_OWNED_OPTIONS:
            raise ConfigError(
                f"{where} sets '{key}', which the sweep sets for every trial from {SWEEP_OWNED_OPTIONS[key]}; drop it."
            )
        if is_secret_option(key) and canonical(key) not in ENVIRONMENT_OF:
            raise ConfigError(
                f"{where} sets '{key}', a secret no recipe takes as an option (a trial's command line would show "
                f"it); drop it, and give it to the trials through its environment variable. Recipe secrets: "
                f"{', '.join(ENVIRONMENT_OF)}."
            )
        if isinstance(item, dict | list) and is_secret_option(key):
            raise ConfigError(f"{where}: '{key}' is a {type(item).__name__}; give the secret as one string.")
        if isinstance(item, dict):
            raise ConfigError(f"{where}: '{key}' is a mapping; give a value as on the recipe's command line.")
        items = item if isinstance(item, list | tuple) else [item]  # a list option: one token per item
        pairs.append(
            (key, tuple(str(part).lower() if isinstance(part, bool) else str(part) for part in items))
        )
    return tuple(pairs)


def parse_recipes(value: Any, where: str) -> tuple[RecipeSweep, ...]:
    if not isinstance(value, dict) or not value:
        raise ConfigError(
            f"{where} must map each recipe to its search, e.g. recipes: {{full_ft: {{learning_rate: [2.0e-5, 5.0e-5]}}, "
            f"lora: {{learning_rate: [1.0e-3]}}}}. The recipes are: {', '.join(RECIPES)}."
        )
    recipes = []
    for name, entry in value.items():
        if name not in RECIPES:
            close = difflib.get_close_matches(str(name), list(RECIPES), n=1, cutoff=0.5)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ConfigError(
                f"{where} names a recipe '{name}' that does not exist.{hint} The recipes are: {', '.join(RECIPES)}."
            )
        if not isinstance(entry, dict):
            entry = {"learning_rate": entry}  # `lora: [1e-3, 3e-3]`, or the command line's NAME=GRID
        _refuse_unknown(entry, RECIPE_KEYS, f"{where}.{name}")
        if "learning_rate" not in entry:
            raise ConfigError(
                f"{where}.{name} has no learning_rate; give a grid [1.0e-4, 1.0e-3] or a range {{low, high, trials}}."
            )
        recipes.append(
            RecipeSweep(
                name=name,
                learning_rates=parse_learning_rates(entry["learning_rate"], f"{where}.{name}.learning_rate"),
                args=parse_args_mapping(entry.get("args"), f"{where}.{name}.args"),
            )
        )
    return tuple(recipes)


def metric_direction(metric: str, value: Any = None) -> str:
    if value is None:
        return "minimize" if LOWER_IS_BETTER.search(metric) else "maximize"
    if value not in ("maximize", "minimize"):
        raise ConfigError(f"'direction' is {value!r}; it must be maximize or minimize.")
    return value


# The validation figures of results.json a sweep can choose on (its eval_* fields, less the split's name and size).
VALIDATION_METRICS = tuple(
    key for key in RESULT_KEYS if key.startswith("eval_") and key not in ("eval_split", "eval_samples")
)


def _metric(value: Any) -> str:
    metric = _text(value, "'metric'", DEFAULT_METRIC)
    if metric.startswith("test_"):
        raise ConfigError(
            f"'metric' is {metric}: a test-split metric. The learning rate is chosen on validation; give the "
            f"validation key (eval_{metric.removeprefix('test_')}) and the report takes its test_ twin from "
            "the chosen trials when the runs have a test split."
        )
    if metric not in VALIDATION_METRICS:
        keys = ", ".join(VALIDATION_METRICS)
        raise ConfigError(
            f"'metric' is {metric}; give a results.json validation key: {keys} (docs/results-format.md says "
            "what each is)."
        )
    return metric


def _seeds(value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, list | tuple) else [value]
    seeds = tuple(_integer(item, "A seed of 'seeds'", 0) for item in items)
    if not seeds:
        raise ConfigError(
            "'seeds' is empty; give the seeds the chosen learning rate is repeated with, e.g. [1, 2, 3]."
        )
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"'seeds' lists a seed twice ({list(seeds)}); each seed once.")
    return seeds


def _boolean(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise ConfigError(f"{what} is {value!r}; it must be true or false.")


def sweep_config_from_values(
    values: dict[str, Any], source: str, config_file: str | None = None
) -> SweepConfig:
    """A checked SweepConfig from the merged file and command-line values; every problem a ConfigError."""
    _refuse_unknown(values, TOP_LEVEL_KEYS, source)
    if "recipes" not in values:
        raise ConfigError(
            f"{source} names no recipes; add recipes: {{full_ft: {{learning_rate: [2.0e-5, 5.0e-5]}}, ...}} "
            "(or --recipe full_ft=2e-5,5e-5 on the command line)."
        )
    metric = _metric(values.get("metric", DEFAULT_METRIC))
    budget = values.get("memory_budget")
    config = SweepConfig(
        recipes=parse_recipes(values["recipes"], "'recipes'"),
        output_dir=_text(values.get("output_dir"), "'output_dir'", "outputs/sweep"),
        base_config=_text(values.get("base_config"), "'base_config'"),
        accelerate_config=_text(
            values.get("accelerate_config"), "'accelerate_config'", DEFAULT_ACCELERATE_CONFIG
        ),
        metric=metric,
        direction=metric_direction(metric, values.get("direction")),
        search_seed=_integer(values.get("search_seed", DEFAULT_SEARCH_SEED), "'search_seed'", 0),
        seeds=_seeds(values.get("seeds", list(DEFAULT_SEEDS))),
        args=parse_args_mapping(values.get("args"), "'args'"),
        memory_budget_gib=None if budget is None else _number(budget, "'memory_budget' (GiB)"),
        experiment=_text(values.get("experiment"), "'experiment'"),
        wandb_project=_text(values.get("wandb_project"), "'wandb_project'"),
        recipes_dir=_text(values.get("recipes_dir"), "'recipes_dir'", "recipes"),
        retry_failed=_boolean(values.get("retry_failed", False), "'retry_failed'"),
        folds=None if values.get("folds") is None else _integer(values["folds"], "'folds'", 2),
        config_file=config_file,
    )
    check_paths(config)
    if config.folds is not None:
        check_crossval_args(config)
    return config


def check_crossval_args(config: SweepConfig) -> None:
    """With `folds`, each fold's validation split is its held-out rows, all of them: options that say
    otherwise are refused before anything runs."""
    for where, pairs in (
        ("'args'", config.args),
        *((f"'recipes'.{r.name}.args", r.args) for r in config.recipes),
    ):
        for key, _ in pairs:
            if key in CROSSVAL_OWNED_OPTIONS:
                raise ConfigError(
                    f"{where} sets '{key}', but with 'folds' each trial is a cross-validation whose folds are "
                    "validated on all of their held-out rows; drop it (a --validation_file of the base config is "
                    "replaced the same way)."
                )


def check_paths(config: SweepConfig) -> None:
    """The files every trial needs, checked before any trial starts (paths are relative to where the command runs)."""
    if config.base_config is not None and not Path(config.base_config).is_file():
        raise ConfigError(
            f"'base_config' {config.base_config} is not a file; give a recipe config such as recipes/configs/demo.yaml."
        )
    if not Path(config.accelerate_config).is_file():
        raise ConfigError(
            f"'accelerate_config' {config.accelerate_config} is not a file; give one of accelerate_configs/ "
            "(cpu.yaml on a machine without a GPU, single_gpu.yaml on one GPU)."
        )
    for recipe in config.recipes:
        script = Path(config.recipes_dir) / f"{recipe.name}.py"
        if not script.is_file():
            raise ConfigError(
                f"The recipe script {script} is not there; run the sweep from the repository root, or set "
                "'recipes_dir' to the folder holding the recipe scripts."
            )


def load_sweep_file(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            f"The sweep file {path} does not exist; give a YAML file such as recipes/sweeps/sweep_demo.yaml."
        )
    try:
        values = yaml.safe_load(file.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"The sweep file {path} is not valid YAML: {str(error).splitlines()[0]}") from None
    if values is None:
        raise ConfigError(f"The sweep file {path} is empty; recipes/sweeps/sweep_demo.yaml shows every key.")
    if not isinstance(values, dict):
        raise ConfigError(
            f"The sweep file {path} must be a mapping of keys (recipes:, base_config:, ...), not a {type(values).__name__}."
        )
    return values


# --- a trial's command, and the same command for W&B's own sweep controller ------------------------------


def trial_dir(config: SweepConfig, recipe: str, lr: float, seed: int) -> Path:
    """OUTPUT_DIR/<recipe>/lr<lr>-seed<seed>: the same trial always gets the same directory."""
    return Path(config.output_dir) / recipe / f"lr{format_lr(lr)}-seed{seed}"


def recipe_arguments(config: SweepConfig, recipe: str) -> list[str]:
    """What every trial of a recipe passes its script before the per-trial settings: the base config,
    the sweep's `args`, the recipe's own `args`, the W&B group and project."""
    arguments = ["--config", config.base_config] if config.base_config else []
    # The secret options travel in the trial's environment (trials.trial_environment), not on its command line.
    for key, tokens in without_secrets((*config.args, *config.recipe(recipe).args)):
        arguments += [f"--{key}", *tokens]
    arguments += ["--experiment", config.group]
    if config.wandb_project:
        arguments += ["--wandb_project", config.wandb_project]
    return arguments


def launch_prefix(config: SweepConfig, python: str | None = None) -> list[str]:
    launcher = [python, "-m", "accelerate.commands.launch"] if python else ["accelerate", "launch"]
    return [*launcher, "--config_file", config.accelerate_config]


def trial_command(config: SweepConfig, recipe: str, lr: float, seed: int, python: str) -> list[str]:
    """The trial as one `accelerate launch` of its recipe script, with its learning rate, seed and directory
    (with `folds`: one `recipes-lib crossval`, crossval_command)."""
    if config.folds is not None:
        return crossval_command(config, recipe, lr, seed, python)
    return [
        *launch_prefix(config, python),
        str(Path(config.recipes_dir) / f"{recipe}.py"),
        *recipe_arguments(config, recipe),
        "--learning_rate", repr(lr),
        "--seed", str(seed),
        "--output_dir", str(trial_dir(config, recipe, lr, seed)),
        "--overwrite_output_dir", "true",
        "--run_name", f"{recipe} lr={format_lr(lr)} seed={seed}",
    ]  # fmt: skip


def crossval_command(config: SweepConfig, recipe: str, lr: float, seed: int, python: str) -> list[str]:
    """`folds`: the trial as `recipes-lib crossval` of the recipe at its learning rate, in the trial's directory
    (`seed` seeds the split and the folds' training: docs/crossval.md, "Cross-validated sweep trials")."""
    command = [
        python, "-m", "recipes_workbench.cli", "crossval", recipe,
        "--folds", str(config.folds),
        "--seed", str(seed),
        "--output_dir", str(trial_dir(config, recipe, lr, seed)),
        "--accelerate_config", config.accelerate_config,
        "--metric", config.metric,
        "--recipes_dir", config.recipes_dir,
        *(["--retry_failed"] if config.retry_failed else []),
        # --config and --experiment are crossval's own options; it passes the rest on to the recipe.
        *recipe_arguments(config, recipe),
    ]  # fmt: skip
    return [*command, "--learning_rate", repr(lr)]


def wandb_sweep_config(config: SweepConfig, recipe: str) -> dict[str, Any]:
    """A W&B Sweeps config running this recipe's search the way `recipes-lib sweep` launches it. W&B's
    controller knows one program per sweep and no second phase: the seeds phase is a second sweep."""
    search = config.recipe(recipe).learning_rates
    if search.is_grid:
        learning_rate: dict[str, Any] = {"values": list(search.grid)}
    else:
        learning_rate = {"distribution": "log_uniform_values", "min": search.low, "max": search.high}
    # W&B's ${args} are --learning_rate=... --seed=...; each run replaces the last one's files
    # (W&B keeps every run), in a directory of its own beside the sweep's.
    command = [
        "${env}", *launch_prefix(config), "${program}", *recipe_arguments(config, recipe),
        "--output_dir", str(Path(config.output_dir) / "wandb-sweep" / recipe),
        "--overwrite_output_dir", "true",
        "${args}",
    ]  # fmt: skip
    sweep = {
        "name": f"{config.group} {recipe}",
        "program": str(Path(config.recipes_dir) / f"{recipe}.py"),
        "method": "grid" if search.is_grid else "bayes",
        "metric": {"name": config.metric, "goal": config.direction},
        "parameters": {"learning_rate": learning_rate, "seed": {"values": [config.search_seed]}},
        "command": command,
    }
    if not search.is_grid:
        sweep["run_cap"] = search.trials
    return sweep


def write_wandb_sweeps(config: SweepConfig, file: str) -> list[Path]:
    """FILE (one recipe) or FILE-<recipe>.yaml per recipe: `wandb sweep FILE` then `wandb agent ID`."""
    target = Path(file)
    written = []
    for recipe in config.recipes:
        path = (
            target
            if len(config.recipes) == 1
            else target.with_name(f"{target.stem}-{recipe.name}{target.suffix or '.yaml'}")
        )
        seeds = ", ".join(str(seed) for seed in config.seeds)
        header = (
            f"# W&B Sweeps config for {recipe.name}, written by `recipes-lib sweep --wandb_sweep`: the learning-rate\n"
            f"# search at seed {config.search_seed}, launched as `recipes-lib sweep` launches it.\n"
            f"#   wandb sweep {path}    then    wandb agent <the sweep id it prints>\n"
            f"# Then the seeds: the same command with --learning_rate <the best> --seed S, for S in {seeds}.\n"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(header + yaml.safe_dump(wandb_sweep_config(config, recipe.name), sort_keys=False))
        written.append(path)
    return written


def without_secrets(options: Iterable[tuple[str, tuple[str, ...]]]) -> list[tuple[str, tuple[str, ...]]]:
    """(option, values) pairs for a child's command line, the handed-over secrets left out (either spelling)."""
    return [(key, values) for key, values in options if canonical(key) not in ENVIRONMENT_OF]
