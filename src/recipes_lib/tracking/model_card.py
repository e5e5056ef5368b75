"""The model card of a finished run: README.md in its output_dir, from results.json alone.

The metadata is huggingface_hub's `ModelCardData`, with the scores as `EvalResult`s, which the Hub
reads as the card's model-index (each with its split's name); the text says what a reader needs to
use the model: base model, recipe, task and labels, data, the training arguments that matter, the
scores, measured peak memory and precision, how to load it, and for LoRA and QLoRA which files are
the adapter and which the merged model.

Built from results.json (not from the live run) so that `recipes-lib push` makes the same card
from a finished output_dir, with the repository's name in the loading code. `check_card` reads a
card back with `ModelCard.load` and checks it offline: the Hub's own validation needs the network.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from recipes_lib.config.recipe_options import MERGED_SUBDIR
from recipes_lib.config.registry import RECIPES
from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION, SINGLE_LABEL, TASK_METRICS
from recipes_lib.tracking.names import METRIC_TITLES

CARD_FILE = "README.md"
CARD_TAG = "recipes-lib"  # marks a card this module wrote
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


@dataclass(frozen=True)
class CardMetric:
    """One score of the card: its results.json key, the split it was measured on, and how it was decided."""

    key: str
    split: str
    metric: str  # the name in TASK_METRICS (or f1_positive)
    title: str
    args: dict[str, Any] | None = None  # the decision threshold(s), where they matter


def _is_adapter(results: dict[str, Any]) -> bool:
    """Whether the run saved a LoRA adapter (with the head) rather than a whole model."""
    return results.get("lora_target_modules") is not None


def _is_quantized(results: dict[str, Any]) -> bool:
    """Whether the adapter's base ran quantized (QLoRA): its 4-bit matmuls' compute dtype was recorded,
    or it ran on an 8-bit base (--base_bits 8)."""
    return results.get("quantized_compute_dtype") is not None or results.get("quantized_base_bits") == 8


def _hub_id(name: str | None) -> str | None:
    if not name or Path(name).exists() or not _HUB_ID.match(name):
        return None
    return name


def _scores(results: dict[str, Any]):
    """(results key, split, metric, note, decision args) of every score that may be there, in order.

    Multi-label: validation at 0.5 and at the tuned thresholds, test at the tuned ones (as record.py
    scores them). Binary with --decision_threshold: both splits at 0.5 and at the threshold, with the
    positive class's own F1.
    """
    problem_type, names = results["problem_type"], TASK_METRICS[results["problem_type"]]
    splits = {"eval": results.get("eval_split") or "validation", "test": results.get("test_split") or "test"}
    if problem_type == MULTI_LABEL:
        at_half, tuned = {"threshold": 0.5}, {"thresholds": results.get("label_thresholds")}
        for name in names:
            yield f"eval_{name}", splits["eval"], name, "", at_half
        for name in names:
            yield f"eval_tuned_{name}", splits["eval"], name, " (tuned thresholds)", tuned
        for name in names:
            yield f"test_{name}", splits["test"], name, " (tuned thresholds)", tuned
        return
    threshold = results.get("decision_threshold")
    at_half = {"threshold": 0.5} if threshold is not None else None
    for prefix, split in splits.items():
        for name in names:
            yield f"{prefix}_{name}", split, name, "", at_half
        if threshold is not None:
            yield f"{prefix}_f1_positive", split, "f1_positive", "", at_half
            for name in (*names, "f1_positive"):
                yield (
                    f"{prefix}_threshold_{name}",
                    split,
                    name,
                    f" (threshold {threshold:g})",
                    {"threshold": threshold},
                )


def _is_score(value) -> bool:
    """A number the model-index can hold: not null, not NaN (a correlation of constant predictions)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def card_metrics(results: dict[str, Any]) -> list[CardMetric]:
    """The scores of the run that describe the saved model, each with its split; those the run has (NaN left out)."""
    positive = results.get("positive_label")
    return [
        CardMetric(
            key,
            split,
            metric,
            (f"F1 of '{positive}'" if metric == "f1_positive" else METRIC_TITLES[metric]) + note,
            args,
        )
        for key, split, metric, note, args in _scores(results)
        if _is_score(results.get(key))
    ]


def _dataset(results: dict[str, Any]) -> tuple[str, str, str | None]:
    """(dataset type, dataset name, Hub config) for the model-index: a Hub dataset, or the local files."""
    config = results.get("config", {})
    if config.get("train_file"):
        return "local", Path(config["train_file"]).name, None
    name = config.get("dataset_name") or str(results.get("dataset", "unknown")).split("/")[0]
    return name, str(results.get("dataset", name)), config.get("dataset_config_name")


