"""Knowledge distillation for recipes/distill.py: a student learns from a finished run (the teacher).

The teacher's logits, computed once and cached, travel in each training row's `labels` as one float
vector, [gold label..., teacher logits...] (the gold part NaN on a row without one), which
`DistillationLoss` splits again; recipes/README.md ("Distillation") gives the loss terms and the cache.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import gc
import hashlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset, DatasetDict, Sequence, Value, concatenate_datasets

from recipes_lib.config.arguments import DataArguments
from recipes_lib.config.distill_options import TEACHER_BATCH_SIZE, DistillArguments
from recipes_lib.config.precision import autocast_for
from recipes_lib.config.tasks import MULTI_LABEL, REGRESSION
from recipes_lib.data.files import DELIMITED, copy_delimited_rows, decide_quoting, read_local_files
from recipes_lib.data.labels import LabelMapping
from recipes_lib.data.loading import ClassificationData
from recipes_lib.data.long_text import DOCUMENT_COLUMN, LengthsRead, document_ids
from recipes_lib.data.tokenize import LABEL_COLUMN, padding_collator, tokenize
from recipes_lib.errors import ConfigError, DataError
from recipes_lib.evaluation.inference import batch_logits
from recipes_lib.evaluation.windows import combine_windows
from recipes_lib.modeling.adapters import ADAPTER_CONFIG_FILE, load_trained_model
from recipes_lib.results import RESULTS_FILE, read_results

logger = logging.getLogger(__name__)

TEACHER_LOGITS_DIR = "teacher_logits"
# The files whose bytes are the teacher: the weights (full model or adapter) and what shapes them.
_TEACHER_FILES = ("config.json", ADAPTER_CONFIG_FILE, "base_quantization_config.json")
_TEACHER_WEIGHTS = ("*.safetensors", "*.safetensors.index.json", "*.bin")


# The loss ---------------------------------------------------------------------------------------


def gold_width(problem_type: str, num_labels: int) -> int:
    """Entries of a packed label vector that are the gold label: one (a class id, a score) or one per class."""
    return num_labels if problem_type == MULTI_LABEL else 1


def pack_targets(gold: np.ndarray, teacher_logits: np.ndarray) -> np.ndarray:
    """[gold..., teacher logits...] per row, float32; `gold` (rows x width) is NaN where a row has no label."""
    return np.concatenate([gold.reshape(len(gold), -1), teacher_logits], axis=1).astype(np.float32)


@dataclass(eq=False)
class DistillationLoss:
    """The Trainer's `compute_loss_func` for distillation; plain labels (evaluation) give the task's own
    loss. The batch's sum is divided by the rows in the optimizer step: the Trainer's `num_items_in_batch`
    counts label entries, so it is divided by the packed width."""

    problem_type: str
    num_labels: int
    temperature: float
    alpha: float
    class_weights: list[float] | None = None  # read by the evaluation loss (RecipeTrainer, record.py)
    label_smoothing: float = 0.0

    def __post_init__(self):
        self.gold_width = gold_width(self.problem_type, self.num_labels)

    def __call__(self, outputs, labels, num_items_in_batch=None):
        logits = (outputs["logits"] if isinstance(outputs, dict) else outputs[0]).float()
        packed = labels.dim() == 2 and labels.shape[1] == self.gold_width + self.num_labels
        if not packed:  # evaluation: plain labels, the task's loss
            return self.gold_term(logits, labels).mean()
        labels = labels.float()
        gold, teacher = labels[:, : self.gold_width], labels[:, self.gold_width :]
        has_gold = ~torch.isnan(gold).any(dim=1)
        gold = torch.nan_to_num(gold, nan=0.0)
        gold = gold[:, 0] if self.gold_width == 1 else gold
        mixed = self.alpha * self.teacher_term(logits, teacher) + (1 - self.alpha) * self.gold_term(
            logits, gold
        )
        losses = torch.where(has_gold, mixed, self.teacher_term(logits, teacher))
        rows = len(losses) if num_items_in_batch is None else num_items_in_batch / labels.shape[1]
        return losses.sum() / rows

    def teacher_term(self, logits: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        """Per row: the student's distance to the teacher's softened outputs (MSE for regression)."""
        functional = torch.nn.functional
        if self.problem_type == REGRESSION:
            return (logits[:, 0] - teacher[:, 0]) ** 2
        t = self.temperature
        if self.problem_type == MULTI_LABEL:
            targets = torch.sigmoid(teacher / t)
            bce = functional.binary_cross_entropy_with_logits(logits / t, targets, reduction="none")
            return bce.mean(dim=1) * t * t
        kl = functional.kl_div(
            functional.log_softmax(logits / t, dim=-1),
            functional.log_softmax(teacher / t, dim=-1),
            reduction="none",
            log_target=True,
        )
        return kl.sum(dim=1) * t * t

    def gold_term(self, logits: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
        """Per row: the loss the model's head computes on the gold label (with --class_weights, smoothing)."""
        functional = torch.nn.functional
        if self.problem_type == REGRESSION:
            return (logits[:, 0] - gold.float().reshape(-1)) ** 2
        weight = (
            torch.tensor(self.class_weights, dtype=torch.float32, device=logits.device)
            if self.class_weights is not None
            else None
        )
        if self.problem_type == MULTI_LABEL:  # --class_weights: each label's positive rows (pos_weight)
            return functional.binary_cross_entropy_with_logits(
                logits, gold.float(), pos_weight=weight, reduction="none"
            ).mean(dim=1)
        return functional.cross_entropy(
            logits, gold.long(), weight=weight, reduction="none", label_smoothing=self.label_smoothing
        )


