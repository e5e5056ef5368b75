"""The sweep's report (docs/sweeps.md, "The report"): per recipe its chosen learning rate and the seeds'
spread, each pair of recipes tested against the seed-to-seed noise (Welch's t-test); as a terminal table,
sweep_results.json and sweep_results.png.
"""

from __future__ import annotations

import json
import math
import statistics
from itertools import combinations
from pathlib import Path
from typing import Any

from scipy import optimize, stats

from recipes_lib.units import GIB, MIB
from recipes_lib.whole_files import write_text_whole
from recipes_workbench.shared import format_table, mean_and_std, recipe_colours
from recipes_workbench.sweep.config import SweepConfig, format_lr
from recipes_workbench.sweep.study import (
    choose_learning_rate,
    latest_by_key,
    reason_of,
    search_results,
    search_study_name,
    seeds_study_name,
    status_of,
    study_trials,
    sweep_trials,
)

RESULTS_JSON = "sweep_results.json"
CHART_FILE = "sweep_results.png"
ALPHA = 0.05
POWER = 0.8
TEST_NAME = "Welch's t-test (scipy.stats.ttest_ind, equal_var=False), two-sided"


# --- from the study to per-recipe figures --------------------------------------------------------------


def trial_record(trial, config: SweepConfig) -> dict[str, Any]:
    attrs, results = trial.user_attrs, trial.user_attrs.get("results") or {}
    epochs, runtime = results.get("epochs"), results.get("train_runtime_s")
    return {
        "recipe": attrs.get("recipe"),
        "phase": attrs.get("phase"),
        "learning_rate": attrs.get("learning_rate"),
        "seed": attrs.get("seed"),
        "status": status_of(trial),
        "reason": reason_of(trial),
        "validation": results.get(config.metric),
        # `folds`: the trial's figure is a mean over its folds; their standard deviation.
        "validation_std_over_folds": results.get(f"{config.metric}_std_over_folds"),
        "test": results.get(config.test_metric),
        "peak_memory_gib": results.get("peak_memory_gib"),
        "peak_memory_source": results.get("peak_memory_source"),
        "optimizer_state_bytes": results.get("optimizer_state_bytes"),
        "time_per_epoch_s": runtime / epochs if runtime and epochs else None,
        "wall_s": attrs.get("wall_s"),
        "output_dir": attrs.get("output_dir"),
        "log": attrs.get("log"),
    }


def spread(values: list[float]) -> dict[str, Any]:
    """Mean, sample standard deviation (n - 1) and the values; std None for one value."""
    return {"n": len(values), **mean_and_std(values), "values": values}


def _mean(records: list[dict[str, Any]], key: str) -> float | None:
    values = [record[key] for record in records if record.get(key) is not None]
    return statistics.fmean(values) if values else None


def recipe_summary(config: SweepConfig, recipe: str, storage, preflight: dict[str, Any]) -> dict[str, Any]:
    search = search_results(study_trials(storage, search_study_name(recipe)))
    summary: dict[str, Any] = {
        "recipe": recipe,
        "search": [trial_record(trial, config) for trial in search],
        "memory_plan": {key: preflight.get(key) for key in ("predicted_gib", "budget_gib", "fits", "reason")},
        "chosen_learning_rate": None,
        "seeds": [],
    }
    chosen = choose_learning_rate(search, config.direction)
    if chosen is None:
        skipped = preflight.get("fits") is False
        summary["status"] = f"skipped: {preflight.get('reason')}" if skipped else "no complete search trial"
        return summary
    seeds_study = study_trials(storage, seeds_study_name(recipe, chosen))
    seeds_trials = latest_by_key(seeds_study, lambda trial: trial.params.get("seed"))
    search_trial = next(trial for trial in search if trial.params["learning_rate"] == chosen)
    if config.search_seed in config.seeds:
        seeds_trials[config.search_seed] = search_trial
    seeds = [trial_record(seeds_trials[seed], config) for seed in config.seeds if seed in seeds_trials]
    complete = [record for record in seeds if record["status"] == "complete"]
    summary.update(
        chosen_learning_rate=chosen,
        chosen_value=search_trial.value,
        seeds=seeds,
        validation=spread([record["validation"] for record in complete]),
        test=spread([record["test"] for record in complete if record["test"] is not None]),
        peak_memory_gib=_mean(complete, "peak_memory_gib"),
        peak_memory_source=next((r["peak_memory_source"] for r in complete if r["peak_memory_source"]), None),
        optimizer_state_bytes=_mean(complete, "optimizer_state_bytes"),
        time_per_epoch_s=_mean(complete, "time_per_epoch_s"),
        status="complete"
        if len(complete) == len(config.seeds)
        else f"{len(complete)} of {len(config.seeds)} seeds complete",
    )
    return summary


