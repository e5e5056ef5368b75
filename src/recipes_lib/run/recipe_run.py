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
from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_lib.config.validation import check_output_dir, check_task_options
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
from recipes_lib.results import RESULTS_FILE
from recipes_lib.run.metrics import RunMetrics
from recipes_lib.run.record import RunSettings, finish_run, push_finished_run
from recipes_lib.tracking.hub import check_push_to_hub
from recipes_lib.tracking.wandb_run import Tracker, start_tracking
from recipes_lib.training.callbacks import LastEpochEvaluation, PrecisionProbe, TokenCounter, final_metrics
from recipes_lib.training.checkpoints import clear_previous_run, resolve_resume_checkpoint
from recipes_lib.training.losses import WeightedCrossEntropy, class_weights_from

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
        # What the planner and --auto_batch_size need of this recipe (config/recipe_spec.py).
        self.shape = spec.shape(arguments.recipe_options.get(spec.options))  # None: the recipe has none
        self.resume_from: str | None = None
        # Filled by load_data: what the data and the model's config.json say.
        self.tokenizer = None
        self.model_config = None
        self.data = None  # its labels, split sources and (once tokenized) its tokenized splits
        # What the Trainer is handed (compute_metrics, compute_loss_func, callbacks).
        self.compute_metrics: RunMetrics | None = None
        self.compute_loss: WeightedCrossEntropy | None = None
        self.tokens = TokenCounter()
        self.precision_probe = PrecisionProbe(self.training.device.type)
        self.last_evaluation = LastEpochEvaluation()
        self.tracker = Tracker()
        self.memory: MemoryMonitor | None = None
        self.batch_choice = None  # --auto_batch_size: what resolve chose

    @property
    def training(self) -> RecipeTrainingArguments:
        """The training arguments as the run has resolved them so far (the parsed ones are not changed)."""
        return self.arguments.training

    @property
    def model_args(self):
        """The model arguments with the attention kernel the family takes (None resolved), after load_data."""
        return self.arguments.model

    @property
    def precision(self) -> str:
        """'bf16', 'fp16' or 'fp32' (config/precision.py), final once `load_data` has read the model family."""
        return self.training.precision_choice.precision

    @property
    def is_main_process(self) -> bool:
        return self.training.process_index == 0

    def __enter__(self) -> RecipeRun:
        setup_logging(self.arguments)
        check_output_dir(self.training)
        check_push_to_hub(self.training)  # no token or offline: stop before any download
        # `last` means the newest complete checkpoint (training/checkpoints.py); a bad value fails here, not after loading.
        self.resume_from = resolve_resume_checkpoint(
            self.training.resume_from_checkpoint, self.training.output_dir, RESULTS_FILE
        )
        set_seed(self.training.seed)
        return self

    def __exit__(self, error_type, error, traceback) -> bool:
        self.precision_probe.remove()
        self.tokens.remove()
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
        read = data_args if train_file is None else replace(data_args, train_file=train_file)
        self.data = load_classification_data(read, cache_dir=model_args.cache_dir, seed=self.training.seed)
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
        check_task_options(self.training, labels)  # before tokenizing and loading weights
        tokenized = tokenize(
            self.data, self.tokenizer, read, self.training.main_process_first, model_limit=profile.max_length
        )
        weights = None
        if self.training.class_weights:
            weights = class_weights_from(
                self.training.class_weights, tokenized["train"]["labels"], labels.names
            )
            self.compute_loss = WeightedCrossEntropy(weights, self.training.label_smoothing_factor)
        self.compute_metrics = RunMetrics(
            labels.problem_type, labels.num_labels, weights, self.training.label_smoothing_factor
        )
        # sliding_window: metrics combine the validation split's windows into documents (the test
        # split's while it is predicted: record.py).
        self.compute_metrics.document_ids = document_ids(tokenized["validation"])
        self.compute_metrics.window_pooling = data_args.window_pooling
        return tokenized

    def _check_model_family(self, base_config) -> ArchitectureProfile:
        """What the model's family supports (modeling/families.py), from config.json alone: attention kernel,
        sequence length, LoRA targets; then the precision for that family (in the run's copy)."""
        # check_model_support fills in the family's attention kernel: in the run's copy, which the
        # script hands load_model as run.model_args.
        model_args = replace(self.arguments.model)
        profile = check_model_support(model_args, base_config, self.arguments.data.max_seq_length)
        name_fsdp_layer_classes(profile)
        self.arguments = replace(self.arguments, model=model_args)
        if self.shape.adapters is not None:  # a LoRA recipe, which has loaded modeling.adapters already
            from recipes_lib.modeling.adapters import check_lora_targets

            self.shape = replace(self.shape, adapters=check_lora_targets(self.shape.adapters, base_config))
        choice = self.training.precision_for(base_config.model_type)
        if choice != self.training.precision_choice:  # automatic fp16 for DeBERTa: fp32
            self.arguments = replace(self.arguments, training=self.training.resolved(choice))
        adapted = self.shape.adapters
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
        self.memory = MemoryMonitor(self.training.device, track_tensors=self.training.track_memory)
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
        resolved = training.resolved(self.training.precision_choice, **changes)
        self.arguments = replace(self.arguments, training=resolved)
        return resolved

    def callbacks(self, model) -> list:
        """The run's Trainer callbacks: memory phases, token counts, the precision probe, W&B's
        throughput and memory curves, and early stopping under --early_stopping_patience.

        Without `start_tracking()` first (no W&B run of the run's own), the memory phases start here.
        """
        if self.memory is None:
            self._start_memory_phases()
        total, trainable = count_parameters(model)
        logger.info(
            "Model: %s, %s parameters, %s trainable",
            self.arguments.model.model_name_or_path,
            f"{total:,}",
            f"{trainable:,}",
        )
        callbacks = [
            MemoryCallback(self.memory),
            self.tokens,
            self.precision_probe,
            self.last_evaluation,
            *self.tracker.callbacks(self.tokens),
        ]
        if self.training.early_stopping_patience is not None:
            callbacks.append(
                EarlyStoppingCallback(early_stopping_patience=self.training.early_stopping_patience)
            )
        return callbacks

    def clear_previous_run(self) -> None:
        """--overwrite_output_dir: delete the previous run's files now that every check has passed."""
        if self.training.overwrite_output_dir and self.resume_from is None and self.is_main_process:
            clear_previous_run(self.training.output_dir, RESULTS_FILE)

    def final_metrics(self, trainer) -> dict[str, Any]:
        """The final evaluation: the last epoch's, reused when the weights are unchanged since it ran
        (same step, same tensors, none written in place); else `trainer.evaluate()`, a new pass."""
        return final_metrics(trainer, self.last_evaluation)

    def write_results(self, trainer, train_result, eval_metrics: dict, merged=None) -> dict[str, Any]:
        """Everything a finished run writes (run/record.py), then the W&B summary and --push_to_hub's
        second push. `merged`: --merge_adapter's model (save_adapter_extras), scored in memory.
        Returns the results (results.json's keys)."""
        if self.memory is None:  # the script handed the Trainer none of run.callbacks()
            raise RuntimeError(
                "Hand the Trainer callbacks=run.callbacks(model): the run's memory phases start there."
            )
        memory = self.memory.finish()
        for line in self.memory.summary_lines(memory):
            logger.info(line)
        self.precision_probe.remove()
        # A run resumed at its end ran no layer: the planned precision.
        precision = self.precision_probe.observed or self.precision
        if precision != self.precision:
            logger.warning("Asked for %s, but the model computed in %s.", self.precision, precision)
        settings = RunSettings(
            recipe=self.spec.name,
            arguments=self.arguments,
            data=self.data,
            model_type=self.model_config.model_type,
            shape=self.shape,
            precision=precision,
            precision_reason=self.training.precision_choice.reason,
            quantized_compute=self.precision_probe.quantized_compute,
            memory={**peak_memory(self.training.device, self.memory), **memory},
            tokens=self.tokens.totals(trainer.accelerator),  # the run's last collective step
            batch_choice=self.batch_choice,
            merged=merged,
        )
        results = finish_run(trainer, train_result, eval_metrics, settings)
        self.tracker.finish(results)  # every results.json key into the W&B summary, same names
        push_finished_run(trainer, results)
        return results