# Rows without a gold label ----------------------------------------------------------------------


def _is_unlabelled(value) -> bool:
    """An empty label cell: nothing, NaN, or a blank string (an empty list is a multi-label row of no class)."""
    if value is None:
        return True
    if isinstance(value, float):
        return bool(np.isnan(value))
    return isinstance(value, str) and not value.strip()


@dataclass
class UnlabelledRows:
    """Training rows without a gold label: --train_file's empty label cells, and --transfer_file's rows.
    The run's own loading refuses them, so `set_aside` copies --train_file's labelled rows to
    `labelled_file`, which the script hands `prepare(args, train_file=...)`."""

    rows: list[Dataset]  # each source's rows (columns as read); empty: there are none
    labelled_file: str | None = None  # None: every training row has a label
    copy_dir: str | None = None

    @classmethod
    def set_aside(cls, data_args: DataArguments, options: DistillArguments) -> UnlabelledRows:
        """Before `prepare`: the rows without a label read, and the labelled ones copied."""
        parts, labelled, copy_dir = [], None, None
        if data_args.train_file is not None and not data_args.label_delimiter:
            train = read_local_files({"train": data_args.train_file}, None, data_args.csv_quoting)[0]["train"]
            label = data_args.label_column_name
            if label in train.column_names:
                missing = [i for i, value in enumerate(train[label]) if _is_unlabelled(value)]
                if missing:
                    if len(missing) == len(train):
                        raise DataError(
                            f"No row of the training data ({data_args.train_file}) has a label in '{label}'. "
                            "The student needs some labelled rows to set the classes: give them in "
                            "--train_file, and the unlabelled rows as --transfer_file."
                        )
                    copy_dir = tempfile.mkdtemp(prefix="distill-labelled-")
                    # Removed by remove_copy(); if loading fails first, when the process ends.
                    atexit.register(shutil.rmtree, copy_dir, True)
                    labelled = _copy_rows_except(data_args.train_file, set(missing), copy_dir, data_args)
                    parts.append(train.select(missing).remove_columns(label))
                    logger.info(
                        "%s: %d of %d rows have no label; the teacher labels them.",
                        data_args.train_file,
                        len(missing),
                        len(train),
                    )
        if options.transfer_file is not None:
            if not Path(options.transfer_file).is_file():
                raise ConfigError(
                    f"--transfer_file '{options.transfer_file}' is not a file. Pass a file of unlabelled rows "
                    "with the training data's text columns, in the training data's format."
                )
            files = {"transfer": options.transfer_file}
            transfer = read_local_files(files, None, data_args.csv_quoting)[0]["transfer"]
            parts.append(transfer)
            logger.info(
                "%s: %d unlabelled rows; the teacher labels them.", options.transfer_file, len(transfer)
            )
        return cls(rows=parts, labelled_file=labelled, copy_dir=copy_dir)

    def remove_copy(self) -> None:
        if self.copy_dir is not None:
            shutil.rmtree(self.copy_dir, ignore_errors=True)
            self.copy_dir = None

    def text_rows(self, text_columns: tuple[str, ...]) -> Dataset | None:
        if not self.rows:
            return None
        for part in self.rows:
            missing = [column for column in text_columns if column not in part.column_names]
            if missing:
                raise DataError(
                    f"The unlabelled rows have no column '{missing[0]}' (their columns: "
                    f"{', '.join(part.column_names)}); the training data's text is in {', '.join(text_columns)}."
                )
        return concatenate_datasets([_text_only(part, text_columns) for part in self.rows])


