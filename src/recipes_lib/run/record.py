"""What a finished run writes: predictions, results.json and the model card, from values.

`finish_run(trainer, train_result, eval_metrics, settings)` reads the Trainer only through what
every `transformers.Trainer` has (`state`, `args`, `predict`, `log_metrics`, `compute_metrics`:
the run's, which saw the final validation pass); the rest comes as values in `RunSettings`, which
`RecipeRun.write_results` fills at the end of the run. In order: the final validation predictions;
multi-label thresholds or --decision_threshold, per-class scores, the test split; --merge_adapter's
model scored in memory; then, on the main process, the prediction files, results.json (written
atomically) and the model card (tracking/model_card.py) from its contents.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from recipes_lib.config.arguments import TUNE, ParsedArguments
from recipes_lib.config.precision import autocast_for
from recipes_lib.config.recipe_options import MERGED_SUBDIR
from recipes_lib.config.recipe_spec import TrainingShape
from recipes_lib.config.tasks import DEFAULT_THRESHOLD, MULTI_LABEL, REGRESSION, TASK_METRICS
from recipes_lib.data.files import write_jsonl
from recipes_lib.data.loading import ClassificationData
from recipes_lib.data.long_text import document_ids
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.evaluation.inference import batch_logits
from recipes_lib.evaluation.neglected import neglected_classes, results_neglect_note
from recipes_lib.evaluation.predictions import (
    CONFUSION_MATRIX_PNG,
    EVAL_PREDICTIONS_FILE,
    TEST_PREDICTIONS_FILE,
    draw_confusion_matrix,
    per_class_report,
    prediction_rows,
    write_decision_threshold,
    write_thresholds,
)
from recipes_lib.evaluation.thresholds import (
    POSITIVE_ID,
    predicted_labels,
    sigmoid,
    tune_decision_threshold,
    tune_thresholds,
)
from recipes_lib.evaluation.training_loss import high_loss_note, train_loss_check
from recipes_lib.modeling.loading import count_parameters
from recipes_lib.modeling.optimizers import optimizer_state_summary
from recipes_lib.results import describe_device, library_versions, timestamp, write_results
from recipes_lib.run.metrics import RunMetrics
from recipes_lib.tracking.model_card import build_card, write_card
from recipes_lib.tracking.names import METRIC_TITLES, eval_key
from recipes_lib.training.trainer import evaluation_in_input_order

if TYPE_CHECKING:
    from recipes_lib.modeling.adapters import MergedModel  # a LoRA recipe's: loaded by it, not here

logger = logging.getLogger("recipes_lib")


@dataclass(frozen=True)
class RunSettings:
    """What the record needs of a run besides the Trainer, as values (`RecipeRun.write_results` fills it)."""

    recipe: str
    arguments: ParsedArguments  # what ran: the task, attention kernel and precision resolved
    data: ClassificationData  # labels, split sources, the tokenized splits, truncation
    model_type: str
    shape: TrainingShape  # the adapters (resolved for the family), the quantized base's bits
    precision: str  # the precision the layers computed in, observed
    precision_reason: str
    quantized_compute: str | None  # QLoRA: the dtype of the 4-bit layers' matmuls
    memory: dict[str, Any]  # the memory phases and peaks
    tokens: tuple[int, int]  # real and padded training tokens, over every process
    batch_choice: Any = None  # --auto_batch_size: what the planner chose
    merged: MergedModel | None = None  # --merge_adapter, on the main process


@dataclass
class EvaluationOutputs:
    """The final evaluation's predictions, and what is derived from them."""

    logits: Any
    references: Any
    thresholds: list[float] | None = None  # multi-label: tuned on validation
    tuned_metrics: dict[str, float] = field(default_factory=dict)  # eval_tuned_*: validation at those
    report: dict[str, Any] = field(default_factory=dict)  # per-class scores, confusion matrix
    test_logits: Any = None
    test_references: Any = None  # None for an unlabelled test split
    test_metrics: dict[str, float] = field(default_factory=dict)
    # Binary, --decision_threshold: the positive class's threshold, and the metrics at 0.5 and at it.
    decision_threshold: float | None = None
    threshold_results: dict[str, Any] = field(default_factory=dict)


def _listed(value):
    """A tuple as the list JSON writes (results.json and the returned results agree); a string as is."""
    return list(value) if isinstance(value, tuple) else value