def card_data(results: dict[str, Any], model_name: str) -> ModelCardData:
    """The card's metadata: base model, library, task, tags, data and the scores as a model-index."""
    dataset_type, dataset_name, dataset_config = _dataset(results)
    eval_results = [
        EvalResult(
            task_type="text-classification",
            task_name=TASK_WORDS[results["problem_type"]],
            dataset_type=dataset_type,
            dataset_name=dataset_name,
            dataset_config=dataset_config,
            dataset_split=metric.split,
            metric_type=HUB_METRIC_TYPES[metric.metric],
            metric_name=metric.title,
            metric_value=results[metric.key],
            metric_args=metric.args,
        )
        for metric in card_metrics(results)
    ]
    recipe = results["recipe"]
    return ModelCardData(
        model_name=model_name,
        base_model=_hub_id(results.get("model_name_or_path")),
        library_name="peft" if _is_adapter(results) else "transformers",
        pipeline_tag="text-classification",
        tags=[CARD_TAG, recipe, results["problem_type"].replace("_", "-")],
        datasets=[dataset_type] if dataset_type != "local" else None,
        metrics=sorted({HUB_METRIC_TYPES[name] for name in TASK_METRICS[results["problem_type"]]}),
        eval_results=eval_results or None,
    )


def build_card(results: dict[str, Any], repo_id: str | None = None) -> ModelCard:
    """The run's card: `repo_id` names the model in the loading code (default: the run's output_dir)."""
    where = repo_id or str(results.get("output_dir", "."))
    model_name = (repo_id or Path(where).name or "model").split("/")[-1]
    sections = [
        _summary(results, model_name),
        _task_section(results),
        _data_section(results),
        _training_section(results),
        _results_section(results),
        _memory_section(results),
        _usage_section(results, where, repo_id is not None),
        _files_section(results),
        _versions_section(results),
    ]
    text = "\n\n".join(section.strip() for section in sections if section) + "\n"
    data = card_data(results, model_name)
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{text}")


def write_card(output_dir: str | Path, results: dict[str, Any], repo_id: str | None = None) -> Path:
    """README.md in output_dir (replacing the one peft writes beside an adapter), checked as it is read back."""
    path = Path(output_dir) / CARD_FILE
    build_card(results, repo_id).save(path)
    check_card(path, results)
    return path


def check_card(path: str | Path, results: dict[str, Any]) -> ModelCard:
    """The card read back with `ModelCard.load`: its metadata parses, and its scores are results.json's."""
    card = ModelCard.load(path)
    data = card.data
    expected = [(m.split, m.title, results[m.key]) for m in card_metrics(results)]
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


# --- the text, one section each ----------------------------------------------------------------------


def _summary(results: dict[str, Any], model_name: str) -> str:
    base = results.get("model_name_or_path")
    linked = f"[{base}](https://huggingface.co/{base})" if _hub_id(base) else f"`{base}`"
    spec = RECIPES.get(results["recipe"])
    how = f": {spec.summary}" if spec is not None and spec.summary else ""
    return (
        f"# {model_name}\n\n{linked} fine-tuned for {TASK_WORDS[results['problem_type']]} on "
        f"`{results.get('dataset')}` with the `{results['recipe']}` recipe of recipes-lib{how}."
    )


def _task_section(results: dict[str, Any]) -> str:
    problem_type = results["problem_type"]
    lines = ["## Task and labels", "", f"- Task: {TASK_WORDS[problem_type]} (`{problem_type}`)"]
    per_class = results.get("per_class") or {}
    if problem_type == REGRESSION:
        lines.append("- Output: one score (the model's single logit, not squashed)")
    elif per_class:
        lines.append(f"- Labels, in id order: {', '.join(f'`{name}`' for name in per_class)}")
    if results.get("label_thresholds"):
        pairs = ", ".join(f"`{name}` {value:g}" for name, value in results["label_thresholds"].items())
        lines.append(
            f"- A class is predicted when its sigmoid probability reaches its threshold: {pairs} "
            "(tuned on the validation split, saved as `label_thresholds.json`)"
        )
    if results.get("decision_threshold") is not None:
        tuned_on = results.get("decision_threshold_tuned_on")
        source = f"tuned on `{tuned_on}` for the best F1 of that class" if tuned_on else "given"
        lines.append(
            f"- `{results['positive_label']}` is predicted when its probability reaches "
            f"{results['decision_threshold']:g} ({source}; saved as `decision_threshold.json`), "
            "not at 0.5"
        )
    return "\n".join(lines)


