"""The bookkeeping of one recipe run, behind the steps a recipe script calls.

A recipe script's `main()` reads as the recipe: parse the arguments, load the data, build the
model, build the Trainer, train, save, evaluate. Each step is a call on a `RecipeRun`, which keeps
what a run must do around those steps out of the script:

    with RecipeRun(arguments, SPEC) as run:   refuse to overwrite another run, resolve --resume_from_checkpoint,
                                              seed, logging
        run.load_data()                       tokenizer and config.json checks first, then the data, labels,
                                              tokenization; the precision once the model family is known
        run.load_model()                      W&B run started, memory phases begin
        run.trainer(model, optimizer)         --auto_batch_size, the RecipeTrainer with its callbacks
        run.train()                           out-of-memory back-off under --auto_batch_size
        run.save()                            model (or adapter) and tokenizer in output_dir
        run.evaluate()
    (leaving the block)                       results.json, the W&B summary with the same keys

Leaving the block through an exception writes no results.json: a results file always belongs to a
finished run. `run_main(main)` turns a user error into one paragraph on stderr and an exit code.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import datasets
import transformers
from transformers import EarlyStoppingCallback, set_seed

from recipes_lib.cli.predict import batch_logits
from recipes_lib.config.arguments import ParsedArguments
from recipes_lib.config.parsing import wants_traceback
from recipes_lib.config.precision import AutocastProbe, autocast_for
from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_lib.config.tasks import (
    DEFAULT_THRESHOLD,
    MULTI_LABEL,
    REGRESSION,
    SINGLE_LABEL,
    TASK_METRICS,
    predicted_labels,
    sigmoid,
    tune_thresholds,
)
from recipes_lib.data.loading import load_classification_data, padding_collator, tokenize
from recipes_lib.errors import ConfigError, OutputDirError, RecipeError
from recipes_lib.evaluation.metrics import TaskMetrics
from recipes_lib.evaluation.predictions import (
    CONFUSION_MATRIX_PNG,
    EVAL_PREDICTIONS_FILE,
    TEST_PREDICTIONS_FILE,
    draw_confusion_matrix,
    per_class_report,
    prediction_rows,
    write_thresholds,
)
from recipes_lib.memory.monitor import MemoryCallback, MemoryMonitor, peak_memory
from recipes_lib.modeling.adapters import (
    MERGED_SUBDIR,
    check_lora_targets,
    describe_merged_model,
    load_trained_model,
    read_base_quantization,
)
from recipes_lib.modeling.families import ArchitectureProfile
from recipes_lib.modeling.loading import (
    check_model_support,
    count_parameters,
    load_model,
    load_model_config,
    load_tokenizer,
)
from recipes_lib.modeling.optimizers import optimizer_state_summary
from recipes_lib.results import RESULTS_FILE, describe_device, library_versions, timestamp, write_results
from recipes_lib.tracking.names import METRIC_TITLES, eval_key
from recipes_lib.tracking.wandb_run import Tracker, start_tracking
from recipes_lib.training.autofit import choose_batch_size, train_with_out_of_memory_backoff
from recipes_lib.training.checkpoints import clear_previous_run, resolve_resume_checkpoint, resume_requested
from recipes_lib.training.trainer import RecipeTrainer, class_weights_from

logger = logging.getLogger("recipes_lib")

# Files that mean "another run lives here".
_RUN_MARKERS = (RESULTS_FILE, "model.safetensors", "adapter_model.safetensors", "checkpoint-*")


def setup_logging(arguments: ParsedArguments) -> None:
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S", stream=sys.stdout
    )
    # Only the main process talks at INFO; the others would print every line N times.
    logger.setLevel(logging.INFO if arguments.training.should_log else logging.WARNING)
    log_level = arguments.training.get_process_log_level()
    datasets.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.set_verbosity(log_level)


def check_output_dir(arguments: ParsedArguments) -> None:
    """Refuse to write over another run unless asked to resume it or to overwrite it."""
    from pathlib import Path

    training = arguments.training
    output_dir = Path(training.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise OutputDirError(f"--output_dir '{output_dir}' is a file, not a directory. Pick another path.")
    resuming = resume_requested(training.resume_from_checkpoint)
    if not output_dir.is_dir() or training.overwrite_output_dir or resuming:
        return
    found = sorted({path.name for marker in _RUN_MARKERS for path in output_dir.glob(marker)})
    if found:
        raise OutputDirError(
            f"The output directory '{output_dir}' already holds a run ({', '.join(found[:3])}). Nothing was "
            "changed. Pick another --output_dir, continue that run with --resume_from_checkpoint last, or "
            "replace it with --overwrite_output_dir."
        )


def name_fsdp_layer_classes(profile: ArchitectureProfile) -> None:
    """Under an FSDP launch, make the family's repeated layer the unit FSDP wraps.

    accelerate wraps the layer classes a model declares (_no_split_modules), and most encoders
    declare none. An fsdp_transformer_layer_cls_to_wrap in the accelerate config still wins.
    """
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        os.environ.setdefault("FSDP_TRANSFORMER_CLS_TO_WRAP", ",".join(profile.layer_classes))


class RecipeRun:
    """One run of a recipe: the steps are its methods, the bookkeeping happens around them."""

    def __init__(self, arguments: ParsedArguments, spec: RecipeSpec):
        self.arguments = arguments
        self.spec = spec
        options = arguments.recipe_options.get(spec.options) if spec.options is not None else None
        self.options = options
        # What the planner and --auto_batch_size need of this recipe (recipe_spec.py).
        self.shape = spec.shape(options)
        self.tracker = Tracker()
        self.memory: MemoryMonitor | None = None
        self.results: dict[str, Any] | None = None
        self._trainer: RecipeTrainer | None = None
        self._train_result = None
        self._eval_metrics: dict[str, Any] | None = None

    # -- shortcuts the recipe scripts use ------------------------------------------------------------

    @property
    def training(self):
        return self.arguments.training

    @property
    def device(self):
        return self.training.device

    @property
    def precision(self) -> str:
        """'bf16', 'fp16' or 'fp32' (precision.py), final once `load_data` has read the model family."""
        return self.training.precision

    @property
    def adapted_modules(self) -> tuple[str, ...] | str:
        """The layers LoRA adapts, resolved for the model's family ('all-linear' as given)."""
        return self.shape.adapters.target_modules

    @property
    def is_main_process(self) -> bool:
        return self.training.process_index == 0

    # -- the steps -----------------------------------------------------------------------------------

    def __enter__(self) -> RecipeRun:
        setup_logging(self.arguments)
        check_output_dir(self.arguments)
        # `last` means the newest complete checkpoint (checkpoints.py); a bad value fails here, not after loading.
        self.resume_from = resolve_resume_checkpoint(
            self.training.resume_from_checkpoint, self.training.output_dir, RESULTS_FILE
        )
        set_seed(self.training.seed)
        return self

    def load_data(self):
        """Tokenized train and validation splits (a DatasetDict), after every check that needs no weights.

        Cheapest checks first. The tokenizer and config.json are small: a wrong model name or a
        max_seq_length the model cannot take fails before a dataset download. Then every check on
        columns and labels runs before tokenization and before the model weights are fetched.
        """
        model_args, data_args = self.arguments.model, self.arguments.data
        self.tokenizer = load_tokenizer(model_args)
        base_config = load_model_config(model_args)
        # What the model's family supports (families.py), from config.json alone: attention kernel,
        # sequence length, LoRA targets, precision.
        self.profile = check_model_support(model_args, base_config, data_args.max_seq_length)
        if self.shape.adapters is not None:
            self.shape = replace(self.shape, adapters=check_lora_targets(self.shape.adapters, base_config))
        self.training.settle_precision(base_config.model_type)  # DeBERTa stays out of automatic fp16
        logger.info(
            "%s (%s): attention %s, precision %s (%s)%s",
            self.profile.family,
            base_config.model_type,
            model_args.attn_implementation,
            self.precision,
            self.training.precision_choice.reason,
            f", LoRA on {_listed_text(self.adapted_modules)}" if self.shape.adapters is not None else "",
        )
        self.data = load_classification_data(
            data_args, cache_dir=model_args.cache_dir, seed=self.training.seed
        )
        # 'auto' resolved: the config in results.json then says what ran, as W&B's does (the Trainer's
        # W&B callback adds the model config, whose problem_type has the same name).
        data_args.problem_type = self.data.labels.problem_type
        self.model_config = load_model_config(model_args, self.data.labels)
        logger.info(
            "Data: %s, %d train / %d validation examples, %d classes (%s), text: %s",
            self.data.description,
            len(self.data.raw["train"]),
            len(self.data.raw["validation"]),
            self.data.labels.num_labels,
            ", ".join(self.data.labels.names[:10]),
            " + ".join(self.data.text_columns),
        )
        check_task_options(self.training, self.data.labels)  # before tokenizing and loading weights
        self.tokenized = tokenize(self.data, self.tokenizer, data_args, self.training.main_process_first)
        return self.tokenized

    def load_model(self, **from_pretrained_kwargs):
        """The pretrained encoder with a new classification head for this data's labels.

        `quantization_config` (QLoRA's 4-bit base) loads the weights straight onto the training
        device, quantized as they land: the Trainer cannot move a quantized model afterwards.
        """
        # The W&B run starts before the model (its WandbCallback then logs into it, tracking.py),
        # and so before the memory phases: starting it is not counted as loading the model.
        self.tracker = start_tracking(self.arguments, self.spec)
        self.memory = MemoryMonitor(self.device, track_tensors=self.training.track_memory)
        self.memory.start_phase("model_load")  # lasts until the first training step
        if from_pretrained_kwargs.get("quantization_config") is not None:
            from_pretrained_kwargs.setdefault("device_map", {"": self.device})
        return load_model(self.arguments.model, self.model_config, **from_pretrained_kwargs)

    def trainer(self, model, optimizer=None) -> RecipeTrainer:
        """The Trainer for `model` (and `optimizer`; None: the one --optim names), with the run's callbacks."""
        training = self.training
        self.memory.model_loaded(model)
        # What the layers really compute in, read during the first training step (precision.py).
        self.precision_probe = AutocastProbe(model, self.device.type)
        # --auto_batch_size: the largest per-device batch that fits, same effective batch (autofit.py).
        self.auto_batch = (
            choose_batch_size(self.arguments, self.shape, self.model_config)
            if training.auto_batch_size
            else None
        )
        self.params_total, self.params_trainable = count_parameters(model)
        logger.info(
            "Model: %s, %s parameters, %s trainable",
            self.arguments.model.model_name_or_path,
            f"{self.params_total:,}",
            f"{self.params_trainable:,}",
        )
        name_fsdp_layer_classes(self.profile)
        names = self.data.labels.names
        self.class_weights = (
            class_weights_from(training.class_weights, self.tokenized["train"]["labels"], names)
            if training.class_weights
            else None
        )
        self.task_metrics = TaskMetrics(self.data.labels.problem_type, self.data.labels.num_labels)
        callbacks = [MemoryCallback(self.memory)]
        if training.early_stopping_patience is not None:
            callbacks.append(EarlyStoppingCallback(early_stopping_patience=training.early_stopping_patience))
        trainer = RecipeTrainer(
            model=model,
            args=training,
            train_dataset=self.tokenized["train"],
            eval_dataset=self.tokenized["validation"],
            processing_class=self.tokenizer,
            data_collator=padding_collator(self.tokenizer, self.arguments.data, self.device),
            compute_metrics=self.task_metrics,
            optimizers=(optimizer, None),
            callbacks=callbacks,
            class_weights=self.class_weights,
            problem_type=self.data.labels.problem_type,
        )
        self.tracker.watch(trainer)
        self._trainer = trainer
        return trainer

    def train(self) -> None:
        """Train; SIGINT/SIGTERM or a NaN loss end it with a RecipeError (no final model, no results.json)."""
        trainer = self._trainer
        if (
            self.training.overwrite_output_dir
            and self.resume_from is None
            and trainer.is_world_process_zero()
        ):
            clear_previous_run(self.training.output_dir, RESULTS_FILE)  # every check has passed by now
        if self.auto_batch is not None:
            self._train_result = train_with_out_of_memory_backoff(
                trainer,
                self.auto_batch,
                self.resume_from,
                on_out_of_memory=lambda: self.memory.stop_tracking(keep_breakdown=False),
            )
        else:
            self._train_result = trainer.train(resume_from_checkpoint=self.resume_from)
        trainer.log_metrics("train", self._train_result.metrics)

    def save(self) -> None:
        """The model (for LoRA: the adapter and the head) and the tokenizer in output_dir, on the main process."""
        self._trainer.save_model()

    def evaluate(self) -> dict[str, Any]:
        """Validation metrics; then the test split (--test_file, --test_split_name), scored if labelled.

        Multi-label: the metrics with every threshold at 0.5 (as in the evaluations during
        training), then one threshold per class tuned on these validation predictions
        (tasks.tune_thresholds). The predictions written, the per-class scores and the test split
        use the tuned thresholds, which are saved with the model.
        """
        trainer, labels = self._trainer, self.data.labels
        self._eval_metrics = trainer.evaluate()
        trainer.log_metrics("eval", self._eval_metrics)
        evaluation = trainer.last_evaluation  # each validation example once, gathered from every process
        self._eval_logits, references = _logits(evaluation.predictions), evaluation.label_ids
        self._thresholds, self._tuned_metrics = None, {}
        self._eval_references = references
        if labels.problem_type == MULTI_LABEL:
            self._thresholds = tune_thresholds(sigmoid(self._eval_logits), references)
            self.task_metrics.thresholds = self._thresholds
            tuned = self.task_metrics.scores(self._eval_logits, references)
            self._tuned_metrics = {f"eval_tuned_{name}": value for name, value in tuned.items()}
            logger.info(
                "Thresholds tuned on validation: %s", dict(zip(labels.names, self._thresholds, strict=True))
            )
        self._report = _per_class(self._eval_logits, references, labels, self._thresholds)
        self._test_metrics, self._test_logits = {}, None
        if "test" in self.tokenized:
            test = trainer.predict(self.tokenized["test"], metric_key_prefix="test")
            self._test_logits = _logits(test.predictions)
            if self.data.test_has_labels:
                self._test_metrics = test.metrics
                trainer.log_metrics("test", test.metrics)
        return self._eval_metrics

    def _evaluate_merged_model(self, references) -> dict[str, Any]:
        """--merge_adapter: the merged model's own scores on the validation split, and what it is.

        The merged model is what a user deploys without peft; for QLoRA it is not the evaluated
        model (adapters.describe_merged_model), so its own figures are measured rather than assumed.
        Main process only: it wrote the merged model. Multi-label classes at 0.5, as in eval_*.
        """
        from pathlib import Path

        merged_dir = Path(self.training.output_dir) / MERGED_SUBDIR
        if (
            not getattr(self.options, "merge_adapter", False)
            or not self.is_main_process
            or not merged_dir.is_dir()
        ):
            return {}
        model = load_trained_model(merged_dir, device=self.device).eval()
        with autocast_for(self.precision_probe.observed or self.precision, self.device.type):
            logits = batch_logits(
                model,
                self.tokenized["validation"],
                self.tokenizer,
                self.arguments.data,
                self.device,
                self.training.per_device_eval_batch_size,
                progress=not self.training.disable_tqdm,
            )
        del model
        scores = self.task_metrics.scores(
            logits, references, thresholds=[DEFAULT_THRESHOLD] * len(self.data.labels.names)
        )
        what = describe_merged_model(read_base_quantization(self.training.output_dir))
        logger.info(
            "Merged model in %s, %s: %s",
            merged_dir,
            what.split(". ")[0],
            ", ".join(f"{METRIC_TITLES[name]} {value:.4f}" for name, value in scores.items()),
        )
        return {"merged_model": what, **{f"merged_eval_{name}": value for name, value in scores.items()}}

    def __exit__(self, error_type, error, traceback) -> bool:
        if error_type is None:
            self._finish()
        elif self.memory is not None and self._trainer is not None:
            self.precision_probe.remove()
        return False  # an exception goes on to run_main (or the caller)

    # -- the bookkeeping -----------------------------------------------------------------------------

    def _finish(self) -> None:
        """results.json and the W&B summary, from a finished run."""
        trainer, training = self._trainer, self.training
        if trainer is None or self._train_result is None or self._eval_metrics is None:
            raise RuntimeError("A recipe's main() must build the Trainer, train and evaluate inside the run.")
        memory_results = self.memory.finish()
        for line in self.memory.summary_lines(memory_results):
            logger.info(line)
        self.precision_probe.remove()
        precision = self.precision_probe.observed or self.precision  # resumed at the end: nothing ran
        if precision != self.precision:
            logger.warning("Asked for %s, but the model computed in %s.", self.precision, precision)

        real_tokens, all_tokens = trainer.token_counts()  # the run's last collective step
        # After it: the other processes need not wait for the main one, which alone scores the merged model.
        merged = self._evaluate_merged_model(self._eval_references)
        train_metrics, eval_metrics = self._train_result.metrics, self._eval_metrics
        runtime = train_metrics["train_runtime"]
        results = {
            "recipe": self.spec.name,
            "model_name_or_path": self.arguments.model.model_name_or_path,
            "dataset": self.data.description,
            "problem_type": self.data.labels.problem_type,
            "num_labels": self.data.labels.num_labels,
            # Single-label and multi-label (exact match) accuracy and macro-F1; null for regression.
            "eval_accuracy": eval_metrics.get("eval_accuracy"),
            "eval_f1": eval_metrics.get("eval_f1"),
            # The task's other metrics (tasks.TASK_METRICS): micro-F1, or MSE, Pearson and Spearman.
            **{
                eval_key(name): eval_metrics.get(eval_key(name))
                for name in TASK_METRICS[self.data.labels.problem_type]
            },
            "eval_loss": eval_metrics.get("eval_loss"),
            # Multi-label: the thresholds tuned on validation, and the validation metrics at those
            # thresholds (optimistic: tuned and scored on the same split; the test split is not).
            "label_thresholds": dict(zip(self.data.labels.names, self._thresholds, strict=True))
            if self._thresholds
            else None,
            **self._tuned_metrics,
            # --merge_adapter: what the merged model is, and its own validation metrics (thresholds 0.5).
            **merged,
            # Counted from the predictions gathered over all processes (metrics.py), not len(dataset): a
            # duplicated or dropped validation example under several processes would show here.
            "eval_samples": eval_metrics["eval_samples"],
            "eval_split": self.data.split_sources["validation"],
            "text_columns": list(self.data.text_columns),
            # Per class on the validation split: precision, recall, F1, support; rows true, columns predicted.
            **self._report,
            **({"test_split": self.data.split_sources["test"]} if "test" in self.tokenized else {}),
            **{key: value for key, value in self._test_metrics.items() if key.startswith("test_")},
            "train_samples": len(self.tokenized["train"]),
            "train_loss": train_metrics.get("train_loss"),
            "train_steps": trainer.state.global_step,
            # --early_stopping_patience: the checkpoint whose weights were kept, and its metric.
            "best_step": _step_of(trainer.state.best_model_checkpoint)
            if training.load_best_model_at_end
            else None,
            "best_metric": trainer.state.best_metric if training.load_best_model_at_end else None,
            "class_weights": dict(zip(self.data.labels.names, self.class_weights, strict=True))
            if self.class_weights
            else None,
            "epochs": trainer.state.epoch,
            "train_runtime_s": round(runtime, 3),
            "train_samples_per_s": train_metrics.get("train_samples_per_second"),
            "train_tokens_per_s": round(real_tokens / runtime, 2) if runtime > 0 else None,
            "pad_ratio": round(1 - real_tokens / all_tokens, 4) if all_tokens else None,
            "params_total": self.params_total,
            "params_trainable": self.params_trainable,
            "model_type": self.model_config.model_type,
            "attn_implementation": self.arguments.model.attn_implementation,
            # LoRA: the layers adapted (resolved for the family) and the modules trained whole.
            "lora_target_modules": _listed(self.adapted_modules) if self.shape.adapters is not None else None,
            "modules_trained_in_full": list(getattr(trainer.model, "modules_to_save", None) or []) or None,
            # What the optimizer's state tensors hold after training, measured (see optimizers.py).
            **optimizer_state_summary(trainer.optimizer, trainer.model),
            **peak_memory(self.device, self.memory),
            **memory_results,
            "auto_batch_size": self.auto_batch.to_dict() if self.auto_batch is not None else None,
            "device": describe_device(self.device),
            "num_processes": training.world_size,
            # Read from the autocast state inside the model during training, not from the flags.
            "precision": precision,
            "precision_reason": training.precision_choice.reason,
            # QLoRA: the dtype of the 4-bit layers' matmuls (bitsandbytes' compute dtype); else None.
            "quantized_compute_dtype": self.precision_probe.quantized_compute,
            "versions": library_versions(),
            "created_at": timestamp(),
            "output_dir": str(training.output_dir),
            "config": self.arguments.to_dict(),
        }
        if trainer.is_world_process_zero():
            self._write_predictions()
            path = write_results(training.output_dir, results)
            logger.info(
                "Done: %s, %.1f samples/s, peak memory %.2f GiB. Model and %s in %s",
                ", ".join(
                    f"{METRIC_TITLES[name]} {results[eval_key(name)]:.4f}"
                    for name in TASK_METRICS[self.data.labels.problem_type]
                    if results[eval_key(name)] is not None
                ),
                results["train_samples_per_s"],
                results["peak_memory_gib"],
                path.name,
                training.output_dir,
            )
        self.tracker.finish(results)  # every results.json key into the W&B summary, same names
        self.results = results

    def _write_predictions(self) -> None:
        """Validation (and test) predictions as JSON Lines; the thresholds of a multi-label model next to it;
        the validation confusion matrix as a PNG (single-label)."""
        from pathlib import Path

        from recipes_lib.data.files import write_jsonl

        output_dir, labels = Path(self.training.output_dir), self.data.labels

        def rows(logits):
            return prediction_rows(logits, labels.names, labels.problem_type, self._thresholds)

        write_jsonl(output_dir / EVAL_PREDICTIONS_FILE, rows(self._eval_logits))
        if self._test_logits is not None:
            write_jsonl(output_dir / TEST_PREDICTIONS_FILE, rows(self._test_logits))
        if self._thresholds is not None:
            for directory in (output_dir, output_dir / MERGED_SUBDIR):
                if directory.is_dir():
                    write_thresholds(
                        directory, labels.names, self._thresholds, self.data.split_sources["validation"]
                    )
        if self._report["confusion_matrix"] is not None:
            title = f"{self.spec.name}, {self.data.split_sources['validation']}"
            draw_confusion_matrix(self._report["confusion_matrix"], output_dir / CONFUSION_MATRIX_PNG, title)


