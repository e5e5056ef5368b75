"""The model card of a finished run: README.md in its output_dir, from results.json alone (so `recipes-lib
push` makes the same card). docs/sharing.md ("The model card") says how it is made and read back; this
module only works out the values the template (templates/model_card.md) shows.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePath
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from recipes_lib.config.recipe_options import MERGED_SUBDIR
from recipes_lib.config.tasks import DEFAULT_THRESHOLD, MULTI_LABEL, REGRESSION, SINGLE_LABEL, TASK_METRICS
from recipes_lib.results import RunResults
from recipes_lib.tracking.card_usage import usage_values
from recipes_lib.tracking.names import METRIC_TITLES, PER_CLASS_FIELDS
from recipes_lib.whole_files import write_text_whole

CARD_FILE = "README.md"
CARD_TAG = "recipes-lib"  # marks a card this module wrote
TEMPLATE = ("templates", "model_card.md")  # package data of recipes_lib.tracking (setup.cfg)
# `recipes-lib export` (export/bundle.py, a layer above) keeps a passed export and its gate report here;
# tests/workbench/test_export.py checks the two agree. A failed export (export.failed/) is never on the card.
EXPORT_REPORT = ("export", "export_report.json")
# The Hub's metric ids (evaluate's names) for the metrics the runs report.
HUB_METRIC_TYPES = {"accuracy": "accuracy", "f1": "f1", "f1_micro": "f1", "f1_positive": "f1"}
HUB_METRIC_TYPES.update({"mse": "mse", "pearson": "pearsonr", "spearman": "spearmanr"})
TASK_WORDS = {
    SINGLE_LABEL: "single-label classification",
    MULTI_LABEL: "multi-label classification",
    REGRESSION: "regression",
}
# A Hub model id: "name" or "owner/name"; anything else (a local directory) is not linked.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
# A Hub dataset's own split name ("validation_matched"); "10% of train held out" is none.
_SPLIT_NAME = re.compile(r"^[\w.-]+$")


@dataclass(frozen=True)
class CardMetric:
    """One score of the card: its results.json key, the split it was measured on, and how it was decided."""

    key: str
    split: str
    metric: str  # the name in TASK_METRICS (or f1_positive)
    title: str
    args: dict[str, Any] | None = None  # the decision threshold(s), where they matter


@dataclass(frozen=True)
class BaseModel:
    """The model the run started from, as a card may name it: a Hub id, or only a local directory's name."""

    hub_id: str | None
    local_name: str | None  # the local directory's name (no path), when the run loaded one

    @property
    def loadable(self) -> str:
        """What the card's loading code passes to from_pretrained: the Hub id, else the directory's name."""
        return self.hub_id or self.local_name or "BASE_MODEL"


def _hub_id(name: str | None) -> str | None:
    """`name` if it reads as a Hub model id: not a local path (absolute, or existing here)."""
    if not name or PurePath(name).is_absolute() or re.match(r"^[A-Za-z]:[\\/]", name):
        return None
    if Path(name).exists() or not _HUB_ID.match(name):
        return None
    return name


def base_model(results: RunResults) -> BaseModel:
    """The model the run used (--model_name_or_path): a Hub id as given, or a local directory by its name
    only. Never the `_name_or_path` inside a local directory's config.json: that is where its files were
    first made (all-MiniLM-L6-v2's says nreimers/MiniLM-L6-H384-uncased), not what this run trained."""
    given = results.model_name_or_path
    if _hub_id(given):
        return BaseModel(given, None)
    return BaseModel(None, _file_name(given) or None)


def _file_name(value: str | None) -> str | None:
    """A file or directory by its name only, whichever system wrote the path (Windows' too)."""
    if not value:
        return value
    return re.split(r"[\\/]", str(value).rstrip("\\/"))[-1]


def _is_local_data(results: RunResults) -> bool:
    return bool((results.config or {}).get("train_file"))


def _split(results: RunResults, role: str) -> str:
    """The split a score comes from, as the model-index names it: 'validation' or 'test' for local files
    and held-out parts of train; a Hub dataset's own split name (validation_matched) where it has one."""
    source = results.eval_split if role == "validation" else results.test_split
    if _is_local_data(results) or not source or not _SPLIT_NAME.match(str(source)):
        return role
    return str(source)