def _step_of(checkpoint: str | None) -> int | None:
    return int(checkpoint.rsplit("-", 1)[-1]) if checkpoint else None


def per_class(logits, references, labels, thresholds) -> dict[str, Any]:
    """Per-class precision, recall, F1 and the confusion matrix (single-label); none for regression."""
    if labels.problem_type == REGRESSION:
        return {"per_class": None, "confusion_matrix": None}
    if labels.problem_type == MULTI_LABEL:
        predictions = predicted_labels(sigmoid(logits), thresholds)
        return per_class_report(predictions, references.round().astype(int), labels.names)
    return per_class_report(logits.argmax(-1), references, labels.names)


def evaluates_in_input_order(trainer) -> bool:
    """Whether the Trainer's evaluation batches follow the validation rows' order.

    RecipeTrainer's do (it says so). The stock Trainer's do, except under
    train_sampling_strategy group_by_length, where it groups evaluation batches by length too.
    """
    return getattr(trainer, "evaluates_in_input_order", False) or (
        trainer.args.train_sampling_strategy != "group_by_length"
    )


def final_validation(settings: RunSettings, trainer, eval_metrics: dict[str, Any]):
    """The final validation pass's predictions (window rows under sliding_window), in the rows' order,
    and its metrics.

    They are the last the run's compute_metrics saw: the script's `run.final_metrics(trainer)`, each
    validation example once, gathered from every process. A Trainer that evaluated in another order
    predicts the split once more in input order (its metrics, computed per document in that order,
    replace the script's: under sliding_window only they can differ).
    """
    validation = settings.data.tokenized["validation"]
    seen = getattr(trainer.compute_metrics, "last_predictions", None)
    if seen is None or len(seen.logits) != len(validation):
        raise RuntimeError(
            "The run's compute_metrics has not seen the final validation pass. Hand the Trainer "
            "compute_metrics=run.compute_metrics and call run.final_metrics(trainer) before run.write_results()."
        )
    if evaluates_in_input_order(trainer):
        return seen, eval_metrics
    with evaluation_in_input_order(trainer.args):
        output = trainer.predict(validation, metric_key_prefix="eval")
    return trainer.compute_metrics.last_predictions, {**eval_metrics, **output.metrics}


def evaluation_outputs(settings: RunSettings, trainer, evaluation) -> EvaluationOutputs:
    """Thresholds (multi-label), per-class scores and the test split, from the final validation pass."""
    data, scorer = settings.data, trainer.compute_metrics  # the run's RunMetrics
    labels = data.labels
    # Under --long_text sliding_window, one prediction per document: its windows combined.
    outputs = EvaluationOutputs(*scorer.per_document(evaluation.logits, evaluation.references))
    if labels.problem_type == MULTI_LABEL:
        outputs.thresholds = tune_thresholds(sigmoid(outputs.logits), outputs.references)
        scorer.thresholds = outputs.thresholds
        tuned = scorer.scores(outputs.logits, outputs.references)
        outputs.tuned_metrics = {f"eval_tuned_{name}": value for name, value in tuned.items()}
        logger.info(
            "Thresholds tuned on validation: %s", dict(zip(labels.names, outputs.thresholds, strict=True))
        )
    outputs.report = per_class(outputs.logits, outputs.references, labels, outputs.thresholds)
    if "test" in data.tokenized:
        # In the rows' order with any Trainer: the prediction file and the windows' documents follow it.
        test_split = data.tokenized["test"]
        with scorer.scoring(document_ids(test_split)) as metrics, evaluation_in_input_order(trainer.args):
            test = trainer.predict(test_split, metric_key_prefix="test")
            logits = test.predictions[0] if isinstance(test.predictions, tuple) else test.predictions
            outputs.test_logits, test_references = metrics.per_document(logits, test.label_ids)
        if data.test_has_labels:
            outputs.test_references = test_references
            outputs.test_metrics = test.metrics
            trainer.log_metrics("test", test.metrics)
    option = settings.arguments.training.decision_threshold  # 'tune', a probability, or None
    if option is not None:
        decide_binary_threshold(option, data, scorer, outputs)
    return outputs


