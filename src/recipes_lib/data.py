"""Data: load a Hub dataset or local files, map labels to ids, tokenize (cached), collate.

Every check that can fail on the data runs on the raw text, before tokenization and before the
model weights are loaded, so a bad column name costs seconds, not a download.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from datasets import ClassLabel, Dataset, DatasetDict

from recipes_lib.arguments import DataArguments, dataset_source
from recipes_lib.errors import DataError

logger = logging.getLogger(__name__)

LABEL_COLUMN = "labels"  # what the model's forward() expects
LENGTH_COLUMN = "length"  # tokens per example, read by the length-grouped sampler


@dataclass
class LabelMapping:
    """Class names in id order. String labels are sorted, so ids are stable across runs."""

    names: list[str]
    # Raw label value -> id. Identity for ClassLabel features and for ints that are already 0..K-1.
    to_id: dict = field(repr=False)

    @property
    def num_labels(self) -> int:
        return len(self.names)

    @property
    def id2label(self) -> dict[int, str]:
        return dict(enumerate(self.names))

    @property
    def label2id(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}


@dataclass
class ClassificationData:
    raw: DatasetDict  # train / validation with the original columns
    text_columns: tuple[str, ...]
    label_column: str
    labels: LabelMapping
    description: str  # "glue/sst2" or the train file path, for results and W&B
    tokenized: DatasetDict | None = None


def describe_source(data_args: DataArguments) -> str:
    name, config = dataset_source(data_args)
    if name is None:
        return data_args.train_file
    return f"{name}/{config}" if config else name


def _has_rows(path: str) -> bool:
    """Whether a local data file holds at least one example. Reads a few lines, not the whole file."""
    extension = Path(path).suffix.lower()
    with open(path, encoding="utf-8", errors="replace") as handle:
        if extension == ".json":
            start = handle.read(64).strip()
            return bool(start) and not (start.startswith("[") and start[1:].strip().startswith("]"))
        lines_needed = 2 if extension in (".csv", ".tsv") else 1  # a header, then a row
        found = 0
        for line in handle:
            found += bool(line.strip())
            if found >= lines_needed:
                return True
    return False


def _read_local_files(data_args: DataArguments, cache_dir: str | None) -> DatasetDict:
    files = {"train": data_args.train_file}
    if data_args.validation_file:
        files["validation"] = data_args.validation_file
    # datasets reports an empty file as 'Instruction "train" corresponds to no data!'; say it plainly.
    for split, path in files.items():
        if not _has_rows(path):
            role = "training" if split == "train" else "validation"
            raise DataError(
                f"The {role} data ({path}) is empty: it holds no examples"
                f"{' below the header' if Path(path).suffix.lower() in ('.csv', '.tsv') else ''}. "
                f"Point --{split}_file at a file with rows."
            )
    extensions = {Path(path).suffix.lower() for path in files.values()}
    if len(extensions) > 1:
        raise DataError(
            f"train_file and validation_file have different formats ({', '.join(sorted(extensions))}). "
            "Give both in the same format."
        )
    extension = extensions.pop()
    if extension in (".csv", ".tsv"):
        # GLUE-style TSV files are not quoted: a lone '"' in a sentence is text, not a quote mark.
        options = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if extension == ".tsv" else {}
        builder = "csv"
    else:
        builder, options = "json", {}
    try:
        return datasets.load_dataset(builder, data_files=files, cache_dir=cache_dir, **options)
    except Exception as error:  # pandas / pyarrow parser errors have many types
        detail = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        cause = getattr(error, "__cause__", None)
        if cause is not None and str(cause).strip():
            detail = str(cause).strip().splitlines()[-1]
        raise DataError(
            f"Could not read {' / '.join(files.values())} as {extension[1:]}: {detail}. "
            "Check that every row has the same number of fields as the header (quote fields that contain the "
            "delimiter), or that each line of a .jsonl file is one JSON object."
        ) from None


def _read_hub_dataset(data_args: DataArguments, cache_dir: str | None) -> DatasetDict:
    name, config = dataset_source(data_args)
    try:
        loaded = datasets.load_dataset(name, config, cache_dir=cache_dir)
    except Exception as error:
        raise DataError(
            f"Could not load the dataset '{describe_source(data_args)}' from the Hugging Face Hub: "
            f"{str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__}. "
            "Check the name and config, your network (HF_HUB_OFFLINE=1 allows only cached datasets), "
            "or train on local files with --train_file and --validation_file."
        ) from None
    if "train" not in loaded:
        raise DataError(
            f"The dataset '{describe_source(data_args)}' has no 'train' split (splits: {', '.join(loaded)})."
        )
    splits = {"train": loaded["train"]}
    if data_args.validation_split_name in loaded:
        splits["validation"] = loaded[data_args.validation_split_name]
    return DatasetDict(splits)


def _hold_out_validation(raw: DatasetDict, data_args: DataArguments, seed: int) -> DatasetDict:
    held_out = raw["train"].train_test_split(test_size=data_args.validation_split_percentage / 100, seed=seed)
    logger.info(
        "No validation split or file: holding out %d%% of train (%d examples) for evaluation.",
        data_args.validation_split_percentage,
        len(held_out["test"]),
    )
    return DatasetDict({"train": held_out["train"], "validation": held_out["test"]})


def _resolve_text_columns(data_args: DataArguments, train: Dataset) -> tuple[str, ...]:
    found = train.column_names
    if data_args.text_column_names is not None:
        columns = tuple(c.strip() for c in data_args.text_column_names.split(",") if c.strip())
        missing = [c for c in columns if c not in found]
        if missing:
            raise DataError(
                f"Text column '{missing[0]}' is not in the training data; its columns are: {', '.join(found)}. "
                "Set --text_column_names to one of them (or two, comma-separated, for pairs)."
            )
        return columns
    candidates = [
        name
        for name, feature in train.features.items()
        if name != data_args.label_column_name
        and getattr(feature, "dtype", None) in ("string", "large_string")
    ]
    if not 1 <= len(candidates) <= 2:
        raise DataError(
            f"Cannot tell which columns hold the text: string columns other than the label are "
            f"{candidates or 'none'} (all columns: {', '.join(found)}). Name them with --text_column_names "
            "(one column, or two comma-separated for pairs)."
        )
    return tuple(candidates)


def _label_mapping(raw: DatasetDict, label_column: str) -> LabelMapping:
    """Class names and the raw-value -> id map, checked on both splits."""
    for split in ("train", "validation"):
        if label_column not in raw[split].column_names:
            raise DataError(
                f"Label column '{label_column}' is not in the {split} data; its columns are: "
                f"{', '.join(raw[split].column_names)}. Set --label_column_name to the column holding the labels."
            )
    feature = raw["train"].features[label_column]
    train_values = raw["train"][label_column]
    validation_values = raw["validation"][label_column]
    if isinstance(feature, ClassLabel):
        names = list(feature.names)
        mapping = LabelMapping(names=names, to_id={i: i for i in range(len(names))})
    else:
        if any(value is None for value in train_values):
            row = train_values.index(None)
            raise DataError(
                f"Training row {row} has no label (empty '{label_column}'). Fill it in or remove the row."
            )
        kinds = {type(value) for value in train_values}
        if kinds == {float} and all(float(v).is_integer() for v in train_values):
            # A numeric CSV column with a blank somewhere is read as float: 1.0 means class 1.
            train_values = [int(v) for v in train_values]
            kinds = {int}
        if kinds == {bool}:
            kinds = {int}
        if len(kinds) > 1 or not kinds <= {int, str}:
            kind_names = ", ".join(sorted(k.__name__ for k in kinds))
            raise DataError(
                f"Label column '{label_column}' mixes value types ({kind_names}). Labels must be all integers "
                "(class ids) or all strings (class names); regression targets are not supported."
            )
        unique = sorted(set(train_values))
        if kinds == {int} and unique == list(range(len(unique))):
            mapping = LabelMapping(names=[str(v) for v in unique], to_id={v: v for v in unique})
        else:
            mapping = LabelMapping(names=[str(v) for v in unique], to_id={v: i for i, v in enumerate(unique)})
    if mapping.num_labels < 2:
        raise DataError(
            f"The training data has {mapping.num_labels} distinct label(s) in '{label_column}' "
            f"({mapping.names}); classification needs at least 2."
        )
    unseen = sorted({repr(v) for v in validation_values if _normalise(v) not in mapping.to_id})
    if unseen:
        raise DataError(
            f"The validation data has label(s) the training data never uses: {', '.join(unseen[:5])}"
            f"{' ...' if len(unseen) > 5 else ''}. Training labels are: {', '.join(mapping.names)}. "
            "Fix the validation labels, or add training examples of those classes."
        )
    return mapping


def _normalise(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool):
        return int(value)
    return value


def load_classification_data(
    data_args: DataArguments, cache_dir: str | None = None, seed: int = 42
) -> ClassificationData:
    """Load and check the raw data: columns, labels, non-empty splits. No tokenization yet."""
    if data_args.train_file is not None:
        raw = _read_local_files(data_args, cache_dir)
    else:
        raw = _read_hub_dataset(data_args, cache_dir)
    if len(raw["train"]) == 0:
        raise DataError(
            f"The training data ({describe_source(data_args)}) is empty. Point --train_file at a file with rows."
        )
    if "validation" not in raw:
        raw = _hold_out_validation(raw, data_args, seed)
    if len(raw["validation"]) == 0:
        raise DataError(
            f"The validation data ({data_args.validation_file or describe_source(data_args)}) is empty. "
            "Give a validation file with rows, or leave it out to hold out part of train."
        )
    if data_args.max_train_samples is not None:
        raw["train"] = raw["train"].select(range(min(data_args.max_train_samples, len(raw["train"]))))
    if data_args.max_eval_samples is not None:
        raw["validation"] = raw["validation"].select(
            range(min(data_args.max_eval_samples, len(raw["validation"])))
        )

    text_columns = _resolve_text_columns(data_args, raw["train"])
    for column in text_columns:
        if column not in raw["validation"].column_names:
            raise DataError(
                f"Text column '{column}' is in train but not in validation; validation columns are: "
                f"{', '.join(raw['validation'].column_names)}."
            )
    labels = _label_mapping(raw, data_args.label_column_name)
    return ClassificationData(
        raw=raw,
        text_columns=text_columns,
        label_column=data_args.label_column_name,
        labels=labels,
        description=describe_source(data_args),
    )


def tokenize(
    data: ClassificationData, tokenizer, data_args: DataArguments, main_process_first
) -> DatasetDict:
    """Tokenize both splits with `datasets.map` (cached on disk, so a rerun skips it).

    No padding here (unless pad_to_max_length): the collator pads each batch to its longest example.
    """
    text_columns, label_column, to_id = data.text_columns, data.label_column, data.labels.to_id

    def encode(batch):
        texts = [["" if text is None else str(text) for text in batch[column]] for column in text_columns]
        padding = "max_length" if data_args.pad_to_max_length else False
        encoded = tokenizer(*texts, truncation=True, max_length=data_args.max_seq_length, padding=padding)
        encoded[LABEL_COLUMN] = [to_id[_normalise(value)] for value in batch[label_column]]
        encoded[LENGTH_COLUMN] = [len(ids) for ids in encoded["input_ids"]]
        return encoded

    tokenized = {}
    # Under several processes the main one tokenizes first and the others read its cache.
    with main_process_first(desc="tokenizing the dataset"):
        for split, dataset in data.raw.items():
            tokenized[split] = dataset.map(
                encode,
                batched=True,
                remove_columns=dataset.column_names,
                num_proc=data_args.preprocessing_num_workers,
                load_from_cache_file=not data_args.overwrite_cache,
                desc=f"Tokenizing {split}",
            )
    data.tokenized = DatasetDict(tokenized)
    return data.tokenized


def padding_collator(tokenizer, data_args: DataArguments, device):
    """Pads each batch to its longest example; on a GPU to a multiple of 8 unless told otherwise.

    Multiples of 8 let GPU tensor cores run at full rate; on a CPU they only add work.
    """
    from transformers import DataCollatorWithPadding

    pad_to_multiple_of = data_args.pad_to_multiple_of
    if pad_to_multiple_of is None and device.type == "cuda":
        pad_to_multiple_of = 8
    return DataCollatorWithPadding(tokenizer, pad_to_multiple_of=pad_to_multiple_of)