def _scores(results: RunResults):
    """(results key, split, metric, note, decision args) of every score that may be there, as record.py scores them."""
    problem_type, names = results.problem_type, TASK_METRICS[results.problem_type]
    splits = {"eval": _split(results, "validation"), "test": _split(results, "test")}
    if problem_type == MULTI_LABEL:
        tuned, tuned_note = {"thresholds": results.label_thresholds}, " (tuned thresholds)"
        # A collapsed model keeps every threshold at 0.5 (none is tuned): its test split is scored there.
        if results.model_collapsed:
            tuned, tuned_note = {"threshold": DEFAULT_THRESHOLD}, ""
        for prefix, split, note, args in (
            ("eval", splits["eval"], "", {"threshold": DEFAULT_THRESHOLD}),
            ("eval_tuned", splits["eval"], tuned_note, tuned),
            ("test", splits["test"], tuned_note, tuned),
        ):
            for name in names:
                yield f"{prefix}_{name}", split, name, note, args
        return
    threshold = results.decision_threshold
    at_half = {"threshold": 0.5} if threshold is not None else None
    for prefix, split in splits.items():
        for name in names:
            yield f"{prefix}_{name}", split, name, "", at_half
        yield f"{prefix}_f1_positive", split, "f1_positive", "", at_half  # binary tasks
        if threshold is not None:
            note, at_threshold = f" (threshold {threshold:g})", {"threshold": threshold}
            for name in (*names, "f1_positive"):
                yield f"{prefix}_threshold_{name}", split, name, note, at_threshold


def _is_score(value) -> bool:
    """A number the model-index can hold: not null, not NaN (a correlation of constant predictions)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def card_metrics(results: RunResults) -> list[CardMetric]:
    """The scores of the run that describe the saved model, each with its split; those the run has (NaN left out)."""
    # A binary task's positive class: the one --decision_threshold names, else the second in id order (id 1).
    names = list(results.per_class or {})
    positive = results.positive_label or (names[1] if len(names) == 2 else None)
    titles = {**METRIC_TITLES, "f1_positive": f"F1 of '{positive}'"}
    return [
        CardMetric(key, split, metric, titles[metric] + note, args)
        for key, split, metric, note, args in _scores(results)
        if _is_score(results.value(key))
    ]


def _dataset(results: RunResults) -> tuple[str, str, str | None]:
    """(dataset type, dataset name, Hub config) for the model-index; the name is also the card text's."""
    config = results.config or {}
    if config.get("train_file"):
        return "local", _file_name(config["train_file"]), None
    name = config.get("dataset_name") or str(results.dataset or "unknown").split("/")[0]
    return name, str(results.dataset or name), config.get("dataset_config_name")


def card_data(results: RunResults, model_name: str) -> ModelCardData:
    dataset_type, dataset_name, dataset_config = _dataset(results)
    eval_results = [
        EvalResult(
            task_type="text-classification",
            task_name=TASK_WORDS[results.problem_type],
            dataset_type=dataset_type,
            dataset_name=dataset_name,
            dataset_config=dataset_config,
            dataset_split=metric.split,
            metric_type=HUB_METRIC_TYPES[metric.metric],
            metric_name=metric.title,
            metric_value=results.value(metric.key),
            metric_args=metric.args,
        )
        for metric in card_metrics(results)
    ]
    return ModelCardData(
        model_name=model_name,
        base_model=base_model(results).hub_id,
        library_name="transformers" if results.lora_target_modules is None else "peft",
        pipeline_tag="text-classification",
        tags=[CARD_TAG, results.recipe, results.problem_type.replace("_", "-")],
        datasets=[dataset_type] if dataset_type != "local" else None,
        metrics=sorted({HUB_METRIC_TYPES[name] for name in TASK_METRICS[results.problem_type]}),
        eval_results=eval_results or None,
    )


