"""Everything a run decides before its model loads (family and attention kernel, precision, task,
--auto_batch_size's batch), decided once from config.json, the arguments and the machine, and returned
as frozen values with what they imply (tokenizer, model config, tokenized data, metrics, loss, the one
TrainingArguments). `Prepared.arguments` is a new record of what runs; the parsed arguments stay as they are.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from dataclasses import dataclass, replace
from typing import Any

from recipes_lib.config.arguments import ParsedArguments, RecipeTrainingArguments
from recipes_lib.config.precision import PrecisionChoice, decide_precision
from recipes_lib.config.recipe_options import LoraArguments
from recipes_lib.config.recipe_spec import LoraShape
from recipes_lib.config.tasks import REGRESSION
from recipes_lib.config.validation import check_task_options
from recipes_lib.data.loading import ClassificationData, load_classification_data
from recipes_lib.data.long_text import document_ids
from recipes_lib.data.tokenize import tokenize
from recipes_lib.modeling.loading import (
    check_model_support,
    load_model_config,
    load_tokenizer,
    pad_with_eos_if_missing,
)
from recipes_lib.run.metrics import RunMetrics
from recipes_lib.training.losses import weighted_loss

logger = logging.getLogger("recipes_lib")


@dataclass(frozen=True)
class Prepared:
    """What `prepare` decided and loaded: the values the script hands the model loader and the Trainer."""

    arguments: ParsedArguments  # what runs: the kernel, task, precision and batch decided (a new record)
    precision: PrecisionChoice  # its reason goes to the log and results.json
    tokenizer: Any
    model_config: Any  # config.json with the data's labels and problem_type
    data: ClassificationData  # labels, split sources, raw and tokenized splits
    adapters: LoraShape | None  # a LoRA recipe's, targets resolved for the family (add_lora takes them)
    metrics: RunMetrics  # the Trainer's compute_metrics
    loss: Any  # the Trainer's compute_loss_func: --class_weights' weighted loss (BCE for multi-label); None: the model's
    batch_choice: Any = None  # --auto_batch_size: the batch it starts at (training/autofit.py)

    @property
    def model_args(self):
        """The model arguments with the attention kernel the family takes."""
        return self.arguments.model

    @property
    def training_args(self) -> RecipeTrainingArguments:
        """The Trainer's arguments: the parsed ones with the precision, device settings and batch decided."""
        return self.arguments.training


def prepare(args: ParsedArguments, train_file: str | None = None) -> Prepared:
    """Decide family, attention kernel, precision, task and batch once; load and tokenize the data. `train_file`:
    read the training rows from it instead of --train_file (distillation's copy); the record names --train_file."""
    tokenizer = load_tokenizer(args.model)
    base_config = load_model_config(args.model)
    profile, attention = check_model_support(args.model, base_config, args.data.max_seq_length)
    adapters = lora_adapters(args, base_config)
    precision, device_settings = decide_precision(args.training, base_config.model_type)
    logger.info(
        "%s (%s): attention %s, precision %s (%s)%s",
        profile.family,
        base_config.model_type,
        attention,
        precision.precision,
        precision.reason,
        f", LoRA on {listed_text(adapters.target_modules)}" if adapters is not None else "",
    )
    model_args = replace(args.model, attn_implementation=attention)

    read = args.data if train_file is None else replace(args.data, train_file=train_file)
    data = load_classification_data(read, cache_dir=args.model.cache_dir, seed=args.training.seed)
    labels = data.labels
    model_config = load_model_config(model_args, labels)
    pad_with_eos_if_missing(tokenizer, model_config)  # a decoder's (GPT-2's): before tokenizing
    logger.info(
        "Data: %s, %d train / %d validation examples, %s, text: %s",
        data.description,
        len(data.raw["train"]),
        len(data.raw["validation"]),
        labels_in_words(labels),
        " + ".join(data.text_columns),
    )
    check_task_options(args.training, labels)  # before tokenizing and loading weights
    tokenized = tokenize(
        data, tokenizer, read, args.training.main_process_first, model_limit=profile.max_length
    )
    data = replace(data, tokenized=tokenized, truncation=tokenized.truncation)
    metrics = run_metrics(args.training, args.data, labels, tokenized)

    batch_choice, batch = None, {}
    if args.training.auto_batch_size:
        from recipes_lib.training.autofit import choose_batch_size  # loaded only when asked

        batch_choice = choose_batch_size(args.training)
        batch = {
            "per_device_train_batch_size": batch_choice.batch_size,
            "gradient_accumulation_steps": batch_choice.accumulation,
        }
    arguments = replace(
        args,
        model=model_args,
        # 'auto' resolved: the config in results.json then says what ran, as W&B's does.
        data=replace(args.data, problem_type=labels.problem_type),
        training=trainer_arguments(args.training, **device_settings, **batch),
    )
    return Prepared(
        arguments=arguments,
        precision=precision,
        tokenizer=tokenizer,
        model_config=model_config,
        data=data,
        adapters=adapters,
        metrics=metrics,
        loss=weighted_loss(metrics.problem_type, metrics.class_weights, metrics.label_smoothing),
        batch_choice=batch_choice,
    )


def trainer_arguments(parsed: RecipeTrainingArguments, **decided) -> RecipeTrainingArguments:
    """A copy of the parsed arguments with what the run decided, deep (the Trainer's changes to a mutable value,
    fsdp_config say, stay in its copy) and through `__init__` (TrainingArguments' checks run on the decisions)."""
    values = {f.name: copy.deepcopy(getattr(parsed, f.name)) for f in dataclasses.fields(parsed) if f.init}
    return replace(parsed, **{**values, **decided})


def lora_adapters(args: ParsedArguments, base_config) -> LoraShape | None:
    """A LoRA recipe's adapters (its options are LoraArguments), the targets resolved and checked for
    the model's family from config.json, once: the script hands them to add_lora. None otherwise."""
    lora = next((o for o in args.recipe_options.values() if isinstance(o, LoraArguments)), None)
    if lora is None:
        return None
    from recipes_lib.modeling.adapters import check_lora_targets  # a LoRA recipe has loaded it

    return check_lora_targets(lora.shape(), base_config)


def run_metrics(training, data_args, labels, tokenized) -> RunMetrics:
    """The Trainer's compute_metrics for this task, with --class_weights' weights for the loss."""
    weights = None
    if training.class_weights:
        from recipes_lib.training.class_weights import class_weights_from

        weights = class_weights_from(training.class_weights, tokenized["train"]["labels"], labels.names)
    # sliding_window: metrics combine the validation split's windows into documents (the test
    # split's while it is predicted: record.py).
    return RunMetrics(
        labels.problem_type,
        labels.num_labels,
        weights,
        training.label_smoothing_factor,
        document_ids=document_ids(tokenized["validation"]),
        test_document_ids=document_ids(tokenized["test"]) if "test" in tokenized else None,
        window_pooling=data_args.window_pooling,
    )


def labels_in_words(labels) -> str:
    """'2 classes (cool, warm)'; a regression's one output is a score ('a score (label)', not '1 classes')."""
    if labels.problem_type == REGRESSION:
        return f"a score ({labels.names[0]})"
    return f"{labels.num_labels} classes ({', '.join(labels.names[:10])})"


def listed_text(value) -> str:
    return ", ".join(value) if isinstance(value, tuple) else str(value)