def _data_section(results: dict[str, Any]) -> str:
    lines = [
        "## Data",
        "",
        f"- Training: `{results.get('dataset')}`, {results.get('train_samples')} examples",
        f"- Validation: `{results.get('eval_split')}`, {results.get('eval_samples')} examples",
    ]
    if results.get("test_split"):
        lines.append(f"- Test: `{results['test_split']}`")
    if results.get("text_columns"):
        lines.append(f"- Text: {' + '.join(f'`{c}`' for c in results['text_columns'])}")
    return "\n".join(lines)


def _training_section(results: dict[str, Any]) -> str:
    config = results.get("config", {})
    processes = results.get("num_processes") or 1
    per_device = config.get("per_device_train_batch_size")
    accumulation = config.get("gradient_accumulation_steps") or 1
    batch = lora = parameters = None
    if per_device:
        noun = "process" if processes == 1 else "processes"
        effective = per_device * accumulation * processes
        batch = f"{per_device} per device x {accumulation} accumulation x {processes} {noun} = {effective}"
    if "lora_r" in config:
        lora = f"{config['lora_r']} / {config.get('lora_alpha')} / {config.get('lora_dropout')}"
    if results.get("params_total"):
        parameters = f"{results['params_trainable']:,} trained of {results['params_total']:,}"
    rows = [
        ("learning rate", config.get("learning_rate")),
        ("epochs", results.get("epochs")),
        ("optimizer steps", results.get("train_steps")),
        ("batch", batch),
        ("max_seq_length", config.get("max_seq_length")),
        ("warmup", config.get("warmup_steps")),
        ("weight decay", config.get("weight_decay")),
        ("scheduler", config.get("lr_scheduler_type")),
        ("seed", config.get("seed")),
        ("class weights", results.get("class_weights")),
        ("LoRA r / alpha / dropout", lora),
        ("LoRA on", results.get("lora_target_modules")),
        ("trained in full", results.get("modules_trained_in_full")),
        ("parameters", parameters),
        ("final training loss", results.get("train_loss")),
    ]
    table = "\n".join(f"| {name} | {_shown(value)} |" for name, value in rows if value is not None)
    return f"## Training\n\n| setting | value |\n|---|---|\n{table}"


def _shown(value) -> str:
    """A table cell: lists and mappings as words, long floats rounded."""
    if isinstance(value, (list, tuple)):
        return ", ".join(f"`{item}`" for item in value)
    if isinstance(value, dict):
        return ", ".join(f"`{key}` {_shown(item)}" for key, item in value.items())
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _results_section(results: dict[str, Any]) -> str:
    rows = [f"| {m.split} | {m.title} | {results[m.key]:.4f} |" for m in card_metrics(results)]
    merged = [
        f"| {results.get('eval_split')} | {METRIC_TITLES[name]}, merged model | {results[f'merged_eval_{name}']:.4f} |"
        for name in TASK_METRICS[results["problem_type"]]
        if _is_score(results.get(f"merged_eval_{name}"))
    ]
    notes = []
    if results.get("label_thresholds") or results.get("decision_threshold_tuned_on"):
        notes.append(
            "\n\nScores on the validation split at thresholds tuned on it are optimistic; the test "
            "split's are not."
        )
    return (
        "## Results\n\n| split | metric | value |\n|---|---|---|\n"
        + "\n".join(rows + merged)
        + "".join(notes)
    )


def _memory_section(results: dict[str, Any]) -> str:
    lines = ["## Memory and precision", ""]
    if results.get("peak_memory_gib") is not None:
        lines.append(
            f"- Peak memory: {results['peak_memory_gib']:.2f} GiB ({results.get('peak_memory_source')})"
        )
    if results.get("peak_memory_reserved_gib") is not None:
        lines.append(f"- Peak reserved by the CUDA allocator: {results['peak_memory_reserved_gib']:.2f} GiB")
    processes = results.get("num_processes") or 1
    lines.append(
        f"- Device: {results.get('device')}, {processes} {'process' if processes == 1 else 'processes'}"
    )
    lines.append(f"- Precision: {results.get('precision')} ({results.get('precision_reason')})")
    if results.get("quantized_compute_dtype"):
        lines.append(f"- 4-bit layers computed in {results['quantized_compute_dtype']}")
    return "\n".join(lines)