def _text_only(dataset: Dataset, text_columns: tuple[str, ...]) -> Dataset:
    dataset = dataset.select_columns(list(text_columns))
    return dataset.cast(dataset.features.__class__({column: Value("string") for column in text_columns}))


def _copy_rows_except(path: str, skipped: set[int], directory: str, data_args: DataArguments) -> str:
    source = Path(path)
    target = Path(directory) / source.name
    extension = source.suffix.lower()
    if extension in DELIMITED:
        quoted, _ = decide_quoting(path, data_args.csv_quoting)
        copy_delimited_rows(path, str(target), skipped, quoted)
        return str(target)
    rows = read_local_files({"train": path}, None)[0]["train"]
    kept = rows.select([i for i in range(len(rows)) if i not in skipped])
    if extension == ".parquet":
        kept.to_parquet(str(target))
    else:  # .jsonl, .json
        kept.to_json(str(target), lines=True, force_ascii=False)
    return str(target)


# The teacher's logits ---------------------------------------------------------------------------


def _teacher_data_arguments(teacher_dir: Path, run_data_args: DataArguments) -> DataArguments:
    """How the teacher read its inputs (from its results.json; the student's where it recorded none)."""
    results_path = teacher_dir / RESULTS_FILE
    if not results_path.is_file() and (teacher_dir.parent / RESULTS_FILE).is_file():
        results_path = teacher_dir.parent / RESULTS_FILE  # a merged model: OUTPUT_DIR/merged
    config = (read_results(results_path).config or {}) if results_path.is_file() else {}
    names = {field.name for field in dataclasses.fields(DataArguments)}
    kept = ("max_seq_length", "long_text", "stride", "window_pooling", "pad_to_max_length")
    changes = {key: config[key] for key in kept if key in config and key in names}
    return dataclasses.replace(run_data_args, **changes)


def check_teacher(teacher: str | None) -> Path:
    if not teacher:
        raise ConfigError(
            "distill needs --teacher: the output_dir of a finished run of any recipe (full_ft, lora, qlora, ...)."
        )
    path = Path(teacher)
    if not path.is_dir():
        raise ConfigError(f"--teacher '{teacher}' is not a directory. Pass the output_dir of a finished run.")
    if not (path / "config.json").is_file() or not any(
        (path / name).is_file()
        for name in ("model.safetensors", "model.safetensors.index.json", ADAPTER_CONFIG_FILE)
    ):
        raise ConfigError(
            f"--teacher '{teacher}' holds no saved model (config.json beside model.safetensors or "
            f"{ADAPTER_CONFIG_FILE}). Pass the output_dir of a run that finished (or its merged/ subdirectory)."
        )
    return path


