"""`RecipeRun`: the bookkeeping of one recipe run, around the Hugging Face objects the script builds.

The recipe script builds the datasets, the model and the Trainer itself, and calls `train`,
`save_model` and `evaluate` on it. The run supplies what the Trainer takes through its own
extension points (`args`, `compute_metrics`, `compute_loss_func`, `callbacks`) and does, at the
steps the script names (in order in run/__init__.py; each method says what it does), what a run
must do around them.

The parsed arguments are never changed. What the run resolves comes back as copies
(`dataclasses.replace`): the TrainingArguments the script passes to the Trainer in view, and the
`run.model_args` the script loads the model with, and the run's own record of what ran
(`run.arguments`: the attention kernel and the task `auto` resolved, the precision decided),
which results.json's and W&B's config show. Leaving the block through an exception writes no
results.json: a results file always belongs to a finished run.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import replace
from typing import Any

import datasets
import transformers
from transformers import EarlyStoppingCallback, set_seed

from recipes_lib.config.arguments import ParsedArguments, RecipeTrainingArguments
from recipes_lib.config.recipe_spec import RecipeSpec, TrainingShape
from recipes_lib.config.validation import check_task_options, claim_output_dir
from recipes_lib.data.loading import load_classification_data
from recipes_lib.data.long_text import document_ids
from recipes_lib.data.tokenize import tokenize
from recipes_lib.memory.monitor import MemoryCallback, MemoryMonitor
from recipes_lib.memory.peaks import peak_memory
from recipes_lib.modeling.families import ArchitectureProfile
from recipes_lib.modeling.loading import (
    check_model_support,
    count_parameters,
    load_model_config,
    load_tokenizer,
    pad_with_eos_if_missing,
)
from recipes_lib.results import RESULTS_FILE, describe_device
from recipes_lib.run.metrics import RunMetrics
from recipes_lib.run.record import RunSettings, evaluate_merged_model, finish_run, publish_results
from recipes_lib.tracking.wandb_run import Tracker, start_tracking
from recipes_lib.training.callbacks import (
    CollapseWarning,
    LastEpochEvaluation,
    PrecisionProbe,
    TokenCounter,
    final_metrics,
)
from recipes_lib.training.checkpoints import clear_previous_run, resolve_resume_checkpoint
from recipes_lib.training.losses import class_weights_from, weighted_loss

logger = logging.getLogger("recipes_lib")


def setup_logging(arguments: ParsedArguments) -> None:
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S", stream=sys.stdout
    )
    # Only the main process talks at INFO; the others would print every line N times.
    logger.setLevel(logging.INFO if arguments.training.should_log else logging.WARNING)
    log_level = arguments.training.get_process_log_level()
    datasets.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.set_verbosity(log_level)


def name_fsdp_layer_classes(profile: ArchitectureProfile) -> None:
    """Under an FSDP launch, make the family's repeated layer the unit FSDP wraps.

    accelerate wraps the layer classes a model declares (_no_split_modules), and most encoders
    declare none. An fsdp_transformer_layer_cls_to_wrap in the accelerate config still wins.
    `accelerate launch` hands its FSDP settings to the process as FSDP_* variables, which
    accelerate reads when the Trainer builds its Accelerator; the layer class goes beside them.
    (Through TrainingArguments' fsdp_config instead, the Trainer would build the FSDP plugin from
    those arguments and their defaults, overriding the accelerate config's other settings.)
    """
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        os.environ.setdefault("FSDP_TRANSFORMER_CLS_TO_WRAP", ",".join(profile.layer_classes))


def listed_text(value) -> str:
    return ", ".join(value) if isinstance(value, tuple) else str(value)


class RecipeRun:
    """One run of a recipe: what the Trainer is handed, and the bookkeeping at the steps the script names."""

    def __init__(self, arguments: ParsedArguments, spec: RecipeSpec):
        # What ran: the parsed arguments (never changed) at first; load_data and resolve replace it by copies.
        self.arguments = arguments
        self.spec = spec
        self.resume_from: str | None = None
        # Filled by load_data: what the data and the model's config.json say.
        self.tokenizer = None
        self.model_config = None
        self.data = None  # its labels, split sources and (once tokenized) its tokenized splits
        self.compute_metrics: RunMetrics | None = None  # the Trainer's compute_metrics
        self.tracker = Tracker()  # the W&B run (start_tracking)
        self.memory: MemoryMonitor | None = None  # the memory phases
        self.batch_choice = None  # --auto_batch_size: what resolve chose
        # The run's other callbacks (token counts, precision probe, last evaluation) live in the
        # Trainer's callback list, where final_metrics and write_results find them.

    @property
    def shape(self) -> TrainingShape:
        """What the recipe trains (config/recipe_spec.py): what the planner and --auto_batch_size need;
        a LoRA recipe's targets resolved for the model's family once load_data has read config.json."""
        shape = self.spec.shape(self.arguments.recipe_options.get(self.spec.options))
        if shape.adapters is None or self.model_config is None:
            return shape
        from recipes_lib.modeling.adapters import resolve_lora_targets  # a LoRA recipe has loaded it

        return replace(shape, adapters=resolve_lora_targets(shape.adapters, self.model_config.model_type))

    @property
    def compute_loss(self):
        """The Trainer's compute_loss_func: --class_weights' weighted cross-entropy; else None (the model's loss)."""
        metrics = self.compute_metrics
        return (
            None
            if metrics is None
            else weighted_loss(metrics.problem_type, metrics.class_weights, metrics.label_smoothing)
        )

    @property
    def model_args(self):
        """The model arguments with the attention kernel the family takes (None resolved), after load_data."""
        return self.arguments.model

    @property
    def precision(self) -> str:
        """'bf16', 'fp16' or 'fp32' (config/precision.py), final once `load_data` has read the model family."""
        return self.arguments.training.precision

    @property
    def is_main_process(self) -> bool:
        return self.arguments.training.process_index == 0

    def __enter__(self) -> RecipeRun:
        training = self.arguments.training
        setup_logging(self.arguments)
        if training.push_to_hub:  # no token or offline: stop before any download
            from recipes_lib.tracking.hub import check_push_to_hub  # loaded only under --push_to_hub

            check_push_to_hub(training)
        # `last` means the newest complete checkpoint (training/checkpoints.py); a bad value fails here, not after loading.
        self.resume_from = resolve_resume_checkpoint(
            training.resume_from_checkpoint, training.output_dir, RESULTS_FILE
        )
        set_seed(training.seed)
        self.output_lock = claim_output_dir(training)  # locked, then checked; held until __exit__
        return self

    def __exit__(self, error_type, error, traceback) -> bool:
        self.output_lock.close()
        return False  # an exception goes on to run_main (or the caller)

    def load_data(self, train_file: str | None = None) -> datasets.DatasetDict:
        """The tokenized splits (train, validation, and test if given), after every check that needs no weights.

        Cheapest checks first. The tokenizer and config.json are small: a wrong model name or a
        max_seq_length the model cannot take fails before a dataset download. The model's family
        then decides the training precision (DeBERTa stays out of automatic fp16). Every check on
        columns and labels runs before tokenization and before the model weights are fetched; the
        labels decide the task (`problem_type`), which the model config, the metrics and the loss
        follow, and which `run.arguments` (a copy) records in place of `auto`.

        `train_file`: read the training rows from this file instead of --train_file (distillation's
        copy of its labelled rows); the record still names --train_file.
        """
        model_args, data_args = self.arguments.model, self.arguments.data
        self.tokenizer = load_tokenizer(model_args)
        profile = self._check_model_family(load_model_config(model_args))
        training = self.arguments.training  # with the family's precision
        read = data_args if train_file is None else replace(data_args, train_file=train_file)
        self.data = load_classification_data(read, cache_dir=model_args.cache_dir, seed=training.seed)
        labels = self.data.labels
        # 'auto' resolved, in the run's copy: the config in results.json then says what ran, as W&B's does.
        self.arguments = replace(self.arguments, data=replace(data_args, problem_type=labels.problem_type))
        self.model_config = load_model_config(self.model_args, labels)
        pad_with_eos_if_missing(self.tokenizer, self.model_config)  # a decoder's (GPT-2's): before tokenizing
        logger.info(
            "Data: %s, %d train / %d validation examples, %d classes (%s), text: %s",
            self.data.description,
            len(self.data.raw["train"]),
            len(self.data.raw["validation"]),
            labels.num_labels,
            ", ".join(labels.names[:10]),
            " + ".join(self.data.text_columns),
        )
        check_task_options(training, labels)  # before tokenizing and loading weights
        tokenized = tokenize(
            self.data, self.tokenizer, read, training.main_process_first, model_limit=profile.max_length
        )
        weights = None
        if training.class_weights:  # compute_loss is then the weighted cross-entropy
            weights = class_weights_from(training.class_weights, tokenized["train"]["labels"], labels.names)
        metrics = self.compute_metrics = RunMetrics(
            labels.problem_type, labels.num_labels, weights, training.label_smoothing_factor
        )
        # sliding_window: metrics combine the validation split's windows into documents (the test
        # split's while it is predicted: record.py).
        metrics.document_ids = document_ids(tokenized["validation"])
        metrics.test_document_ids = document_ids(tokenized["test"]) if "test" in tokenized else None
        metrics.window_pooling = data_args.window_pooling
        return tokenized

    def _check_model_family(self, base_config) -> ArchitectureProfile:
        """What the model's family supports (modeling/families.py), from config.json alone: attention kernel,
        sequence length, LoRA targets; then the precision for that family (in the run's copy)."""
        # check_model_support fills in the family's attention kernel: in the run's copy, which the
        # script hands load_model as run.model_args.
        model_args, training = replace(self.arguments.model), self.arguments.training
        profile = check_model_support(model_args, base_config, self.arguments.data.max_seq_length)
        name_fsdp_layer_classes(profile)
        self.arguments = replace(self.arguments, model=model_args)
        adapted = self.shape.adapters
        if adapted is not None:  # a LoRA recipe, which has loaded modeling.adapters already
            from recipes_lib.modeling.adapters import check_lora_targets

            adapted = check_lora_targets(adapted, base_config)
        choice = training.precision_for(base_config.model_type)
        if choice != training.precision_choice:  # automatic fp16 for DeBERTa: fp32
            self.arguments = replace(self.arguments, training=training.resolved(choice))
        logger.info(
            "%s (%s): attention %s, precision %s (%s)%s",
            profile.family,
            base_config.model_type,
            model_args.attn_implementation,
            self.precision,
            choice.reason,
            f", LoRA on {listed_text(adapted.target_modules)}" if adapted is not None else "",
        )
        return profile

    def start_tracking(self) -> None:
        """Start the W&B run (main process; offline without an API key) and the memory phases.

        The W&B run starts before the model, so the Trainer's WandbCallback logs into it, and so
        before the memory phases: starting it is not counted as loading the model.
        """
        self.tracker = start_tracking(self.arguments, self.spec)
        self._start_memory_phases()

    def _start_memory_phases(self) -> None:
        training = self.arguments.training
        self.memory = MemoryMonitor(training.device, track_tensors=training.track_memory)
        self.memory.start_phase("model_load")  # lasts until the first training step

    def resolve(self, training: RecipeTrainingArguments) -> RecipeTrainingArguments:
        """The TrainingArguments to hand the Trainer: a copy of `training` with what the run resolved.

        - the precision the model's family takes (load_data decided it: DeBERTa stays out of
          automatic fp16);
        - --auto_batch_size: the largest per-device batch the planner fits in this device's free
          memory, with gradient accumulation keeping the effective batch (training/autofit.py).
          Call it with the model loaded: the free memory is read here.

        `training` (the parsed arguments, or a copy the script made) is left as it is.
        """
        changes = {}
        if training.auto_batch_size:
            from recipes_lib.training.autofit import choose_batch_size  # loads the planner only when asked

            self.batch_choice = choose_batch_size(
                replace(self.arguments, training=training), self.shape, self.model_config
            )
            changes = {
                "per_device_train_batch_size": self.batch_choice.batch_size,
                "gradient_accumulation_steps": self.batch_choice.accumulation,
            }
        resolved = training.resolved(self.arguments.training.precision_choice, **changes)
        self.arguments = replace(self.arguments, training=resolved)
        return resolved

    def callbacks(self, model) -> list:
        """The run's Trainer callbacks: memory phases, token counts, the precision probe, the last
        evaluation (for final_metrics), W&B's throughput and memory curves, and early stopping under
        --early_stopping_patience.

        Without `start_tracking()` first (no W&B run of the run's own), the memory phases start here.
        """
        training = self.arguments.training
        if self.memory is None:
            self._start_memory_phases()
        total, trainable = count_parameters(model)
        logger.info(
            "Model: %s, %s parameters, %s trainable",
            self.arguments.model.model_name_or_path,
            f"{total:,}",
            f"{trainable:,}",
        )
        tokens = TokenCounter()
        callbacks = [
            MemoryCallback(self.memory),
            tokens,
            PrecisionProbe(training.device.type),
            LastEpochEvaluation(),
            CollapseWarning(),  # issue #50: a model whose outputs do not depend on the input, said at once
            *self.tracker.callbacks(tokens),
        ]
        if training.early_stopping_patience is not None:
            callbacks.append(EarlyStoppingCallback(early_stopping_patience=training.early_stopping_patience))
        return callbacks

    def clear_previous_run(self) -> None:
        """--overwrite_output_dir: delete the previous run's files now that every check has passed."""
        training = self.arguments.training
        if training.overwrite_output_dir and self.resume_from is None and self.is_main_process:
            clear_previous_run(training.output_dir, RESULTS_FILE)

    def final_metrics(self, trainer) -> dict[str, Any]:
        """The final evaluation: the last epoch's, reused when the weights are unchanged since it ran
        (same step, same tensors, none written in place); else `trainer.evaluate()`, a new pass."""
        return final_metrics(trainer, run_callback(trainer, LastEpochEvaluation))

    def write_results(self, trainer, train_result, eval_metrics: dict, merged=None) -> dict[str, Any]:
        """Everything a finished run writes (run/record.py): predictions, results.json, the W&B summary, the
        model card, and --push_to_hub's second push. `merged`: --merge_adapter's model (save_adapter_extras), scored in memory.
        Returns the results (results.json's keys)."""
        probe = run_callback(trainer, PrecisionProbe)
        memory = self.memory.finish()
        for line in self.memory.summary_lines(memory):
            logger.info(line)
        # A run resumed at its end ran no layer: the planned precision.
        precision = probe.observed or self.precision
        if precision != self.precision:
            logger.warning("Asked for %s, but the model computed in %s.", self.precision, precision)
        settings = RunSettings(
            recipe=self.spec.name,
            arguments=self.arguments,
            data=self.data,
            model_type=self.model_config.model_type,
            shape=self.shape,
            precision=precision,
            quantized_compute=probe.quantized_compute,
            memory={**peak_memory(trainer.args.device, self.memory), **memory},
            # The run's last collective step.
            tokens=run_callback(trainer, TokenCounter).totals(trainer.accelerator),
            device=describe_device(trainer.args.device),
            batch_choice=self.batch_choice,
            merged=evaluate_merged_model(trainer, merged, self.data, self.arguments.data),
        )
        results = finish_run(trainer, train_result, eval_metrics, settings)
        self.tracker.finish(results)  # every results.json key into the W&B summary, same names
        publish_results(trainer, results)  # the model card, the closing lines, --push_to_hub
        return results


def run_callback(trainer, kind: type):
    """The run's callback of this class among the Trainer's (run.callbacks(model) put it there)."""
    found = next(
        (callback for callback in trainer.callback_handler.callbacks if isinstance(callback, kind)), None
    )
    if found is None:
        raise RuntimeError(
            f"The Trainer has no {kind.__name__}: hand it callbacks=run.callbacks(model) (with your own "
            "beside them, if any); the run's record is fed by them."
        )
    return found