def _usage_section(results: dict[str, Any], where: str, on_hub: bool) -> str:
    """How to load it: the pipeline or AutoModel for a full model, peft for an adapter, and the merged one."""
    problem_type = results["problem_type"]
    function = {SINGLE_LABEL: "softmax", MULTI_LABEL: "sigmoid", REGRESSION: "none"}[problem_type]
    parts = ["## How to use"]
    if not _is_adapter(results):
        parts.append(_pipeline_code(where, function, results))
    else:
        parts.append(_adapter_code(where, results))
        if results.get("merged_model"):
            subfolder = f', subfolder="{MERGED_SUBDIR}"' if on_hub else ""
            path = where if on_hub else f"{where}/{MERGED_SUBDIR}"
            parts.append(
                f"The merged model, in `{MERGED_SUBDIR}/`, loads without peft. It is {results['merged_model']}.\n\n```python\n"
                "from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline\n\n"
                f'model = AutoModelForSequenceClassification.from_pretrained("{path}"{subfolder})\n'
                f'tokenizer = AutoTokenizer.from_pretrained("{path}"{subfolder})\n'
                f'classifier = pipeline("text-classification", model=model, tokenizer=tokenizer, '
                f'function_to_apply="{function}", top_k=None)\n```'
            )
    if results.get("decision_threshold") is not None:
        positive, threshold = results["positive_label"], results["decision_threshold"]
        negative = next((name for name in results.get("per_class") or {} if name != positive), "the other")
        parts.append(
            f"Decide as the run did, at its threshold:\n\n```python\n"
            "scores = {row['label']: row['score'] for row in classifier([text])[0]}\n"
            f'label = "{positive}" if scores["{positive}"] >= {threshold:g} else "{negative}"\n```'
        )
    parts.append(
        "From a checkout of the recipes, `recipes-lib predict OUTPUT_DIR --input texts.csv` predicts with the "
        "saved model exactly as the run evaluated it (tokenization, thresholds, precision)."
    )
    return "\n\n".join(parts)


def _pipeline_code(where: str, function: str, results: dict[str, Any]) -> str:
    return (
        "```python\nfrom transformers import pipeline\n\n"
        f'classifier = pipeline("text-classification", model="{where}", function_to_apply="{function}", top_k=None)\n'
        'classifier(["an example text"])  # per text, each label with its score\n```\n\n'
        "Or the model itself: `AutoModelForSequenceClassification.from_pretrained(...)` and "
        "`AutoTokenizer.from_pretrained(...)` on the same name."
    )


def _adapter_code(where: str, results: dict[str, Any]) -> str:
    base = results.get("model_name_or_path")
    quantized = _is_quantized(results)
    lines = [
        "```python",
        "from peft import PeftModel",
        "from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer"
        + (", BitsAndBytesConfig" if quantized else ""),
        "",
        f'config = AutoConfig.from_pretrained("{where}")  # the label names, saved beside the adapter',
    ]
    extra = ""
    if quantized and results.get("quantized_base_bits") == 8:
        lines += ["", "quantization = BitsAndBytesConfig(load_in_8bit=True)  # the 8-bit LLM.int8 base"]
        extra = ", quantization_config=quantization"
    elif quantized:
        dtype = results.get("quantized_compute_dtype") or "float32"
        lines += [
            "import torch",
            "",
            "quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', "
            f"bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.{dtype})",
        ]
        extra = ", quantization_config=quantization"
    lines += [
        f'base = AutoModelForSequenceClassification.from_pretrained("{base}", config=config{extra})',
        f'model = PeftModel.from_pretrained(base, "{where}")  # the adapter and the trained head',
        f'tokenizer = AutoTokenizer.from_pretrained("{where}")',
        "```",
    ]
    return "\n".join(lines)


def _files_section(results: dict[str, Any]) -> str:
    if not _is_adapter(results):
        return (
            "## Files\n\n`model.safetensors`, `config.json` (with the label names) and the tokenizer: a complete "
            "model. `results.json` holds every figure of the run; `eval_predictions.jsonl` its validation predictions."
        )
    bits = "8-bit LLM.int8" if results.get("quantized_base_bits") == 8 else "4-bit NF4"
    base = f"its {bits} base (`base_quantization_config.json`)" if _is_quantized(results) else "its base"
    lines = [
        "## Files",
        "",
        f"- The adapter: `adapter_model.safetensors` and `adapter_config.json` at the top level, with the trained "
        f"head inside; it needs {base} `{results.get('model_name_or_path')}`.",
    ]
    if results.get("merged_model"):
        lines.append(f"- The merged model: `{MERGED_SUBDIR}/`, a plain model with no peft dependency.")
    else:
        lines.append("- No merged model: the run did not ask for one (`--merge_adapter`).")
    lines.append(
        "- `results.json`: every figure of the run; `eval_predictions.jsonl`: its validation predictions."
    )
    return "\n".join(lines)


def _versions_section(results: dict[str, Any]) -> str:
    versions = results.get("versions") or {}
    listed = ", ".join(f"{name} {version}" for name, version in versions.items() if version)
    return f"## Versions\n\n{listed}\n\nCreated {results.get('created_at')}." if listed else ""