def teacher_fingerprint(teacher_dir: Path) -> str:
    """A hash of the teacher's weight and config files' bytes: a retrained teacher gets a new cache key."""
    digest = hashlib.sha256()
    files = sorted(
        {p for pattern in _TEACHER_WEIGHTS for p in teacher_dir.glob(pattern)}
        | {teacher_dir / name for name in _TEACHER_FILES if (teacher_dir / name).is_file()}
    )
    for path in files:
        digest.update(path.name.encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def _label_order(teacher_config, labels: LabelMapping) -> list[int]:
    """The teacher's output index of each of the student's classes; a ConfigError if they are not the same task."""
    teacher_type = teacher_config.problem_type or "single_label_classification"
    if teacher_type != labels.problem_type:
        raise ConfigError(
            f"The teacher was trained for {teacher_type} and this data is {labels.problem_type}. Distil on data "
            "of the teacher's task (or set --problem_type to the teacher's)."
        )
    if labels.problem_type == REGRESSION:
        return [0]
    teacher_names = [teacher_config.id2label[i] for i in range(teacher_config.num_labels)]
    if sorted(map(str, teacher_names)) != sorted(map(str, labels.names)):
        raise ConfigError(
            f"The teacher's classes ({', '.join(map(str, teacher_names))}) are not this data's "
            f"({', '.join(map(str, labels.names))}). Distil on data with the teacher's classes."
        )
    position = {str(name): i for i, name in enumerate(teacher_names)}
    return [position[str(name)] for name in labels.names]


def _tokenized_rows(rows: Dataset, text_columns, labels, tokenizer, data_args, main_process_first) -> Dataset:
    data = ClassificationData(
        raw=DatasetDict({"test": rows}),
        text_columns=text_columns,
        label_column=data_args.label_column_name,
        labels=labels,
        description="distillation rows",
    )
    read = LengthsRead(names={"test": "distillation rows"})  # a split of their own, not a test split
    return tokenize(data, tokenizer, data_args, main_process_first, read=read)["test"]


def teacher_logits(
    teacher_dir: Path,
    rows: Dataset,
    text_columns: tuple[str, ...],
    labels: LabelMapping,
    run_data_args: DataArguments,
    cache_dir: Path,
    device: torch.device,
    precision: str = "fp32",
    main_process_first=None,
) -> np.ndarray:
    """The teacher's logits for each of `rows` (text columns), in the student's class order, cached in
    `cache_dir`/<key>.npy."""
    from transformers import AutoConfig, AutoTokenizer

    teacher_config = AutoConfig.from_pretrained(teacher_dir)
    order = _label_order(teacher_config, labels)
    tokenizer = AutoTokenizer.from_pretrained(teacher_dir)
    data_args = _teacher_data_arguments(teacher_dir, run_data_args)
    first = main_process_first or (lambda desc: contextlib.nullcontext())
    encoded = _tokenized_rows(rows, text_columns, labels, tokenizer, data_args, first)
    key = hashlib.sha256(
        f"{teacher_fingerprint(teacher_dir)} {encoded._fingerprint} {data_args.max_seq_length}".encode()
    ).hexdigest()[:24]
    path = cache_dir / f"{key}.npy"
    with first(desc="the teacher's logits"):  # under DDP the main process computes, the others read
        if path.is_file():
            logger.info("Teacher logits: %s (cached).", path)
            logits = np.load(path)
        else:
            logits = _run_teacher(teacher_dir, encoded, tokenizer, data_args, device, precision)
            cache_dir.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(partial, logits)
            os.replace(partial, path)  # whole or absent: a killed run leaves no half-written cache
            logger.info("Teacher logits: %d rows x %d in %s.", *logits.shape, path)
    if len(logits) != len(rows):
        raise DataError(f"{path} holds {len(logits)} rows of teacher logits for {len(rows)} rows; delete it.")
    return logits[:, order]


def _run_teacher(teacher_dir, encoded, tokenizer, data_args, device, precision) -> np.ndarray:
    # Iterating a DataLoader draws its base seed from torch's generator, and the student's new head is
    # drawn from it next: without the fork, a run that computes the teacher's logits and a rerun that
    # reads them from the cache trained different students (make demo's distill: 0.85 against 0.8225).
    forked = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=forked):
        model = load_trained_model(teacher_dir, device=device).eval()
        try:
            with autocast_for(precision, device.type):
                collator = padding_collator(tokenizer, data_args, device)
                logits = batch_logits(model, encoded, collator, device, TEACHER_BATCH_SIZE, progress=False)
        finally:  # the student loads next: the teacher must not hold memory during training
            del model
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    windows = document_ids(encoded)  # the teacher reads a long document in windows
    if windows is not None:
        logits, _ = combine_windows(logits, windows, data_args.window_pooling)
    return np.asarray(logits, dtype=np.float32)


