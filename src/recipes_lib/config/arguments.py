"""The typed arguments every recipe shares (model, data, training) and their bundle, `ParsedArguments`: defaults,
`--help` and checks on their own values only; what the machine and the model decide, run/preparation.py decides.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, TypeVar

from recipes_lib.config.bitsandbytes_import import deferred_bitsandbytes
from recipes_lib.config.recipe_spec import option

with deferred_bitsandbytes():  # it imports peft, which imports bitsandbytes: run when a recipe uses it
    from transformers import TrainingArguments

from recipes_lib.config.validation import check_early_stopping, parse_decision_threshold

# With no dataset and no files, a recipe trains on GLUE SST-2 (binary sentiment, 67k sentences).
DEFAULT_DATASET = ("glue", "sst2")

# --length_grouping's choices (its help says how much each sorts by length at a time; the sorting:
# training/trainer.py, ShuffledLengthGroupedSampler).
LENGTH_GROUPINGS = ("wide", "stock")
DEFAULT_LENGTH_GROUPING = "wide"


@dataclass
class ModelArguments:
    model_name_or_path: str = option(
        "bert-base-uncased",
        "Hub model id or local directory of a BERT-sized encoder (config.json + weights).",
    )
    tokenizer_name: str | None = option(None, "Tokenizer id or path, if different from model_name_or_path.")
    model_revision: str = option("main", "Hub branch, tag or commit of the model.")
    cache_dir: str | None = option(None, "Where downloaded models and data are kept.")
    trust_remote_code: bool = option(
        False, "Run Python code shipped with a Hub model. Off by default: only enable it for repos you trust."
    )
    attn_implementation: str | None = option(
        None,
        "Attention kernel: 'flash_attention_2' (a CUDA GPU with the flash-attn package; bf16/fp16 "
        "only), 'sdpa' (PyTorch scaled_dot_product_attention) or 'eager'. Default: the best one the model's "
        "family supports that this machine runs (flash_attention_2 where installed; else sdpa; eager for "
        "DeBERTa and MPNet, which have no sdpa). Pass sdpa for an fp32 run on a GPU with flash-attn.",
    )


@dataclass
class DataArguments:
    dataset_name: str | None = option(
        None, "Hub dataset name, e.g. 'glue'. When neither this nor train_file is given: glue/sst2."
    )
    dataset_config_name: str | None = option(None, "Hub dataset configuration, e.g. 'sst2' or 'mnli'.")
    train_file: str | None = option(
        None,
        "Local training data: .csv, .tsv (or tab-separated .txt), .json, .jsonl or .parquet (format from the extension; a .csv "
        "or .tsv file's delimiter from its content, see --delimiter).",
    )
    validation_file: str | None = option(
        None,
        "Local validation data, with train_file's columns (any of its formats). Without it, a split is "
        "held out.",
    )
    test_file: str | None = option(
        None,
        "Local test data, with train_file's columns (any of its formats): evaluated after training (when it has labels) "
        "and predicted, into output_dir/test_predictions.jsonl.",
    )
    validation_split_name: str = option(
        "validation",
        "The Hub dataset's split used for evaluation (e.g. validation_matched for MNLI, test for imdb).",
    )
    test_split_name: str | None = option(
        None, "A Hub dataset's split evaluated and predicted after training, like --test_file."
    )
    csv_quoting: str = option(
        "auto",
        "How .csv/.tsv fields are quoted: 'auto' (read both ways, decide, stop if both fit), 'quoted' "
        "(as Python's csv and pandas write: fields may hold tabs and newlines) or 'none' (GLUE style).",
        choices=["auto", "quoted", "none"],
    )
    delimiter: str = option(
        "auto",
        "What separates the fields of a .csv/.tsv file: 'auto' (decided from the file's first lines, "
        "tab, comma or semicolon, whatever the extension says; the run logs which), or one character or "
        "name: tab, comma, semicolon, pipe.",
    )
    column_names: str | None = option(
        None,
        "A .csv/.tsv with no header: its column names, comma-separated, in order (e.g. "
        "text,labels,id); its first line is then a row. Default: the first line is the header.",
    )
    split_column: str | None = option(
        None,
        "With --train_file alone: the column that says each row's split, its values in any case "
        "train/training, trial/dev/development/validation/valid/val, test/testing (data/split_column.py).",
    )
    validation_split_percentage: int = option(
        10, "Percent of train held out for evaluation when there is no validation split or file."
    )
    text_column_names: str | None = option(
        None,
        "Text column, or two comma-separated columns for sentence pairs. "
        "Default: the dataset's string columns other than the label (one or two).",
    )
    label_column_name: str = option(
        "label",
        "Column holding the label: a class (name, id or bool), a list of classes (multi-label) or a "
        "number (regression).",
    )
    problem_type: str = option(
        "auto",
        "The task: 'auto' (from the labels: lists or --label_delimiter mean multi-label, numbers with a "
        "fraction mean regression, anything else single-label), or force single_label_classification, "
        "multi_label_classification or regression (e.g. star ratings 1-5 as a score).",
        choices=["auto", "single_label_classification", "multi_label_classification", "regression"],
    )
    label_delimiter: str | None = option(
        None,
        "Split each label on this string to read several classes per row (multi-label), e.g. ';' for "
        "'billing;shipping'. JSON lists need no delimiter. Default: labels joined by ',', ';' or '|' whose "
        "parts are integer ids, or labels of their own in other rows ('2,27' beside '2' and '27'), are split "
        "on it, and the run says so.",
    )
    label_names_file: str | None = option(
        None,
        "Class names for integer class ids: a text file of one name per line, the first line naming "
        "id 0 (e.g. a labels.txt published beside the data).",
    )
    max_seq_length: int = option(
        128, "Truncate inputs to this many tokens. Batches are padded only to their longest input."
    )
    long_text: str = option(
        "truncate",
        "Inputs longer than max_seq_length: 'truncate' (keep the first tokens), 'head_tail' (keep the "
        "first quarter and the last three quarters of the room), or 'sliding_window' (overlapping windows of "
        "max_seq_length, each trained with the document's label; evaluation and predict combine a "
        "document's windows into one prediction). head_tail and sliding_window take one text column.",
        choices=["truncate", "head_tail", "sliding_window"],
    )
    # One 100 MB text field took 8 GB in the tokenizer (about 80 bytes a character): a field over this bound is
    # refused before tokenizing, where a 1 GB one would exhaust the machine. 1,000,000 characters is a long book.
    max_text_chars: int = option(
        1_000_000,
        "Refuse a text field longer than this many characters before tokenizing (the tokenizer needs "
        "about 80 bytes of memory a character). Raise it for longer documents, with the memory for them.",
    )
    stride: int = option(32, "sliding_window: tokens each window shares with the one before it.")
    window_pooling: str = option(
        "mean",
        "sliding_window: how a document's window logits become one prediction: 'mean' or 'max'.",
        choices=["mean", "max"],
    )
    max_windows_per_document: int | None = option(
        None,
        "sliding_window: train on at most the first N windows of each document (evaluation and "
        "predict always use all of them). Default: every window.",
    )
    max_train_samples: int | None = option(
        None, "Use only the first N training examples (quick runs, debugging)."
    )
    max_eval_samples: int | None = option(None, "Use only the first N validation examples.")
    pad_to_max_length: bool = option(
        False,
        "Pad every example to max_seq_length (the run_glue.py way). Off: pad each batch to its "
        "longest example, which on SST-2 (13 tokens on average) skips most of the work.",
    )
    pad_to_multiple_of: int | None = option(
        None, "Pad batch length to a multiple of this. Default: 8 on GPU (tensor cores), none on CPU."
    )
    preprocessing_num_workers: int | None = option(None, "Processes used to tokenize the dataset.")
    overwrite_cache: bool = option(False, "Re-tokenize even if a cached result exists.")


if "activation_checkpointing" in {argument.name for argument in dataclasses.fields(TrainingArguments)}:
    _TrainingArgumentsOfThisRelease = TrainingArguments
else:

    @dataclass
    class _TrainingArgumentsOfThisRelease(TrainingArguments):
        """transformers before 5.23, plus its later name for gradient_checkpointing, which the recipes and
        their configs use (5.23 renamed it and keeps the old name as an alias)."""

        activation_checkpointing: bool = option(
            False,
            "Recompute activations in the backward pass instead of keeping them: less memory, more compute.",
        )

        def __post_init__(self):
            self.activation_checkpointing = self.gradient_checkpointing = bool(
                self.activation_checkpointing or self.gradient_checkpointing
            )
            super().__post_init__()


@dataclass
class RecipeTrainingOptions(_TrainingArgumentsOfThisRelease):
    """What the recipes add to TrainingArguments (the parser lists them after its own, in this order)."""

    overwrite_output_dir: bool = option(
        False, "Allow writing into an output_dir that holds another run's results (they are replaced)."
    )
    length_grouping: str = option(
        DEFAULT_LENGTH_GROUPING,
        "Under group_by_length, how many examples are sorted by length together: 'wide' (50 "
        "optimizer steps' worth, or the whole epoch when shorter: as little padding at 1,000 examples as at "
        "16,000) or 'stock' (transformers' size, a quarter of the data up to 50 steps: at 1,000 SST-2 "
        "sentences a pad ratio of 0.25 against 0.07). Default: 'wide'; LoRA and QLoRA: 'stock' (see "
        "benchmarks/RESULTS.md, 'Small data').",
        choices=list(LENGTH_GROUPINGS),
    )
    wandb_project: str | None = option(None, "W&B project. Default: $WANDB_PROJECT, else 'bert-recipes'.")
    experiment: str | None = option(
        None,
        "W&B group: runs in one group are compared side by side. Default: '<model>_<dataset>', "
        "so every recipe run on the same model and data lands in the same group.",
    )
    wandb_tags: str | None = option(
        None, "Extra W&B tags, comma-separated; recipe, model, precision and device kind are always tags."
    )

    # Imbalanced data and stopping (training/trainer.py).
    class_weights: str | None = option(
        None,
        "Weight each class's loss: 'balanced' (n / (classes x count of the class), from the training "
        "labels) or one weight per class in label-id order, comma-separated (e.g. 1,4). Multi-label: each "
        "label's positive weight in the loss ('balanced': its negatives over its positives, at most 10), which "
        "rare labels need to be learnt at all. Default: unweighted.",
    )
    decision_threshold: str | None = option(
        None,
        "Binary classification: the probability at which the positive class (label id 1) is predicted. "
        "'tune': the threshold with the best positive-class F1 on the validation split (ties nearest 0.5); "
        "or a number between 0 and 1. Metrics are reported at 0.5 and at it; it is saved with the model "
        "and used by predict. Default: the likelier class (0.5).",
    )
    early_stopping_patience: int | None = option(
        None,
        "Stop when the validation metric (metric_for_best_model, default the loss) has not improved "
        "for N evaluations, and end with the best checkpoint's weights (load_best_model_at_end).",
    )

    # Memory (memory/monitor.py, recipes_workbench/planner/).
    track_memory: bool = option(
        True,
        "Count every tensor of the training steps that can set a memory peak (the first two, then "
        "each larger batch) for memory_breakdown_gib and the CPU peaks. false: CUDA figures and RSS only. "
        "Off under --torch_compile, which it would keep from compiling.",
    )
    auto_batch_size: bool = option(
        False,
        "Train with the largest per-device batch that fits (planner first, out-of-memory back-off "
        "as the safety net), raising gradient_accumulation_steps so the effective batch stays the same.",
    )


@dataclass
class RecipeTrainingArguments(RecipeTrainingOptions):
    """`TrainingArguments` with the recipe defaults (BERT fine-tuning on GLUE, after Devlin et al.). bf16, fp16,
    tf32, dataloader_pin_memory: None is automatic, decided in the Trainer's copy (run/preparation.py)."""

    output_dir: str | None = option(
        None,
        "Where checkpoints, the final model and results.json go. Default: outputs/<recipe>; "
        "'{recipe}' in the path becomes the recipe's name (e.g. outputs/demo/{recipe}).",
    )
    per_device_train_batch_size: int = option(32, "Training batch size per device.")
    # Evaluation keeps no activations for backward, so a larger batch fits in the same memory.
    per_device_eval_batch_size: int = option(64, "Evaluation batch size per device.")
    learning_rate: float = option(2e-5, "Peak learning rate of AdamW.")
    num_train_epochs: float = option(3.0, "Passes over the training data.")
    # A float below 1 is a fraction of the total steps (transformers 5 dropped `warmup_ratio`).
    warmup_steps: float = option(0.1, "Linear warmup: steps, or a fraction of all steps if below 1.")
    weight_decay: float = option(0.01, "AdamW weight decay (not applied to biases/LayerNorm).")
    eval_strategy: str = option("epoch", "When to evaluate: 'no', 'steps' or 'epoch'.")
    save_strategy: str = option("epoch", "When to checkpoint: 'no', 'steps' or 'epoch'.")
    # One checkpoint is what --resume_from_checkpoint last needs (the next is complete before the last is
    # deleted; with load_best_model_at_end the best is kept as well): each holds the weights and the
    # optimizer state, about 4x the model, so a second doubles what a run leaves on disk.
    save_total_limit: int | None = option(
        1,
        "Keep at most this many checkpoints (default 1: the latest, which resuming needs, and the "
        "best under load_best_model_at_end); raise it to keep more.",
    )
    # A fraction of the total steps: about 50 points on every loss curve whatever the run length.
    logging_steps: float = option(0.02, "Log every N steps, or a fraction of all steps if below 1.")
    # transformers 5's name for group_by_length; the batches come in a seeded random order, longest
    # first (trainer.ShuffledLengthGroupedSampler).
    train_sampling_strategy: str = option(
        "group_by_length",
        "'group_by_length' (batches of similar length, little padding, in random order), "
        "'random' or 'sequential'.",
    )
    # None: automatic (precision.py). An explicit true/false wins, and must agree with the accelerate config.
    bf16: bool | None = option(
        None,
        "bfloat16 mixed precision. Default: on where the GPU has native bf16 (Ampere or newer), "
        "else fp16 on GPUs and fp32 on CPUs. false: train in fp32.",
    )
    fp16: bool | None = option(
        None,
        "float16 mixed precision with loss scaling. Default: on for GPUs without native bf16 "
        "(T4, V100, RTX 20xx), except DeBERTa (overflows in fp16). false: train in fp32.",
    )

    # Pinned host memory speeds up copies to a GPU and does nothing (but warn) without one.
    dataloader_pin_memory: bool | None = option(
        None, "Pin host memory for faster GPU transfers. Default: on with a GPU."
    )

    tf32: bool | None = option(
        None,
        "TF32 matmuls for the fp32 parts (Ampere or newer GPUs: ~8x the fp32 rate, 10-bit mantissa). "
        "Default: on where supported.",
    )

    # W&B (tracking/wandb_run.py). transformers 5 reports to nothing by default; every recipe logs a run.
    report_to: None | str | list[str] = option(
        "wandb",
        "Where to log: 'wandb' (offline when there is no API key), 'none', or another "
        "Trainer integration ('tensorboard', 'all'). WANDB_MODE=disabled also turns W&B off.",
    )

    def __post_init__(self):
        if self.early_stopping_patience is not None:
            check_early_stopping(self)  # a checkpoint at every evaluation, to end with the best one
            self.load_best_model_at_end = True
            self.restore_callback_states_from_checkpoint = True  # a resumed run continues the count
        # The Trainer takes every metric but a "*loss" as greater-is-better; a squared error is not.
        metric = self.metric_for_best_model
        if self.greater_is_better is None and metric is not None and metric.removeprefix("eval_") == "mse":
            self.greater_is_better = False
        self.decision_threshold = parse_decision_threshold(self.decision_threshold)  # 'tune', a float or None
        asked = self.bf16, self.fp16
        if None in asked:  # a request, not a decision: TrainingArguments would check it against a GPU
            self.bf16 = self.fp16 = False
        super().__post_init__()
        self.bf16, self.fp16 = asked
        if None not in asked:  # TrainingArguments takes the launcher's when both are false
            self.mixed_precision = "bf16" if self.bf16 else "fp16" if self.fp16 else "no"
        # After the Trainer's own checks: --torch_compile_mode or _backend alone also turn compiling on.
        if self.torch_compile and self.track_memory:
            # The tensor tracker's dispatch mode keeps dynamo from compiling the model at all, so the
            # run would train eagerly while asking to compile (benchmarks/RESULTS.md, section 3).
            logging.getLogger("recipes_lib").warning(
                "--torch_compile true turns off --track_memory (per-tensor memory tracking stops "
                "the model from being compiled); CUDA memory figures and the process RSS remain."
            )
            self.track_memory = False

    @property
    def precision(self) -> str:
        """'bf16', 'fp16' or 'fp32', as bf16/fp16 say: on the Trainer's copy (run/preparation.py), the decision."""
        return "bf16" if self.bf16 else "fp16" if self.fp16 else "fp32"