def decide_binary_threshold(option, data: ClassificationData, scorer: RunMetrics, outputs: EvaluationOutputs):
    """--decision_threshold: the positive class's threshold, and validation (and test) scored at 0.5 and at it.

    A tuned threshold scored on the validation split it was tuned on is optimistic, as the
    multi-label thresholds are; the test split's figures at it are the honest ones.
    """
    names = data.labels.names
    tuned = option == TUNE
    threshold = tune_decision_threshold(outputs.logits, outputs.references) if tuned else option
    outputs.decision_threshold = threshold
    results = {
        "decision_threshold": threshold,
        "decision_threshold_tuned_on": data.split_sources["validation"] if tuned else None,
        "positive_label": names[POSITIVE_ID],
    }
    splits = {"eval": (outputs.logits, outputs.references)}
    if outputs.test_references is not None:
        splits["test"] = (outputs.test_logits, outputs.test_references)
    for prefix, (logits, references) in splits.items():
        references = np.asarray(references)
        at_half = scorer.binary_scores(logits, references, DEFAULT_THRESHOLD)
        at_threshold = scorer.binary_scores(logits, references, threshold)
        results[f"{prefix}_f1_positive"] = at_half["f1_positive"]
        results.update({f"{prefix}_threshold_{name}": value for name, value in at_threshold.items()})
    outputs.threshold_results = results
    shown = "test" if "test" in splits else "eval"  # the honest split where there is one
    logger.info(
        "Decision threshold for '%s': %.2f (%s); positive-class F1 on %s %.4f at 0.5, %.4f at it",
        names[POSITIVE_ID],
        threshold,
        "tuned on validation" if tuned else "given",
        "test" if shown == "test" else "validation",
        results[f"{shown}_f1_positive"],
        results[f"{shown}_threshold_f1_positive"],
    )


def evaluate_merged_model(settings: RunSettings, trainer, references) -> dict[str, Any]:
    """--merge_adapter: the merged model's own scores on the validation split, and what it is.

    The merged model is what a user deploys without peft; for QLoRA it is not the evaluated
    model (adapters.describe_merged_model), so its own figures are measured rather than assumed.
    Scored as it is in memory, on the main process (which merged it). Multi-label classes at 0.5.
    """
    merged, training = settings.merged, trainer.args
    if merged is None:
        return {}
    model = merged.model.to(training.device).eval()
    collator = padding_collator(trainer.processing_class, settings.arguments.data, training.device)
    with autocast_for(settings.precision, training.device.type):
        logits = batch_logits(
            model,
            settings.data.tokenized["validation"],
            collator,
            training.device,
            training.per_device_eval_batch_size,
            progress=not training.disable_tqdm,
        )
    logits, _ = trainer.compute_metrics.per_document(logits)  # sliding_window: one row per document
    names = settings.data.labels.names
    scores = trainer.compute_metrics.scores(logits, references, thresholds=[DEFAULT_THRESHOLD] * len(names))
    logger.info(
        "Merged model in %s, %s: %s",
        Path(training.output_dir) / MERGED_SUBDIR,
        merged.description.split(". ")[0],
        ", ".join(f"{METRIC_TITLES[name]} {value:.4f}" for name, value in scores.items()),
    )
    return {
        "merged_model": merged.description,
        **{f"merged_eval_{name}": value for name, value in scores.items()},
    }


def task_results(settings: RunSettings, eval_metrics, outputs: EvaluationOutputs) -> dict[str, Any]:
    """The task, its validation (and test) metrics, thresholds and per-class scores."""
    data = settings.data
    labels = data.labels
    return {
        "recipe": settings.recipe,
        "model_name_or_path": settings.arguments.model.model_name_or_path,
        "dataset": data.description,
        "problem_type": labels.problem_type,
        "num_labels": labels.num_labels,
        # Single-label and multi-label (exact match) accuracy and macro-F1; null for regression.
        "eval_accuracy": eval_metrics.get("eval_accuracy"),
        "eval_f1": eval_metrics.get("eval_f1"),
        # The task's other metrics (tasks.TASK_METRICS): micro-F1, or MSE, Pearson and Spearman.
        **{eval_key(name): eval_metrics.get(eval_key(name)) for name in TASK_METRICS[labels.problem_type]},
        "eval_loss": eval_metrics.get("eval_loss"),
        # Multi-label: the thresholds tuned on validation, and the validation metrics at those
        # thresholds (optimistic: tuned and scored on the same split; the test split is not).
        "label_thresholds": dict(zip(labels.names, outputs.thresholds, strict=True))
        if outputs.thresholds
        else None,
        **outputs.tuned_metrics,
        # Binary, --decision_threshold: the threshold, the positive class, and the metrics at 0.5 and at it.
        **outputs.threshold_results,
        # Counted from the predictions gathered over all processes (evaluation/metrics.py), not len(dataset): a
        # duplicated or dropped validation example under several processes would show here.
        "eval_samples": eval_metrics["eval_samples"],
        "eval_split": data.split_sources["validation"],
        "text_columns": list(data.text_columns),
        # Per split: examples longer than max_seq_length, the lengths keeping 95% and 99% whole (data/long_text.py).
        "truncation": data.truncation,
        # Per class on the validation split: precision, recall, F1, support; rows true, columns predicted.
        **outputs.report,
        **({"test_split": data.split_sources["test"]} if "test" in data.tokenized else {}),
        **{key: value for key, value in outputs.test_metrics.items() if key.startswith("test_")},
    }