# Putting it together for the recipe ---------------------------------------------------------------


def _documents(dataset: Dataset) -> np.ndarray:
    """The raw row each tokenized row came from (the row itself, or its document under sliding_window)."""
    documents = document_ids(dataset)
    return np.arange(len(dataset)) if documents is None else documents


def add_teacher_targets(
    prepared, options: DistillArguments, unlabelled: UnlabelledRows
) -> tuple[DatasetDict, DistillationLoss]:
    """The run's tokenized splits with the teacher in the training rows' labels ([gold..., teacher
    logits...]; the unlabelled rows tokenized and added to train), and the loss to train on."""
    unlabelled.remove_copy()
    data_args, training = prepared.arguments.data, prepared.training_args  # what runs
    teacher_dir = check_teacher(options.teacher)
    data = prepared.data
    labels, text_columns = data.labels, data.text_columns
    raw_train = _text_only(data.raw["train"], text_columns)
    extra = unlabelled.text_rows(text_columns)
    teacher_rows = raw_train if extra is None else concatenate_datasets([raw_train, extra])
    logits = teacher_logits(
        teacher_dir,
        teacher_rows,
        text_columns,
        labels,
        data_args,
        Path(training.output_dir) / TEACHER_LOGITS_DIR,
        training.device,
        prepared.precision.precision,
        training.main_process_first,
    )
    width = gold_width(labels.problem_type, labels.num_labels)
    train = data.tokenized["train"]
    packed = pack_targets(np.asarray(train[LABEL_COLUMN], dtype=np.float32), logits[_documents(train)])
    parts = [train.remove_columns(LABEL_COLUMN).add_column(LABEL_COLUMN, packed.tolist())]
    if extra is not None:
        encoded = _tokenized_rows(
            extra, text_columns, labels, prepared.tokenizer, data_args, training.main_process_first
        )
        documents = _documents(encoded)
        if DOCUMENT_COLUMN in encoded.column_names:  # documents numbered after the labelled ones
            encoded = encoded.remove_columns(DOCUMENT_COLUMN).add_column(
                DOCUMENT_COLUMN, documents + len(raw_train)
            )
        no_gold = np.full((len(encoded), width), np.nan, dtype=np.float32)
        packed_extra = pack_targets(no_gold, logits[len(raw_train) + documents])
        parts.append(encoded.add_column(LABEL_COLUMN, packed_extra.tolist()))
    features = parts[0].features.copy()
    features[LABEL_COLUMN] = Sequence(Value("float32"))
    columns = parts[0].column_names  # the unlabelled rows' columns in the training split's order
    splits = DatasetDict(data.tokenized)
    splits["train"] = concatenate_datasets([part.select_columns(columns).cast(features) for part in parts])
    loss = DistillationLoss(
        labels.problem_type,
        labels.num_labels,
        options.distill_temperature,
        options.distill_alpha,
        class_weights=prepared.metrics.class_weights,  # --class_weights' (None without)
        label_smoothing=training.label_smoothing_factor,
    )
    logger.info(
        "Distillation: %d training rows (%d without a gold label), T=%s, alpha=%s (teacher term weight).",
        len(splits["train"]),
        0 if extra is None else len(extra),
        options.distill_temperature,
        options.distill_alpha,
    )
    return splits, loss