def _step_of(checkpoint: str | None) -> int | None:
    return int(checkpoint.rsplit("-", 1)[-1]) if checkpoint else None


def _per_class(logits, references, labels, thresholds) -> dict[str, Any]:
    """Per-class precision, recall, F1 and the confusion matrix (single-label); none for regression."""
    if labels.problem_type == REGRESSION:
        return {"per_class": None, "confusion_matrix": None}
    if labels.problem_type == MULTI_LABEL:
        predictions = predicted_labels(sigmoid(logits), thresholds)
        return per_class_report(predictions, references.round().astype(int), labels.names)
    return per_class_report(logits.argmax(-1), references, labels.names)


def check_task_options(training, labels) -> None:
    """Options that only fit some tasks, refused before the data is tokenized and the weights load."""
    if training.class_weights and labels.problem_type != SINGLE_LABEL:
        raise ConfigError(
            f"--class_weights weights the classes of a single-label task, but this data is {labels.problem_type} "
            "(from its labels or --problem_type). Leave --class_weights out."
        )
    if training.label_smoothing_factor and labels.problem_type != SINGLE_LABEL:
        raise ConfigError(
            f"--label_smoothing_factor {training.label_smoothing_factor} smooths a softmax over classes, but this "
            f"data is {labels.problem_type} (from its labels or --problem_type). Leave it out (or set it to 0)."
        )
    if training.class_weights:  # a wrong count fails here
        class_weights_from(training.class_weights, [0], labels.names, check_only=True)
    metric = training.metric_for_best_model
    allowed = ("loss", *TASK_METRICS[labels.problem_type])
    if metric is not None and metric.removeprefix("eval_") not in allowed:
        raise ConfigError(
            f"--metric_for_best_model is '{metric}', which a {labels.problem_type} run does not compute; it "
            f"reports: {', '.join(allowed)}. Pick one of those."
        )
    if metric is not None and metric.removeprefix("eval_") == "mse":
        # The Trainer takes every metric but a "*loss" as greater-is-better; a squared error is not.
        training.greater_is_better = False


def _logits(predictions):
    return predictions[0] if isinstance(predictions, tuple) else predictions


def _listed_text(value) -> str:
    return ", ".join(value) if isinstance(value, tuple) else str(value)


def _listed(value):
    """A tuple as the list JSON writes (results.json and the returned results agree); a string as is."""
    return list(value) if isinstance(value, tuple) else value


def run_main(main: Callable[[list[str] | None], Any], argv: list[str] | None = None) -> Any:
    """Call a recipe's `main(argv)`; a user error becomes one paragraph on stderr and its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        return main(argv)
    except RecipeError as error:
        if wants_traceback(argv):
            raise
        hint = "\n(run again with --debug for the traceback)" if error.offer_traceback else ""
        print(f"\n{error.heading}: {error}{hint}", file=sys.stderr)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        # Ctrl-C before training started (nothing to save yet), or a second Ctrl-C during it.
        print("\ninterrupted: stopped at once; no new checkpoint was written.", file=sys.stderr)
        sys.exit(130)