def training_results(settings: RunSettings, trainer, train_result) -> dict[str, Any]:
    """How training went: steps, loss, the kept checkpoint, speed and padding."""
    training, state = trainer.args, trainer.state
    metrics = train_result.metrics
    runtime = metrics["train_runtime"]
    real_tokens, all_tokens = settings.tokens
    weights = getattr(trainer.compute_loss_func, "class_weights", None)
    return {
        "train_samples": len(trainer.train_dataset),
        "train_loss": metrics.get("train_loss"),
        "train_steps": state.global_step,
        # --early_stopping_patience: the checkpoint whose weights were kept, and its metric.
        "best_step": _step_of(state.best_model_checkpoint) if training.load_best_model_at_end else None,
        "best_metric": state.best_metric if training.load_best_model_at_end else None,
        "class_weights": dict(zip(settings.data.labels.names, weights, strict=True)) if weights else None,
        "epochs": state.epoch,
        "train_runtime_s": round(runtime, 3),
        "train_samples_per_s": metrics.get("train_samples_per_second"),
        "train_tokens_per_s": round(real_tokens / runtime, 2) if runtime > 0 else None,
        "pad_ratio": round(1 - real_tokens / all_tokens, 4) if all_tokens else None,
    }


def model_results(settings: RunSettings, trainer) -> dict[str, Any]:
    """What trained and what it held: parameters, adapters, optimizer state, memory."""
    total, trainable = count_parameters(trainer.model)
    adapters, choice = settings.shape.adapters, settings.batch_choice
    return {
        "params_total": total,
        "params_trainable": trainable,
        "model_type": settings.model_type,
        "attn_implementation": settings.arguments.model.attn_implementation,
        # LoRA: the layers adapted (resolved for the family) and the modules trained whole.
        "lora_target_modules": _listed(adapters.target_modules) if adapters is not None else None,
        "modules_trained_in_full": list(getattr(trainer.model, "modules_to_save", None) or []) or None,
        # QLoRA: the bits of the frozen base's linear weights (4: NF4, 8: LLM.int8); else None.
        "quantized_base_bits": settings.shape.base_bits if settings.shape.quantized_base else None,
        # What the optimizer's state tensors hold after training, measured (see modeling/optimizers.py).
        **optimizer_state_summary(trainer.optimizer, trainer.model),
        **settings.memory,
        # The batch the Trainer's arguments hold at the end: after any out-of-memory back-off (RecipeTrainer).
        "auto_batch_size": choice.after_training(
            trainer.args, getattr(trainer, "out_of_memory_at", [])
        ).to_dict()
        if choice is not None
        else None,
    }


def environment_results(settings: RunSettings, trainer) -> dict[str, Any]:
    """Where and how it ran: device, processes, precision, versions, the full config."""
    training = trainer.args
    return {
        "device": describe_device(training.device),
        "num_processes": training.world_size,
        # Read from the autocast state inside the model during training, not from the flags.
        "precision": settings.precision,
        "precision_reason": settings.precision_reason,
        # QLoRA: the dtype of the 4-bit layers' matmuls (bitsandbytes' compute dtype); else None.
        "quantized_compute_dtype": settings.quantized_compute,
        "versions": library_versions(),
        "created_at": timestamp(),
        "output_dir": str(training.output_dir),
        # What ran: the parsed arguments with what the run resolved (task, precision) and the
        # Trainer's own copy of the training arguments (the batch it trained with).
        "config": replace(settings.arguments, training=training).to_dict(),
    }


