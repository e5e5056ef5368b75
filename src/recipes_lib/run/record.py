"""What a finished run writes: `finish_run` the predictions and results.json, reading the Trainer only through
what every `transformers.Trainer` has, the rest from values (`evaluation`, `RunSettings`); `publish_results`
the model card, the closing lines and --push_to_hub's second push."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from recipes_lib.config.arguments import ParsedArguments, RecipeTrainingArguments
from recipes_lib.config.recipe_options import MERGED_SUBDIR, QloraArguments
from recipes_lib.config.recipe_spec import LoraShape, RecipeSpec
from recipes_lib.config.tasks import TASK_METRICS
from recipes_lib.data.files import write_jsonl
from recipes_lib.data.loading import ClassificationData
from recipes_lib.evaluation.collapse import end_of_run_notes
from recipes_lib.evaluation.neglected import neglected_classes
from recipes_lib.evaluation.predictions import final_outputs, prediction_files, write_decision_files
from recipes_lib.evaluation.training_loss import train_loss_check
from recipes_lib.modeling.loading import count_parameters
from recipes_lib.modeling.optimizers import optimizer_state_summary
from recipes_lib.results import RESULT_KEYS, RESULTS_FILE, RunResults, library_versions, write_results
from recipes_lib.tracking.model_card import write_card
from recipes_lib.tracking.names import METRIC_TITLES, eval_key
from recipes_lib.training.run_totals import whole_run_loss
from recipes_lib.training.trainer import RecipeTrainer, evaluation_in_input_order

logger = logging.getLogger("recipes_lib")


@dataclass(frozen=True)
class RunSettings:
    """What the record needs of a run besides the Trainer, as values (`RecipeRun.write_results` fills it from `prepare`'s values)."""

    recipe: str
    arguments: ParsedArguments  # what ran: the task, attention kernel and precision resolved
    data: ClassificationData  # labels, split sources, the tokenized splits, truncation
    class_weights: list[float] | None  # --class_weights' per-class weights, as the loss used them
    model_type: str
    adapters: LoraShape | None  # the adapters, targets resolved for the family
    precision: str  # the precision the layers computed in, observed
    precision_reason: str  # why the run decided its precision (config/precision.py)
    quantized_compute: str | None  # QLoRA: the dtype of the 4-bit layers' matmuls
    memory: dict[str, Any]  # the memory phases and peaks
    # The whole run's real and padded training tokens, and this process's real ones.
    tokens: tuple[int, int, int]
    device: str  # where it ran (results.describe_device)
    resumed_from: str | None = None  # --resume_from_checkpoint's checkpoint directory, resolved
    batch_choice: Any = None  # --auto_batch_size: the batch it started at
    merged: dict[str, Any] = field(default_factory=dict)  # --merge_adapter: run/merged.py's figures


# The validation figures results.json keeps (RunResults' eval_* fields up to eval_loss).
EVAL_KEYS = tuple(
    f"eval_{name}" for name in ("accuracy", "f1", "f1_micro", "mse", "pearson", "spearman", "loss")
) + ("eval_f1_positive",)  # binary tasks: the positive class's F1 (evaluation/metrics.py)


def _listed(value):
    """A tuple as the list JSON writes (results.json and the returned results agree); a string as is."""
    return list(value) if isinstance(value, tuple) else value


def _step_of(checkpoint: str | None) -> int | None:
    return int(checkpoint.rsplit("-", 1)[-1]) if checkpoint else None


def final_predictions(settings: RunSettings, trainer, evaluation):
    """The validation split's per-document (logits, references), the test split's (logits, references or None,
    metrics; None without one) and the validation metrics, in the rows' order with any Trainer. A Trainer that
    evaluated in another order (the stock one under group_by_length; RecipeTrainer never) predicts the split
    once more in input order; its metrics replace `evaluation`'s (only sliding_window's differ)."""
    data, scorer = settings.data, trainer.compute_metrics
    in_order = isinstance(trainer, RecipeTrainer)  # its get_eval_dataloader keeps the input order
    regrouped = trainer.args.train_sampling_strategy == "group_by_length" and not in_order

    def logits_and_labels(output):
        logits = output.predictions  # a model's other outputs dropped
        return (logits[0] if isinstance(logits, tuple) else logits), output.label_ids

    logits, references = logits_and_labels(evaluation)
    eval_metrics, test = evaluation.metrics, None
    with evaluation_in_input_order(trainer.args):
        if regrouped:
            output = trainer.predict(data.tokenized["validation"], metric_key_prefix="eval")
            logits, references = logits_and_labels(output)
            eval_metrics = {**eval_metrics, **output.metrics}
        validation = scorer.per_document(logits, references)  # sliding_window: windows combined
        if "test" in data.tokenized:
            with scorer.scoring(scorer.test_document_ids):
                output = trainer.predict(data.tokenized["test"], metric_key_prefix="test")
                logits, references = scorer.per_document(*logits_and_labels(output))
            test = (logits, references, output.metrics) if data.test_has_labels else (logits, None, {})
    return validation, test, eval_metrics


def task_results(settings: RunSettings, eval_metrics) -> dict[str, Any]:
    """The task and its validation metrics (the evaluation's thresholds, per-class and test figures follow)."""
    data = settings.data
    labels = data.labels
    return dict(
        recipe=settings.recipe,
        model_name_or_path=settings.arguments.model.model_name_or_path,
        dataset=data.description,
        problem_type=labels.problem_type,
        num_labels=labels.num_labels,
        # The task's metrics (tasks.TASK_METRICS); the others, null. Multi-label accuracy: exact match.
        **{key: eval_metrics.get(key) for key in EVAL_KEYS},
        # Counted from the predictions gathered over all processes (evaluation/metrics.py), not len(dataset): a
        # duplicated or dropped validation example under several processes would show here.
        eval_samples=eval_metrics["eval_samples"],
        eval_split=data.split_sources["validation"],
        test_split=data.split_sources["test"] if "test" in data.tokenized else None,
        text_columns=list(data.text_columns),
        # Per split: examples longer than max_seq_length, the lengths keeping 95% and 99% whole (data/long_text.py).
        truncation=data.truncation,
    )


def training_results(settings: RunSettings, trainer, train_result) -> dict[str, Any]:
    """How training went. The loss and the pad ratio cover the whole run, a resumed one included
    (training/run_totals.py); the speed, the steps this process ran: none when it resumed at the end."""
    training, state = trainer.args, trainer.state
    metrics = train_result.metrics
    runtime = metrics["train_runtime"]
    real_tokens, all_tokens, session_tokens = settings.tokens
    resumed_at = _step_of(settings.resumed_from)
    ran = state.global_step > (resumed_at or 0)
    weights = settings.class_weights
    return dict(
        train_samples=len(trainer.train_dataset),
        train_loss=whole_run_loss(state.log_history),
        train_steps=state.global_step,
        # --early_stopping_patience: the checkpoint whose weights were kept, and its metric.
        best_step=_step_of(state.best_model_checkpoint) if training.load_best_model_at_end else None,
        best_metric=state.best_metric if training.load_best_model_at_end else None,
        class_weights=dict(zip(settings.data.labels.names, weights, strict=True)) if weights else None,
        epochs=state.epoch,
        train_runtime_s=round(runtime, 3),
        train_samples_per_s=metrics.get("train_samples_per_second") if ran else None,
        train_tokens_per_s=round(session_tokens / runtime, 2) if ran and runtime > 0 else None,
        pad_ratio=round(1 - real_tokens / all_tokens, 4) if all_tokens else None,
        resumed_from_step=resumed_at,
    )


def model_results(settings: RunSettings, trainer) -> dict[str, Any]:
    """What trained and how: the model type, adapters, the batch (the memory comes as settings.memory;
    parameters and optimizer state are counted in modeling/, by finish_run)."""
    adapters, choice = settings.adapters, settings.batch_choice
    qlora = settings.arguments.recipe_options.get(QloraArguments)
    # The batch the Trainer's arguments hold at the end: after any out-of-memory back-off (RecipeTrainer).
    batch = choice.after_training(trainer.args) if choice else None
    return dict(
        model_type=settings.model_type,
        attn_implementation=settings.arguments.model.attn_implementation,
        # LoRA: the layers adapted (resolved for the family), the modules trained whole (peft's set, sorted).
        lora_target_modules=_listed(adapters.target_modules) if adapters is not None else None,
        modules_trained_in_full=sorted(getattr(trainer.model, "modules_to_save", None) or []) or None,
        # QLoRA: the bits of the frozen base's linear weights (4: NF4, 8: LLM.int8); else None.
        quantized_base_bits=qlora.base_bits if qlora is not None else None,
        auto_batch_size=batch.to_dict() if batch is not None else None,
    )


def environment_results(settings: RunSettings, trainer, config: dict[str, Any]) -> dict[str, Any]:
    """Where and how it ran: device, processes, precision, versions, the full config."""
    training = trainer.args
    return dict(
        device=settings.device,
        num_processes=training.world_size,
        # Read from the autocast state inside the model during training, not from the flags.
        precision=settings.precision,
        precision_reason=settings.precision_reason,
        # QLoRA: the dtype of the 4-bit layers' matmuls (bitsandbytes' compute dtype); else None.
        quantized_compute_dtype=settings.quantized_compute,
        versions=library_versions(),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        output_dir=str(training.output_dir),
        config=config,
    )


def finish_run(trainer, train_result, evaluation, settings: RunSettings) -> RunResults:
    """Predictions and results.json; returns the record. Each part names its own keys: RunResults'
    constructor refuses a key two parts give (TypeError: multiple values) and one that is no field."""
    trainer.log_metrics("train", train_result.metrics)
    trainer.log_metrics("eval", evaluation.metrics)
    # What ran: the parsed arguments with what the run resolved (task, precision) and the Trainer's
    # own copy of the training arguments (the batch it trained with).
    config = replace(settings.arguments, training=trainer.args).to_dict()
    training, model = training_results(settings, trainer, train_result), model_results(settings, trainer)
    environment = environment_results(settings, trainer, config)
    validation, test, eval_metrics = final_predictions(settings, trainer, evaluation)
    task = task_results(settings, eval_metrics)
    # Down the layers: the parameters and the optimizer's state, measured (modeling/); what the evaluation
    # derives (multi-label thresholds, tuned and scored on one split: optimistic); then the files.
    total, trainable = count_parameters(trainer.model)
    optimizer_state = optimizer_state_summary(trainer.optimizer, trainer.model)
    labels, source = settings.data.labels, settings.data.split_sources["validation"]
    option = settings.arguments.training.decision_threshold  # 'tune', a probability, or None
    outputs = final_outputs(validation, test, trainer.compute_metrics, labels.names, option, source)
    if outputs.test_metrics:
        trainer.log_metrics("test", outputs.test_metrics)
    results = RunResults(
        **task,
        **outputs.results,
        # The Trainer's test figures the record keeps (not its timing: the speed is training's).
        **{key: value for key, value in outputs.test_metrics.items() if key in RESULT_KEYS},
        **settings.merged,
        params_total=total,
        params_trainable=trainable,
        **optimizer_state,
        **training,
        **model,
        **settings.memory,
        **environment,
        neglected_classes=neglected_classes(
            outputs.results["per_class"], outputs.results["confusion_matrix"]
        ),
        # issue #42: the end loss
        **train_loss_check(
            trainer.state.log_history, labels.problem_type, labels.num_labels, config.get("teacher")
        ),
    )
    if trainer.is_world_process_zero():
        output_dir = Path(trainer.args.output_dir)
        directories = [path for path in (output_dir, output_dir / MERGED_SUBDIR) if path.is_dir()]
        write_decision_files(directories, outputs, labels.names, source, f"{settings.recipe}, {source}")
        for name, rows in prediction_files(outputs, labels.names, labels.problem_type).items():
            write_jsonl(output_dir / name, rows)
        write_results(output_dir, results)
    return results


def publish_results(trainer, results: RunResults, recipe: RecipeSpec) -> None:
    """The card, the closing lines, and --push_to_hub's second commit (the results and the card; the model
    went when the script saved it). Every process calls it: push_to_hub saves the model again first, a
    collective step under FSDP and DeepSpeed, before it uploads the card the main process wrote."""
    output_dir, main = trainer.args.output_dir, trainer.is_world_process_zero()
    # --push_to_hub: the repository the Trainer pushes to, which the card's loading code names.
    repo = getattr(trainer, "hub_model_id", None) if trainer.args.push_to_hub else None
    default_rate = RecipeTrainingArguments.learning_rate  # a recipe whose SPEC leaves it as it is
    card = write_card(output_dir, results, repo, recipe.summary) if main else None
    if main:
        logger.info(
            "Done: %s, %s samples/s, peak memory %.2f GiB. Model and %s in %s",
            ", ".join(
                f"{METRIC_TITLES[name]} {results.value(eval_key(name)):.4f}"
                for name in TASK_METRICS[results.problem_type]
                if results.value(eval_key(name)) is not None
            ),
            # None: resumed at its end, no step ran here.
            "n/a" if results.train_samples_per_s is None else f"{results.train_samples_per_s:.1f}",
            results.peak_memory_gib,
            RESULTS_FILE,
            output_dir,
        )
        # issues #42, #50: a collapsed model, an ignored class, a high loss, each with what helps
        for note in end_of_run_notes(results, recipe.training_defaults.get("learning_rate", default_rate)):
            logger.warning(note)
    if trainer.args.push_to_hub:
        # The card as written (built once), put back by create_model_card after push_to_hub saves the model:
        # peft's adapter save rewrites README.md. Only the main process writes or uploads a card.
        trainer.model_card = card.read_bytes().decode() if card else None
        trainer.push_to_hub(commit_message="End of training: results and model card")