def build_card(
    results: RunResults,
    repo_id: str | None = None,
    export: dict[str, Any] | None = None,
    summary: str | None = None,
) -> ModelCard:
    """The run's card: `repo_id` names the model in the loading code (default: the output_dir's name);
    `export`: the ONNX export section's values (card_export.export_values)."""
    model_name = (repo_id or _file_name(str(results.output_dir or ".")) or "model").split("/")[-1]
    model_name = model_name if model_name != "." else "model"
    with resources.as_file(resources.files("recipes_lib.tracking").joinpath(*TEMPLATE)) as template:
        return ModelCard.from_template(
            card_data(results, model_name),
            template_path=str(template),
            **_template_values(results, model_name, repo_id, summary),
            export=export,
        )


def write_card(
    output_dir: str | Path, results: RunResults, repo_id: str | None = None, summary: str | None = None
) -> Path:
    """README.md in output_dir (replacing the one peft writes beside an adapter), checked as it is read back."""
    report = Path(output_dir).joinpath(*EXPORT_REPORT)
    export = None
    if report.is_file():  # the export section's code loads only then
        from recipes_lib.tracking.card_export import export_values

        export = export_values(report)
    path = Path(output_dir) / CARD_FILE
    # newline="": as ModelCard.save writes
    write_text_whole(path, str(build_card(results, repo_id, export, summary)), newline="")
    check_card(path, results)
    return path


def check_card(path: str | Path, results: RunResults) -> ModelCard:
    """The card read back with `ModelCard.load`: its metadata parses, and its scores are results.json's."""
    card = ModelCard.load(path)
    data = card.data
    expected = [(m.split, m.title, results.value(m.key)) for m in card_metrics(results)]
    found = [(r.dataset_split, r.metric_name, r.metric_value) for r in data.eval_results or []]
    problems = []
    if CARD_TAG not in (data.tags or []):
        problems.append(f"no '{CARD_TAG}' tag")
    if found != expected:
        problems.append(f"model-index scores {found} are not results.json's {expected}")
    if data.eval_results and not data.model_name:
        problems.append("a model-index needs model_name")
    if problems:
        raise ValueError(f"The model card {path} does not describe its run: {'; '.join(problems)}.")
    return card


# --- what the template shows -------------------------------------------------------------------------


def _template_values(
    results: RunResults, model_name: str, repo_id: str | None, summary: str | None
) -> dict[str, Any]:
    """Each value already worded (the template shows the record's own fields as `results.*`)."""
    problem_type = results.problem_type
    positive = results.positive_label
    on_hub = repo_id is not None
    # The saved model in the loading code: the Hub repository, or this folder by its name (the card
    # sits in it; a local path would publish the machine's layout once the card is pushed).
    where = repo_id or model_name
    quantized_base, quantization = _quantized_base(results)
    return {
        "results": results,
        "title": model_name,
        "base": base_model(results),
        "recipe_summary": summary or None,
        "task_words": TASK_WORDS[problem_type],
        "is_regression": problem_type == REGRESSION,
        "dataset": _dataset(results)[1],
        "label_names": list(results.per_class or {}),
        "per_label_rows": _per_label_rows(results),
        "threshold_source": (
            f"tuned on `{_file_name(results.decision_threshold_tuned_on)}` for the best F1 of that class"
            if results.decision_threshold_tuned_on
            else "given"
        ),
        "negative_label": next((name for name in results.per_class or {} if name != positive), "the other"),
        "data_rows": _data_rows(results),
        "training_rows": _training_rows(results),
        "score_rows": _score_rows(results),
        "optimistic": bool(results.label_thresholds or results.decision_threshold_tuned_on),
        "processes": _processes(results),
        "is_adapter": results.lora_target_modules is not None,
        "where": where,
        "on_hub": on_hub,
        "usage": usage_values(results, where),
        "quantization": quantization,
        "quantized_base": quantized_base,
        "merged_dir": MERGED_SUBDIR,
        "merged_where": where if on_hub else f"{where}/{MERGED_SUBDIR}",
        "versions": ", ".join(
            f"{name} {version}" for name, version in (results.versions or {}).items() if version
        ),
    }


def _per_label_rows(results: RunResults) -> list[tuple]:
    if results.problem_type != MULTI_LABEL:
        return []
    return [
        (name, *(scores[field] for field in PER_CLASS_FIELDS))
        for name, scores in (results.per_class or {}).items()
        if all(field in scores for field in PER_CLASS_FIELDS)
    ]