SHARED_ARGUMENT_CLASSES = (ModelArguments, DataArguments)

Options = TypeVar("Options")


@dataclass
class ParsedArguments:
    model: ModelArguments
    data: DataArguments
    training: RecipeTrainingArguments
    # The recipe's own options (a LoraArguments, say), by class; `options(cls)` reads them.
    recipe_options: dict[type, Any]
    config_file: str | None
    show_traceback: bool

    def options(self, cls: type[Options]) -> Options:
        """The recipe's own options of this class or a subclass (qlora's QloraArguments are LoraArguments)."""
        for options_class, options in self.recipe_options.items():
            if issubclass(options_class, cls):
                return options
        raise TypeError(
            f"This recipe has no {cls.__name__}; it has {[c.__name__ for c in self.recipe_options]}"
        )

    def to_dict(self) -> dict[str, Any]:
        """As saved in results.json and the W&B run config."""
        resolved = {**dataclasses.asdict(self.model), **dataclasses.asdict(self.data)}
        for options in self.recipe_options.values():
            resolved.update(dataclasses.asdict(options))
        # TrainingArguments.to_dict redacts tokens and turns enums into strings.
        resolved.update(self.training.to_dict())
        resolved["config_file"] = self.config_file
        return resolved


def dataset_source(data: DataArguments) -> tuple[str | None, str | None]:
    """(name, config) of the Hub dataset a run reads, or (None, None) for local files."""
    if data.train_file is not None:
        return None, None
    if data.dataset_name is None:
        return DEFAULT_DATASET
    return data.dataset_name, data.dataset_config_name
