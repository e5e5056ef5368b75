"""What a finished run writes: predictions, results.json and the W&B summary, from the Trainer's outputs.

`finish_run` is `RecipeRun.write_results`. It reads the Trainer only through what every
`transformers.Trainer` has: `state`, `args` (the copy `RecipeRun.resolve` made, with any batch a
back-off changed), the metrics `evaluate` and `predict` return, the final validation predictions
the run's `compute_metrics` saw (run/metrics.py), `log_metrics`, `push_to_hub`. Besides those, the
run's own: the data and labels, its callbacks' counts, the memory phases. In order:

1. Multi-label: one threshold per class tuned on the validation predictions (the metrics during
   training decided every class at 0.5); the per-class report; the test split predicted (and
   scored, if labelled) at the tuned thresholds. Binary with --decision_threshold: the positive
   class's threshold (tuned on validation, or given), and both splits scored at 0.5 and at it.
2. The memory phases closed, the precision the layers really ran in, the token counts summed
   over processes (the run's last collective step).
3. --merge_adapter: the merged model scored on validation, on the main process.
4. On the main process: eval/test predictions as JSON Lines, the thresholds beside the model, the
   confusion matrix, then results.json (written atomically), then the model card, README.md
   (tracking/model_card.py), from results.json's contents.
5. Every results.json key into the W&B summary, under the same name.
6. --push_to_hub: the Trainer's own push once more, now with the results and the run's card.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from recipes_lib.config.precision import autocast_for
from recipes_lib.config.recipe_options import MERGED_SUBDIR
from recipes_lib.config.tasks import DEFAULT_THRESHOLD, MULTI_LABEL, REGRESSION, TASK_METRICS
from recipes_lib.config.validation import TUNE, parse_decision_threshold
from recipes_lib.data.files import write_jsonl
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
from recipes_lib.memory.peaks import peak_memory
from recipes_lib.modeling.adapters import describe_merged_model, load_trained_model, read_base_quantization
from recipes_lib.modeling.loading import count_parameters
from recipes_lib.modeling.optimizers import optimizer_state_summary
from recipes_lib.results import describe_device, library_versions, timestamp, write_results
from recipes_lib.tracking.model_card import build_card, write_card
from recipes_lib.tracking.names import METRIC_TITLES, eval_key
from recipes_lib.training.trainer import evaluation_in_input_order

logger = logging.getLogger("recipes_lib")


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


def _logits(predictions):
    return predictions[0] if isinstance(predictions, tuple) else predictions


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


def final_validation(run, trainer, eval_metrics: dict[str, Any]):
    """The final validation pass's predictions (window rows under sliding_window), in the rows' order,
    and its metrics.

    They are the last the run's compute_metrics saw: the script's `run.final_metrics(trainer)`, each
    validation example once, gathered from every process. A Trainer that evaluated in another order
    predicts the split once more in input order (its metrics, computed per document in that order,
    replace the script's: under sliding_window only they can differ).
    """
    validation = run.tokenized["validation"]
    seen = run.compute_metrics.last_predictions
    if seen is None or len(seen.logits) != len(validation):
        raise RuntimeError(
            "The run's compute_metrics has not seen the final validation pass. Hand the Trainer "
            "compute_metrics=run.compute_metrics and call run.final_metrics(trainer) before run.write_results()."
        )
    if evaluates_in_input_order(trainer):
        return seen, eval_metrics
    with evaluation_in_input_order(trainer.args):
        output = trainer.predict(validation, metric_key_prefix="eval")
    return run.compute_metrics.last_predictions, {**eval_metrics, **output.metrics}


def evaluation_outputs(run, trainer, evaluation) -> EvaluationOutputs:
    """Thresholds (multi-label), per-class scores and the test split, from the final validation pass."""
    labels = run.data.labels
    # Under --long_text sliding_window, one prediction per document: its windows combined.
    outputs = EvaluationOutputs(*run.compute_metrics.per_document(evaluation.logits, evaluation.references))
    if labels.problem_type == MULTI_LABEL:
        outputs.thresholds = tune_thresholds(sigmoid(outputs.logits), outputs.references)
        run.compute_metrics.thresholds = outputs.thresholds
        tuned = run.compute_metrics.scores(outputs.logits, outputs.references)
        outputs.tuned_metrics = {f"eval_tuned_{name}": value for name, value in tuned.items()}
        logger.info(
            "Thresholds tuned on validation: %s", dict(zip(labels.names, outputs.thresholds, strict=True))
        )
    outputs.report = per_class(outputs.logits, outputs.references, labels, outputs.thresholds)
    if "test" in run.tokenized:
        # In the rows' order with any Trainer: the prediction file and the windows' documents follow it.
        with (
            run.compute_metrics.scoring(run.document_ids("test")) as metrics,
            evaluation_in_input_order(trainer.args),
        ):
            test = trainer.predict(run.tokenized["test"], metric_key_prefix="test")
            outputs.test_logits, test_references = metrics.per_document(
                _logits(test.predictions), test.label_ids
            )
        if run.data.test_has_labels:
            outputs.test_references = test_references
            outputs.test_metrics = test.metrics
            trainer.log_metrics("test", test.metrics)
    decide_binary_threshold(run, outputs)
    return outputs


def decide_binary_threshold(run, outputs: EvaluationOutputs) -> None:
    """--decision_threshold: the positive class's threshold, and validation (and test) scored at 0.5 and at it.

    A tuned threshold scored on the validation split it was tuned on is optimistic, as the
    multi-label thresholds are; the test split's figures at it are the honest ones.
    """
    option = parse_decision_threshold(run.training.decision_threshold)
    if option is None:
        return
    names, metrics = run.data.labels.names, run.compute_metrics
    tuned = option == TUNE
    threshold = tune_decision_threshold(outputs.logits, outputs.references) if tuned else option
    outputs.decision_threshold = threshold
    results = {
        "decision_threshold": threshold,
        "decision_threshold_tuned_on": run.data.split_sources["validation"] if tuned else None,
        "positive_label": names[POSITIVE_ID],
    }
    splits = {"eval": (outputs.logits, outputs.references)}
    if outputs.test_references is not None:
        splits["test"] = (outputs.test_logits, outputs.test_references)
    for prefix, (logits, references) in splits.items():
        references = np.asarray(references)
        at_half = metrics.binary_scores(logits, references, DEFAULT_THRESHOLD)
        at_threshold = metrics.binary_scores(logits, references, threshold)
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


def evaluate_merged_model(run, references, observed_precision: str) -> dict[str, Any]:
    """--merge_adapter: the merged model's own scores on the validation split, and what it is.

    The merged model is what a user deploys without peft; for QLoRA it is not the evaluated
    model (adapters.describe_merged_model), so its own figures are measured rather than assumed.
    Main process only: it wrote the merged model. Multi-label classes at 0.5, as in eval_*.
    """
    training = run.training
    merged_dir = Path(training.output_dir) / MERGED_SUBDIR
    options = run.arguments.recipe_options.get(run.spec.options)
    if not getattr(options, "merge_adapter", False) or not run.is_main_process or not merged_dir.is_dir():
        return {}
    model = load_trained_model(merged_dir, device=run.device).eval()
    collator = padding_collator(run.tokenizer, run.arguments.data, run.device)
    with autocast_for(observed_precision, run.device.type):
        logits = batch_logits(
            model,
            run.tokenized["validation"],
            collator,
            run.device,
            training.per_device_eval_batch_size,
            progress=not training.disable_tqdm,
        )
    del model
    logits, _ = run.compute_metrics.per_document(logits)  # sliding_window: one row per document
    names = run.data.labels.names
    scores = run.compute_metrics.scores(logits, references, thresholds=[DEFAULT_THRESHOLD] * len(names))
    what = describe_merged_model(read_base_quantization(training.output_dir))
    logger.info(
        "Merged model in %s, %s: %s",
        merged_dir,
        what.split(". ")[0],
        ", ".join(f"{METRIC_TITLES[name]} {value:.4f}" for name, value in scores.items()),
    )
    return {"merged_model": what, **{f"merged_eval_{name}": value for name, value in scores.items()}}


def task_results(run, eval_metrics, outputs: EvaluationOutputs, merged: dict[str, Any]) -> dict[str, Any]:
    """The task, its validation (and test) metrics, thresholds and per-class scores."""
    labels, data = run.data.labels, run.data
    return {
        "recipe": run.spec.name,
        "model_name_or_path": run.arguments.model.model_name_or_path,
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
        # --merge_adapter: what the merged model is, and its own validation metrics (thresholds 0.5).
        **merged,
        # Counted from the predictions gathered over all processes (evaluation/metrics.py), not len(dataset): a
        # duplicated or dropped validation example under several processes would show here.
        "eval_samples": eval_metrics["eval_samples"],
        "eval_split": data.split_sources["validation"],
        "text_columns": list(data.text_columns),
        # Per split: examples longer than max_seq_length, the lengths keeping 95% and 99% whole (data/long_text.py).
        "truncation": data.truncation,
        # Per class on the validation split: precision, recall, F1, support; rows true, columns predicted.
        **outputs.report,
        **({"test_split": data.split_sources["test"]} if "test" in run.tokenized else {}),
        **{key: value for key, value in outputs.test_metrics.items() if key.startswith("test_")},
    }


def training_results(run, trainer, train_result, tokens: tuple[int, int]) -> dict[str, Any]:
    """How training went: steps, loss, the kept checkpoint, speed and padding."""
    training, state = trainer.args, trainer.state
    metrics = train_result.metrics
    runtime = metrics["train_runtime"]
    real_tokens, all_tokens = tokens
    weights = getattr(trainer.compute_loss_func, "class_weights", None)
    return {
        "train_samples": len(trainer.train_dataset),
        "train_loss": metrics.get("train_loss"),
        "train_steps": state.global_step,
        # --early_stopping_patience: the checkpoint whose weights were kept, and its metric.
        "best_step": _step_of(state.best_model_checkpoint) if training.load_best_model_at_end else None,
        "best_metric": state.best_metric if training.load_best_model_at_end else None,
        "class_weights": dict(zip(run.data.labels.names, weights, strict=True)) if weights else None,
        "epochs": state.epoch,
        "train_runtime_s": round(runtime, 3),
        "train_samples_per_s": metrics.get("train_samples_per_second"),
        "train_tokens_per_s": round(real_tokens / runtime, 2) if runtime > 0 else None,
        "pad_ratio": round(1 - real_tokens / all_tokens, 4) if all_tokens else None,
    }


def model_results(run, trainer, memory_results: dict[str, Any]) -> dict[str, Any]:
    """What trained and what it held: parameters, adapters, optimizer state, memory."""
    total, trainable = count_parameters(trainer.model)
    adapters = run.shape.adapters
    choice = run.batch_choice
    return {
        "params_total": total,
        "params_trainable": trainable,
        "model_type": run.model_config.model_type,
        "attn_implementation": run.arguments.model.attn_implementation,
        # LoRA: the layers adapted (resolved for the family) and the modules trained whole.
        "lora_target_modules": _listed(adapters.target_modules) if adapters is not None else None,
        "modules_trained_in_full": list(getattr(trainer.model, "modules_to_save", None) or []) or None,
        # QLoRA: the bits of the frozen base's linear weights (4: NF4, 8: LLM.int8); else None.
        "quantized_base_bits": run.shape.base_bits if run.shape.quantized_base else None,
        # What the optimizer's state tensors hold after training, measured (see modeling/optimizers.py).
        **optimizer_state_summary(trainer.optimizer, trainer.model),
        **peak_memory(run.device, run.memory),
        **memory_results,
        # The batch the Trainer's arguments hold at the end: after any out-of-memory back-off (RecipeTrainer).
        "auto_batch_size": choice.after_training(
            trainer.args, getattr(trainer, "out_of_memory_at", [])
        ).to_dict()
        if choice is not None
        else None,
    }


def environment_results(run, trainer, precision: str) -> dict[str, Any]:
    """Where and how it ran: device, processes, precision, versions, the full config."""
    training = trainer.args
    return {
        "device": describe_device(run.device),
        "num_processes": training.world_size,
        # Read from the autocast state inside the model during training, not from the flags.
        "precision": precision,
        "precision_reason": run.precision_choice.reason,
        # QLoRA: the dtype of the 4-bit layers' matmuls (bitsandbytes' compute dtype); else None.
        "quantized_compute_dtype": run.precision_probe.quantized_compute,
        "versions": library_versions(),
        "created_at": timestamp(),
        "output_dir": str(training.output_dir),
        # What ran: the parsed arguments with what the run resolved (task, precision) and the
        # Trainer's own copy of the training arguments (the batch it trained with).
        "config": replace(run.arguments, training=training).to_dict(),
    }


def write_prediction_files(run, outputs: EvaluationOutputs) -> None:
    """Validation (and test) predictions as JSON Lines; the thresholds of a multi-label model next to it;
    the validation confusion matrix as a PNG (single-label)."""
    output_dir, labels = Path(run.training.output_dir), run.data.labels

    def rows(logits):
        return prediction_rows(
            logits, labels.names, labels.problem_type, outputs.thresholds, outputs.decision_threshold
        )

    write_jsonl(output_dir / EVAL_PREDICTIONS_FILE, rows(outputs.logits))
    if outputs.test_logits is not None:
        write_jsonl(output_dir / TEST_PREDICTIONS_FILE, rows(outputs.test_logits))
    validation_source = run.data.split_sources["validation"]
    if outputs.thresholds is not None:
        for directory in (output_dir, output_dir / MERGED_SUBDIR):
            if directory.is_dir():
                write_thresholds(directory, labels.names, outputs.thresholds, validation_source)
    if outputs.decision_threshold is not None:
        tuned_on = outputs.threshold_results["decision_threshold_tuned_on"]
        for directory in (output_dir, output_dir / MERGED_SUBDIR):
            if directory.is_dir():
                write_decision_threshold(directory, labels.names, outputs.decision_threshold, tuned_on)
    if outputs.report["confusion_matrix"] is not None:
        title = f"{run.spec.name}, {validation_source}"
        draw_confusion_matrix(outputs.report["confusion_matrix"], output_dir / CONFUSION_MATRIX_PNG, title)


def observed_precision(run) -> str:
    """The precision the layers computed in (a run resumed at its end ran nothing: the planned one)."""
    precision = run.precision_probe.observed or run.precision
    if precision != run.precision:
        logger.warning("Asked for %s, but the model computed in %s.", run.precision, precision)
    return precision


def finish_run(run, trainer, train_result, eval_metrics: dict[str, Any]) -> dict[str, Any]:
    """Predictions, results.json and the W&B summary of a finished run (this module's docstring)."""
    trainer.log_metrics("train", train_result.metrics)
    trainer.log_metrics("eval", eval_metrics)
    evaluation, eval_metrics = final_validation(run, trainer, eval_metrics)
    outputs = evaluation_outputs(run, trainer, evaluation)
    if run.memory is None:  # the script handed the Trainer none of run.callbacks()
        raise RuntimeError(
            "Hand the Trainer callbacks=run.callbacks(model): the run's memory phases start there."
        )
    memory_results = run.memory.finish()
    for line in run.memory.summary_lines(memory_results):
        logger.info(line)
    run.precision_probe.remove()
    precision = observed_precision(run)
    tokens = run.tokens.totals(trainer.accelerator)  # the run's last collective step
    # After it: the other processes need not wait for the main one, which alone scores the merged model.
    merged = evaluate_merged_model(run, outputs.references, precision)
    results = {
        **task_results(run, eval_metrics, outputs, merged),
        **training_results(run, trainer, train_result, tokens),
        **model_results(run, trainer, memory_results),
        **environment_results(run, trainer, precision),
    }
    results["neglected_classes"] = neglected_classes(
        results.get("per_class"), results.get("confusion_matrix")
    )
    if trainer.is_world_process_zero():
        write_prediction_files(run, outputs)
        path = write_results(run.training.output_dir, results)
        write_card(run.training.output_dir, results, hub_repo_id(run, trainer))
        problem_type = run.data.labels.problem_type
        logger.info(
            "Done: %s, %.1f samples/s, peak memory %.2f GiB. Model and %s in %s",
            ", ".join(
                f"{METRIC_TITLES[name]} {results[eval_key(name)]:.4f}"
                for name in TASK_METRICS[problem_type]
                if results[eval_key(name)] is not None
            ),
            results["train_samples_per_s"],
            results["peak_memory_gib"],
            path.name,
            run.training.output_dir,
        )
        if results["neglected_classes"]:  # issue #42: a class the model ignores, said with what helps
            logger.warning(results_neglect_note(results))
    run.tracker.finish(results)  # every results.json key into the W&B summary, same names
    push_finished_run(run, trainer, results)
    return results


def hub_repo_id(run, trainer) -> str | None:
    """--push_to_hub: the repository the Trainer pushes to (its card's loading code names it); else None."""
    return getattr(trainer, "hub_model_id", None) if run.training.push_to_hub else None


def push_finished_run(run, trainer, results: dict[str, Any]) -> None:
    """--push_to_hub: the Trainer's push with results.json and the run's card (RecipeTrainer.create_model_card).

    The Trainer pushed the model when the script saved it, before the final evaluation; this
    second commit adds the results and the card. Every process calls it: the Trainer saves the
    model again first, a collective step under FSDP and DeepSpeed. A stock Trainer writes and
    uploads its own draft card there; the run's card is then written into output_dir again.
    """
    if not run.training.push_to_hub:
        return
    trainer.model_card = build_card(results, hub_repo_id(run, trainer))
    trainer.push_to_hub(commit_message="End of training: results and model card")
    if trainer.is_world_process_zero():
        write_card(run.training.output_dir, results, hub_repo_id(run, trainer))