def _split_shown(results: RunResults, role: str) -> str | None:
    """'validation (`dev.tsv`)': the split and where its rows came from, by file name only."""
    source = results.eval_split if role == "validation" else results.test_split
    if not source:
        return None
    source = _file_name(source) if _is_local_data(results) else source
    split = _split(results, role)
    return split if source == split else f"{split} (`{source}`)"


def _processes(results: RunResults) -> str:
    processes = results.num_processes or 1
    return f"{processes} {'process' if processes == 1 else 'processes'}"


def _data_rows(results: RunResults) -> list[str]:
    rows = [
        f"Training: `{_dataset(results)[1]}`, {results.train_samples} examples",
        f"Validation: {_split_shown(results, 'validation')}, {results.eval_samples} examples",
    ]
    if results.test_split:
        rows.append(f"Test: {_split_shown(results, 'test')}")
    if results.text_columns:
        rows.append(f"Text: {' + '.join(f'`{c}`' for c in results.text_columns)}")
    return rows


def _long_text(config: dict[str, Any]) -> str | None:
    mode = config.get("long_text")
    if mode != "sliding_window":
        return mode
    windows = config.get("max_windows_per_document")
    trained_on = f", training on at most {windows} windows a document" if windows else ""
    return (
        f"sliding_window (stride {config.get('stride')}, a document's windows pooled by "
        f"{config.get('window_pooling')}{trained_on})"
    )


def _training_rows(results: RunResults) -> list[tuple[str, str]]:
    config = results.config or {}
    processes = results.num_processes or 1
    per_device = config.get("per_device_train_batch_size")
    accumulation = config.get("gradient_accumulation_steps") or 1
    batch = lora = parameters = None
    if per_device:
        effective = per_device * accumulation * processes
        batch = f"{per_device} per device x {accumulation} accumulation x {_processes(results)} = {effective}"
    if "lora_r" in config:
        lora = f"{config['lora_r']} / {config.get('lora_alpha')} / {config.get('lora_dropout')}"
    if results.params_total:
        parameters = f"{results.params_trainable:,} trained of {results.params_total:,}"
    rows = [
        ("learning rate", config.get("learning_rate")),
        ("epochs", results.epochs),
        ("optimizer steps", results.train_steps),
        ("batch", batch),
        ("max_seq_length", config.get("max_seq_length")),
        ("long texts", _long_text(config)),
        ("warmup", config.get("warmup_steps")),
        ("weight decay", config.get("weight_decay")),
        ("scheduler", config.get("lr_scheduler_type")),
        ("seed", config.get("seed")),
        ("class weights", results.class_weights),
        ("LoRA r / alpha / dropout", lora),
        ("LoRA on", results.lora_target_modules),
        ("trained in full", results.modules_trained_in_full),
        ("parameters", parameters),
        ("final training loss", results.train_loss),
    ]
    return [(name, _shown(value)) for name, value in rows if value is not None]


def _shown(value) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(f"`{item}`" for item in value)
    if isinstance(value, dict):
        return ", ".join(f"`{key}` {_shown(item)}" for key, item in value.items())
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _score_rows(results: RunResults) -> list[tuple[str, str, float]]:
    rows = [(m.split, m.title, results.value(m.key)) for m in card_metrics(results)]
    rows += [
        (
            _split(results, "validation"),
            f"{METRIC_TITLES[name]}, merged model",
            results.value(f"merged_eval_{name}"),
        )
        for name in TASK_METRICS[results.problem_type]
        if _is_score(results.value(f"merged_eval_{name}"))
    ]
    return rows


def _quantized_base(results: RunResults) -> tuple[str, str] | tuple[None, None]:
    """The adapter's quantized base (QLoRA) in words, and the BitsAndBytesConfig line that loads it as the
    run quantized it; (None, None) when the base ran unquantized."""
    if results.quantized_base_bits == 8:
        return (
            "8-bit LLM.int8",
            "quantization = BitsAndBytesConfig(load_in_8bit=True)  # the 8-bit LLM.int8 base",
        )
    if results.quantized_compute_dtype is None:
        return None, None
    # results.json names precisions as the run does (fp32, bf16, fp16); the code needs torch's dtype names.
    named = results.quantized_compute_dtype or "float32"
    dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(named, named)
    return "4-bit NF4", (
        "quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', "
        f"bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.{dtype})"
    )