# --- the test of each pair -------------------------------------------------------------------------------


def detectable_difference(n_a: int, n_b: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The difference, in seed standard deviations, that a two-sided t-test at `alpha` detects with
    probability `power` for n_a and n_b seeds (noncentral t, pooled degrees of freedom)."""
    if n_a < 2 or n_b < 2:
        return None
    df = n_a + n_b - 2
    critical = stats.t.ppf(1 - alpha / 2, df)
    scale = math.sqrt(1 / (1 / n_a + 1 / n_b))

    def shortfall(effect: float) -> float:
        # The upper tail only: the lower one is below 1e-3 at these effects (and NaN far out in scipy).
        detected = stats.nct.sf(critical, df, effect * scale)
        return (1.0 if math.isnan(detected) else detected) - power

    return float(optimize.brentq(shortfall, 1e-3, 30.0))


def compare_pair(a: dict[str, Any], b: dict[str, Any], split: str, metric: str) -> dict[str, Any]:
    """Welch's t-test of two recipes' final figures over their seeds, with the verdict in words."""
    values_a, values_b = a[split]["values"], b[split]["values"]
    pair: dict[str, Any] = {
        "a": a["recipe"],
        "b": b["recipe"],
        "split": split,
        "metric": metric,
        "test": TEST_NAME,
    }
    if len(values_a) < 2 or len(values_b) < 2:
        return {
            **pair,
            "p_value": None,
            "verdict": "not tested: it needs at least 2 complete seeds per recipe",
        }
    difference = statistics.fmean(values_a) - statistics.fmean(values_b)
    pair.update(difference=difference, n_a=len(values_a), n_b=len(values_b))
    if statistics.pstdev(values_a) == 0 and statistics.pstdev(values_b) == 0:
        same = "the same value" if difference == 0 else "no spread"
        return {
            **pair,
            "p_value": None,
            "verdict": f"not tested: every seed gives {same} (no seed-to-seed noise to test against)",
        }
    result = stats.ttest_ind(values_a, values_b, equal_var=False)
    p_value = float(result.pvalue)
    pooled = math.sqrt((statistics.variance(values_a) + statistics.variance(values_b)) / 2)
    pair.update(t=float(result.statistic), df=float(getattr(result, "df", math.nan)), p_value=p_value,
                difference_in_std=difference / pooled if pooled else None,
                detectable_difference_in_std=detectable_difference(len(values_a), len(values_b)))  # fmt: skip
    if p_value < ALPHA:
        pair["verdict"] = f"larger than the seed-to-seed noise (p = {p_value:.3g} < {ALPHA})"
    else:
        pair["verdict"] = f"within the seed-to-seed noise (p = {p_value:.3g} >= {ALPHA}): not shown to differ"
    return pair


def power_note(recipes: list[dict[str, Any]], split: str) -> str:
    counts = sorted({recipe[split]["n"] for recipe in recipes if recipe.get(split)})
    if not counts:
        return ""
    n = counts[0]
    detectable = detectable_difference(n, n)
    if detectable is None:
        return "With fewer than 2 seeds per recipe there is no seed-to-seed noise to test against."
    return (
        f"With {n} seeds per recipe the test is weak: a real difference of {detectable:.1f} seed standard "
        f"deviations reaches p < {ALPHA} only {POWER:.0%} of the time, smaller ones mostly read as 'within the "
        "noise', and a p above 0.05 does not show that two recipes are equal. More seeds make it stronger "
        "(bitsandbytes advises 5-10 to tell two optimizers apart)."
    )


def summarize(config: SweepConfig, storage, preflight: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Everything the report shows, as sweep_results.json holds it."""
    recipes = [recipe_summary(config, r.name, storage, preflight.get(r.name, {})) for r in config.recipes]
    chosen = [recipe for recipe in recipes if recipe.get("validation")]
    with_test = chosen and all(
        recipe["test"]["n"] and recipe["test"]["n"] == recipe["validation"]["n"] for recipe in chosen
    )
    split = "test" if with_test else "validation"
    metric = config.test_metric if with_test else config.metric
    return {
        "sweep": config.name,
        "wandb_group": config.group,
        "metric": config.metric,
        "direction": config.direction,
        "selection": f"each recipe's learning rate is the one with the best {config.metric} on the validation "
        f"split at seed {config.search_seed}"
        if config.folds is None
        else f"each recipe's learning rate is the one with the best {config.metric}, mean over {config.folds}-fold "
        f"cross-validation of the training file, at seed {config.search_seed}",
        "folds": config.folds,
        "final_split": split,
        "final_metric": metric,
        "search_seed": config.search_seed,
        "seeds": list(config.seeds),
        "search_seed_reused": config.search_seed in config.seeds,
        "test": TEST_NAME,
        "alpha": ALPHA,
        "power_note": power_note(chosen, split),
        "recipes": recipes,
        "pairs": [compare_pair(a, b, split, metric) for a, b in combinations(chosen, 2)],
        "trials": [
            trial_record(trial, config) for trial in sweep_trials(storage) if trial.user_attrs.get("phase")
        ],
    }


# --- the report: table, JSON, chart --------------------------------------------------------------------


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _mean_std(figures: dict[str, Any] | None) -> str:
    if not figures or not figures.get("n"):
        return "-"
    if figures["std"] is None:
        return f"{figures['mean']:.4f} (1 seed)"
    return f"{figures['mean']:.4f} ± {figures['std']:.4f}"


def _memory(recipe: dict[str, Any]) -> tuple[str, str]:
    peak, state = recipe.get("peak_memory_gib"), recipe.get("optimizer_state_bytes")
    peak_text = "-" if peak is None else f"{peak:.2f} GiB"
    state_text = (
        "-" if state is None else (f"{state / GIB:.2f} GiB" if state >= GIB else f"{state / MIB:.1f} MiB")
    )
    return peak_text, state_text


def _search_value(trial: dict[str, Any]) -> str:
    """A search trial's figure; a cross-validated one (`folds`) with its folds' standard deviation."""
    std = trial.get("validation_std_over_folds")
    return _value(trial["validation"]) + ("" if std is None else f" ± {std:.4f}")


def recipe_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    split, metric = summary["final_split"], summary["metric"]
    seeds = ", ".join(str(seed) for seed in summary["seeds"])
    header = [
        "recipe", "chosen lr", f"search: validation {metric} by lr (seed {summary['search_seed']})",
        f"{split} mean ± std", f"{split}, seeds {seeds}", "peak memory", "optimizer state", "s/epoch",
    ]  # fmt: skip
    rows = []
    for recipe in summary["recipes"]:
        search = "  ".join(
            f"{format_lr(trial['learning_rate'])}: "
            + (_search_value(trial) if trial["status"] == "complete" else trial["status"] or "-")
            for trial in recipe["search"]
        )
        if recipe["chosen_learning_rate"] is None:
            rows.append([recipe["recipe"], "-", search or "-", recipe["status"], "-", "-", "-", "-"])
            continue
        per_seed = " ".join(
            _value(seed[split]) if seed["status"] == "complete" else seed["status"]
            for seed in recipe["seeds"]
        )
        peak, state = _memory(recipe)
        epoch = recipe.get("time_per_epoch_s")
        rows.append([recipe["recipe"], format_lr(recipe["chosen_learning_rate"]), search, _mean_std(recipe[split]),
                     per_seed, peak, state, "-" if epoch is None else f"{epoch:.1f}"])  # fmt: skip
    return header, rows


def pair_lines(summary: dict[str, Any]) -> list[str]:
    lines = []
    for pair in summary["pairs"]:
        head = f"{pair['a']} - {pair['b']}"
        if pair.get("difference") is not None:
            head += f" = {pair['difference']:+.4f}"
        if pair.get("p_value") is not None:
            head += f" (t = {pair['t']:.2f}, df = {pair['df']:.1f}, p = {pair['p_value']:.3g})"
        lines.append(f"  {head}: {pair['verdict']}")
    return lines


def format_report(summary: dict[str, Any], markdown: bool = False) -> str:
    header, rows = recipe_rows(summary)
    split = summary["final_split"]
    lines = [
        f"Sweep {summary['sweep']}: {summary['selection']}; the final figures are {summary['final_metric']} "
        f"on the {split} split"
        + ("" if split == "test" else " (the trials have no test split)")
        + f", over seeds {', '.join(map(str, summary['seeds']))} at that learning rate.",
        format_table(header, rows, markdown),
    ]
    if summary.get("folds"):
        lines.append(
            f"Each trial is a {summary['folds']}-fold cross-validation (recipes-lib crossval, in the trial's directory): "
            "its validation figure is the mean over the folds' held-out rows (± their std in the search column), "
            "its test figure the folds' mean on the test split; the seeds' spread is over splits and training seeds."
        )
    if summary["search_seed_reused"]:
        lines.append(
            f"Seed {summary['search_seed']} is the search's own trial: its validation figure also chose the learning "
            "rate, so a validation mean that includes it is optimistic."
        )
    sources = sorted({r["peak_memory_source"] for r in summary["recipes"] if r.get("peak_memory_source")})
    if sources:
        lines.append(
            f"peak memory: {'; '.join(sources)} (mean over the seeds). s/epoch: train_runtime_s / epochs."
        )
    if summary["pairs"]:
        lines.append(
            f"Each pair of recipes, {summary['test']}, on {split} {summary['final_metric']} over the seeds:"
        )
        lines += pair_lines(summary)
    if summary["power_note"]:
        lines.append(summary["power_note"])
    return "\n".join(lines)


def write_chart(summary: dict[str, Any], output_dir: str | Path) -> Path:
    """Three panels: the metric against the learning rate (search), mean ± std per recipe at its chosen
    rate with every seed, and peak memory against the final metric."""
    # matplotlib is imported only when a chart is drawn (a heavy import); Agg: no display needed.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = recipe_colours()
    figure, (search, seeds, memory) = plt.subplots(1, 3, figsize=(15, 4.6), layout="constrained")
    recipes = summary["recipes"]
    _draw_search(search, recipes, summary, colours)
    _draw_seeds(seeds, recipes, summary, colours)
    _draw_memory(memory, recipes, summary, colours)
    figure.suptitle(f"Sweep {summary['sweep']}: each recipe at its own learning rate", fontsize=11)
    path = Path(output_dir) / CHART_FILE
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _draw_search(axis, recipes, summary, colours) -> None:
    for recipe in recipes:
        done = [t for t in recipe["search"] if t["status"] == "complete"]
        failed = [t for t in recipe["search"] if t["status"] == "failed"]
        colour = colours.get(recipe["recipe"], "black")
        axis.plot(
            [t["learning_rate"] for t in done],
            [t["validation"] for t in done],
            "o-",
            color=colour,
            label=recipe["recipe"],
        )
        if recipe["chosen_learning_rate"] is not None:
            axis.scatter(
                [recipe["chosen_learning_rate"]],
                [recipe["chosen_value"]],
                s=180,
                facecolors="none",
                edgecolors=colour,
            )
        for trial in failed:
            axis.axvline(trial["learning_rate"], color=colour, linestyle=":", alpha=0.7)
    axis.set_xscale("log")
    axis.set_xlabel("learning rate (dotted: failed trial; ring: chosen)")
    axis.set_ylabel(f"validation {summary['metric']} (seed {summary['search_seed']})")
    axis.set_title("Search", fontsize=10)
    axis.legend(fontsize=8, frameon=False)
    axis.grid(alpha=0.3)


def _draw_seeds(axis, recipes, summary, colours) -> None:
    split = summary["final_split"]
    chosen = [recipe for recipe in recipes if recipe.get(split) and recipe[split]["n"]]
    for position, recipe in enumerate(chosen):
        figures, colour = recipe[split], colours.get(recipe["recipe"], "black")
        axis.errorbar(
            [position],
            [figures["mean"]],
            yerr=[figures["std"] or 0],
            fmt="s",
            color=colour,
            capsize=8,
            markersize=9,
        )
        axis.scatter(
            [position + 0.12] * len(figures["values"]), figures["values"], color=colour, alpha=0.6, s=18
        )
    axis.set_xticks(
        range(len(chosen)), [f"{r['recipe']}\nlr {format_lr(r['chosen_learning_rate'])}" for r in chosen]
    )
    axis.set_xlim(-0.6, max(len(chosen), 1) - 0.4)
    axis.set_ylabel(f"{split} {summary['metric'].removeprefix('eval_')}: mean ± std, and each seed")
    axis.set_title(f"Chosen setting, seeds {', '.join(map(str, summary['seeds']))}", fontsize=10)
    axis.grid(axis="y", alpha=0.3)


def _draw_memory(axis, recipes, summary, colours) -> None:
    from matplotlib.ticker import MaxNLocator  # only when a chart is drawn, as in write_chart

    split = summary["final_split"]
    for recipe in recipes:
        figures = recipe.get(split)
        if not figures or not figures["n"] or recipe.get("peak_memory_gib") is None:
            continue
        colour = colours.get(recipe["recipe"], "black")
        axis.errorbar(
            [recipe["peak_memory_gib"]],
            [figures["mean"]],
            yerr=[figures["std"] or 0],
            fmt="o",
            color=colour,
            capsize=5,
        )
        axis.annotate(
            recipe["recipe"],
            (recipe["peak_memory_gib"], figures["mean"]),
            xytext=(6, 4),
            textcoords="offset points",
            fontsize=8,
        )
    axis.ticklabel_format(axis="x", useOffset=False)
    axis.xaxis.set_major_locator(MaxNLocator(5))
    axis.set_xlabel("peak memory, GiB (mean over the seeds)")
    axis.set_ylabel(f"{split} {summary['metric'].removeprefix('eval_')}")
    axis.set_title("Memory against the metric", fontsize=10)
    axis.grid(alpha=0.3)


def report(
    config: SweepConfig, storage, preflight: dict[str, dict[str, Any]], draw: bool = True
) -> dict[str, Any]:
    """Print the report, write sweep_results.json and the chart beside the trials; returns the summary."""
    summary = summarize(config, storage, preflight)
    print(format_report(summary))
    text = json.dumps(summary, indent=2, default=str) + "\n"
    print(f"results: {write_text_whole(Path(config.output_dir) / RESULTS_JSON, text)}")
    if draw:
        print(f"chart: {write_chart(summary, config.output_dir)}")
    return summary
