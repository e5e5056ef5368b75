"""The names a run logs to W&B (docs/wandb.md), defined once: wandb_run.py logs with them, the workbench's
dashboard.py shows them. A summary key is a results.json key; the Trainer's own curves are named by
WandbCallback's `rewrite_logs` ("loss" -> "train/loss"), which the dashboard applies too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The W&B job type of a recipe's run (the dashboard's COMPARE_JOB_TYPE: compare --wandb's run).
JOB_TYPE = "fine-tune"

# The x-axis of every curve: WandbCallback makes it the step metric of everything it logs, and
# ThroughputCallback logs it next to its own figures.
STEP = "train/global_step"


def eval_key(metric: str) -> str:
    """The Trainer's name of an evaluation metric ("eval_accuracy"), which results.json keeps."""
    return f"eval_{metric}"


# ThroughputCallback's curves (wandb_run.py).
SAMPLES_PER_SECOND_CURVE = "throughput/samples_per_second"
TOKENS_PER_SECOND_CURVE = "throughput/real_tokens_per_second"
PAD_RATIO_CURVE = "throughput/pad_ratio"
CUDA_MEMORY_CURVES = ("memory/allocated_gib", "memory/max_allocated_gib", "memory/reserved_gib")
CPU_MEMORY_CURVES = ("memory/peak_rss_gib",)

# --- results.json keys, which are the run summary's keys --------------------------------------------

RECIPE = "recipe"
MODEL = "model_name_or_path"
PRECISION = "precision"
ACCURACY = eval_key("accuracy")
MACRO_F1 = eval_key("f1")
PEAK_MEMORY = "peak_memory_gib"
PEAK_MEMORY_RESERVED = "peak_memory_reserved_gib"  # CUDA only: null on CPU
TRAINABLE_PARAMS = "params_trainable"
OPTIMIZER_STATE_BYTES = "optimizer_state_bytes"
SAMPLES_PER_SECOND = "train_samples_per_s"
TOKENS_PER_SECOND = "train_tokens_per_s"
# Added by the data/task work; logged as pictures once a run's results have them.
PER_CLASS = "per_class"  # {label: {"precision", "recall", "f1", "support"}}
CONFUSION_MATRIX = "confusion_matrix"  # {"labels": [...], "matrix": [[count, ...], ...]}, rows true
PER_CLASS_FIELDS = ("precision", "recall", "f1", "support")

# Every task's metrics (tasks.TASK_METRICS) as tables and logs title them.
METRIC_TITLES = {
    "accuracy": "accuracy",
    "f1": "macro-F1",
    "f1_micro": "micro-F1",
    "f1_positive": "positive-class F1",  # binary tasks: the F1 of label id 1
    "mse": "MSE",
    "pearson": "Pearson",
    "spearman": "Spearman",
}


# What tells recipes apart, in the order the runs table and the results tables show it.
COMPARISON_METRICS = (
    ACCURACY,
    MACRO_F1,
    PEAK_MEMORY,
    PEAK_MEMORY_RESERVED,
    TRAINABLE_PARAMS,
    OPTIMIZER_STATE_BYTES,
    SAMPLES_PER_SECOND,
    TOKENS_PER_SECOND,
)
# The columns of the one-row results table each run logs (and of the comparison table): who, then what.
RESULTS_COLUMNS = (RECIPE, MODEL, PRECISION, *COMPARISON_METRICS)

# --- pictures logged at the end of a run ----------------------------------------------------------


@dataclass(frozen=True)
class Chart:
    """A W&B custom chart: a table logged under `table_key`, drawn by one of W&B's preset Vega specs."""

    key: str
    vega_spec: str
    fields: dict[str, str] = field(hash=False)
    title: str

    @property
    def table_key(self) -> str:
        # Where wandb stores a chart's table (wandb.plot.custom_chart.CustomChartSpec.table_key).
        return f"{self.key}_table"


# The run's results.json as one table row (RESULTS_COLUMNS, then the memory breakdown in GiB):
# a table panel over several runs lists them one row each.
RESULTS_TABLE = "results/table"
MEMORY_BREAKDOWN_CHART = Chart(
    key="results/memory_breakdown",
    vega_spec="wandb/bar/v0",  # what wandb.plot.bar draws with
    fields={"label": "part", "value": "GiB"},
    title="Training memory by kind (peak of each), GiB",
)
CONFUSION_MATRIX_CHART = Chart(
    key="results/confusion_matrix",
    vega_spec="wandb/confusion_matrix/v1",  # what wandb.plot.confusion_matrix draws with
    fields={"Actual": "Actual", "Predicted": "Predicted", "nPredictions": "nPredictions"},
    title="Confusion matrix (rows: true label)",
)
PER_CLASS_TABLE = "results/per_class"

# A `recipes-lib sweep` trial adds these to its W&B config (docs/wandb.md): wandb_run.py reads them from the
# environment variable SWEEP_CONFIG_VARIABLE, which sweep/trials.py sets.
SWEEP_CONFIG_VARIABLE = "RECIPES_WANDB_CONFIG"
SWEEP = "sweep"
SWEEP_PHASE = "sweep_phase"
SWEEP_CHOSEN = "sweep_chosen"
SWEEP_CONFIG_KEYS = (SWEEP, SWEEP_PHASE, SWEEP_CHOSEN)


def breakdown_column(part: str) -> str:  # "weights_gib"
    return f"{part}_gib"