def write_prediction_files(settings: RunSettings, output_dir: Path, outputs: EvaluationOutputs) -> None:
    """Validation (and test) predictions as JSON Lines; the thresholds of a multi-label model next to it;
    the validation confusion matrix as a PNG (single-label)."""
    labels, validation_source = settings.data.labels, settings.data.split_sources["validation"]

    def rows(logits):
        return prediction_rows(
            logits, labels.names, labels.problem_type, outputs.thresholds, outputs.decision_threshold
        )

    write_jsonl(output_dir / EVAL_PREDICTIONS_FILE, rows(outputs.logits))
    if outputs.test_logits is not None:
        write_jsonl(output_dir / TEST_PREDICTIONS_FILE, rows(outputs.test_logits))
    model_dirs = [directory for directory in (output_dir, output_dir / MERGED_SUBDIR) if directory.is_dir()]
    for directory in model_dirs if outputs.thresholds is not None else ():
        write_thresholds(directory, labels.names, outputs.thresholds, validation_source)
    for directory in model_dirs if outputs.decision_threshold is not None else ():
        tuned_on = outputs.threshold_results["decision_threshold_tuned_on"]
        write_decision_threshold(directory, labels.names, outputs.decision_threshold, tuned_on)
    if outputs.report["confusion_matrix"] is not None:
        title = f"{settings.recipe}, {validation_source}"
        draw_confusion_matrix(outputs.report["confusion_matrix"], output_dir / CONFUSION_MATRIX_PNG, title)


def finish_run(trainer, train_result, eval_metrics: dict[str, Any], settings: RunSettings) -> dict[str, Any]:
    """Predictions, results.json and the model card of a finished run (this module's docstring)."""
    trainer.log_metrics("train", train_result.metrics)
    trainer.log_metrics("eval", eval_metrics)
    evaluation, eval_metrics = final_validation(settings, trainer, eval_metrics)
    outputs = evaluation_outputs(settings, trainer, evaluation)
    results = {
        **task_results(settings, eval_metrics, outputs),
        # --merge_adapter: what the merged model is, and its own validation metrics (thresholds 0.5).
        **evaluate_merged_model(settings, trainer, outputs.references),
        **training_results(settings, trainer, train_result),
        **model_results(settings, trainer),
        **environment_results(settings, trainer),
    }
    results["neglected_classes"] = neglected_classes(
        results.get("per_class"), results.get("confusion_matrix")
    )
    results.update(train_loss_check(trainer.state.log_history, results))  # issue #42: the end loss
    if trainer.is_world_process_zero():
        output_dir = Path(trainer.args.output_dir)
        write_prediction_files(settings, output_dir, outputs)
        path = write_results(output_dir, results)
        write_card(output_dir, results, hub_repo_id(trainer))
        logger.info(
            "Done: %s, %.1f samples/s, peak memory %.2f GiB. Model and %s in %s",
            ", ".join(
                f"{METRIC_TITLES[name]} {results[eval_key(name)]:.4f}"
                for name in TASK_METRICS[settings.data.labels.problem_type]
                if results[eval_key(name)] is not None
            ),
            results["train_samples_per_s"],
            results["peak_memory_gib"],
            path.name,
            output_dir,
        )
        if results["neglected_classes"]:  # issue #42: a class the model ignores, said with what helps
            logger.warning(results_neglect_note(results))
        if results["train_loss_high"]:
            logger.warning(high_loss_note(results))
    return results


def hub_repo_id(trainer) -> str | None:
    """--push_to_hub: the repository the Trainer pushes to (its card's loading code names it); else None."""
    return getattr(trainer, "hub_model_id", None) if trainer.args.push_to_hub else None


def push_finished_run(trainer, results: dict[str, Any]) -> None:
    """--push_to_hub: the Trainer's push with results.json and the run's card (RecipeTrainer.create_model_card).

    The Trainer pushed the model when the script saved it, before the final evaluation; this
    second commit adds the results and the card. Every process calls it: the Trainer saves the
    model again first, a collective step under FSDP and DeepSpeed. A stock Trainer writes and
    uploads its own draft card there; the run's card is then written into output_dir again.
    """
    if not trainer.args.push_to_hub:
        return
    trainer.model_card = build_card(results, hub_repo_id(trainer))
    trainer.push_to_hub(commit_message="End of training: results and model card")
    if trainer.is_world_process_zero():
        write_card(trainer.args.output_dir, results, hub_repo_id(trainer))
