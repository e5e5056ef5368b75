"""Data: load a Hub dataset or local files, map labels to ids, tokenize (cached), collate.

Every check that can fail on the data runs on the raw text, before tokenization and before the
model weights are loaded, so a bad column name costs seconds, not a download.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from datasets import ClassLabel, Dataset, DatasetDict

from recipes_lib.arguments import DataArguments, dataset_source
from recipes_lib.datafiles import has_rows, read_local_files
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
    raw: DatasetDict  # train / validation (/ test) with the original columns
    text_columns: tuple[str, ...]
    label_column: str
    labels: LabelMapping
    description: str  # "glue/sst2" or the train file path, for results and W&B
    # Where each split's metrics come from: "validation_matched", "dev.tsv", "10% of train held out".
    split_sources: dict[str, str] = field(default_factory=dict)
    tokenized: DatasetDict | None = None
    # Whether the test split has labels to score (it is predicted either way).
    test_has_labels: bool = False


def describe_source(data_args: DataArguments) -> str:
    name, config = dataset_source(data_args)
    if name is None:
        return data_args.train_file
    return f"{name}/{config}" if config else name


def _read_local_files(data_args: DataArguments, cache_dir: str | None) -> tuple[DatasetDict, dict]:
    files = {"train": data_args.train_file}
    if data_args.validation_file:
        files["validation"] = data_args.validation_file
    if data_args.test_file:
        files["test"] = data_args.test_file
    # datasets reports an empty file as 'Instruction "train" corresponds to no data!'; say it plainly.
    for split, path in files.items():
        if not has_rows(path):
            role = {"train": "training", "validation": "validation", "test": "test"}[split]
            raise DataError(
                f"The {role} data ({path}) is empty: it holds no examples"
                f"{' below the header' if Path(path).suffix.lower() in ('.csv', '.tsv') else ''}. "
                f"Point --{split}_file at a file with rows."
            )
    extensions = {Path(path).suffix.lower() for path in files.values()}
    if len(extensions) > 1:
        raise DataError(
            f"The data files have different formats ({', '.join(sorted(extensions))}). Give them all in one format."
        )
    return read_local_files(files, cache_dir, data_args.csv_quoting)


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
    return choose_hub_splits(loaded, data_args)


def choose_hub_splits(loaded: DatasetDict, data_args: DataArguments) -> DatasetDict:
    """train, the evaluation split asked for and the test split, if asked for; never a silent hold-out.

    A dataset whose evaluation split has another name (MNLI: validation_matched and
    validation_mismatched; imdb, ag_news: test) is an error listing its splits: holding out part
    of train instead would report a score on data the user did not choose.
    """
    source = describe_source(data_args)
    if "train" not in loaded:
        raise DataError(f"The dataset '{source}' has no 'train' split (splits: {', '.join(loaded)}).")
    splits = {"train": loaded["train"]}
    if data_args.validation_split_name in loaded:
        splits["validation"] = loaded[data_args.validation_split_name]
    else:
        others = [split for split in loaded if split not in ("train", data_args.test_split_name)]
        if others:
            raise DataError(
                f"The dataset '{source}' has no '{data_args.validation_split_name}' split to evaluate on; its "
                f"other splits are: {', '.join(others)}. Choose one with --validation_split_name "
                f"(e.g. --validation_split_name {others[0]})."
            )
    if data_args.test_split_name is not None:
        if data_args.test_split_name not in loaded:
            raise DataError(
                f"The dataset '{source}' has no '{data_args.test_split_name}' split (splits: "
                f"{', '.join(loaded)}). Fix --test_split_name."
            )
        splits["test"] = loaded[data_args.test_split_name]
    return DatasetDict(splits)


def _hold_out_validation(raw: DatasetDict, data_args: DataArguments, seed: int) -> DatasetDict:
    held_out = raw["train"].train_test_split(test_size=data_args.validation_split_percentage / 100, seed=seed)
    logger.warning(
        "No validation split or file: holding out %d%% of train (%d examples) for evaluation.",
        data_args.validation_split_percentage,
        len(held_out["test"]),
    )
    return DatasetDict({**raw, "train": held_out["train"], "validation": held_out["test"]})


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


def _label_mapping(raw: DatasetDict, label_column: str, locate: dict) -> LabelMapping:
    """Class names and the raw-value -> id map, checked on every split that has labels.

    Labels are normalised first (`normalise_label`): booleans are classes 0 and 1 (False, True),
    integers written as floats (1.0, from a CSV column with a blank) are integers, and strings lose
    stray whitespace, so 'billing ' and 'billing' are one class.
    """
    for split in ("train", "validation"):
        if label_column not in raw[split].column_names:
            raise DataError(
                f"Label column '{label_column}' is not in the {split} data; its columns are: "
                f"{', '.join(raw[split].column_names)}. Set --label_column_name to the column holding the labels."
            )
    feature = raw["train"].features[label_column]
    if isinstance(feature, ClassLabel):
        names = list(feature.names)
        return _checked(
            LabelMapping(names=names, to_id={i: i for i in range(len(names))}), raw, label_column, locate
        )
    train_values = [normalise_label(value) for value in raw["train"][label_column]]
    kinds = {type(value) for value in train_values}
    if len(kinds) > 1 or not kinds <= {int, str}:
        kind_names = ", ".join(sorted(k.__name__ for k in kinds))
        first_float = next((i for i, v in enumerate(train_values) if isinstance(v, float)), None)
        example = (
            f" (e.g. {train_values[first_float]!r} at {_where(locate, 'train', first_float)})"
            if first_float is not None
            else ""
        )
        raise DataError(
            f"Label column '{label_column}' mixes value types ({kind_names}){example}. Labels must be all integers "
            "(class ids), all booleans or all strings (class names); regression targets are not supported yet."
        )
    unique = sorted(set(train_values))
    if kinds == {int} and unique == list(range(len(unique))):
        mapping = LabelMapping(names=[str(v) for v in unique], to_id={v: v for v in unique})
    else:
        mapping = LabelMapping(names=[str(v) for v in unique], to_id={v: i for i, v in enumerate(unique)})
    if all(isinstance(value, bool) for value in raw["train"][label_column]):
        mapping.names = ["False", "True"][: mapping.num_labels]
    return _checked(mapping, raw, label_column, locate)


def _check_labels_present(raw: DatasetDict, label_column: str, locate: dict) -> None:
    """Every training and validation row has a label; an error names the first that has none, where it is."""
    for split in [name for name in ("train", "validation") if name in raw]:
        if label_column not in raw[split].column_names or isinstance(
            raw[split].features[label_column], ClassLabel
        ):
            continue  # a missing column is reported with the columns there are, later
        values = raw[split][label_column]
        missing = next((i for i, value in enumerate(values) if normalise_label(value) in (None, "")), None)
        if missing is not None:
            raise DataError(
                f"{_where(locate, split, missing)} has no label (empty '{label_column}'). Fill it in or remove the row."
            )


def _checked(mapping: LabelMapping, raw: DatasetDict, label_column: str, locate: dict) -> LabelMapping:
    if mapping.num_labels < 2:
        raise DataError(
            f"The training data has {mapping.num_labels} distinct label(s) in '{label_column}' "
            f"({mapping.names}); classification needs at least 2."
        )
    for split in [
        name for name in ("validation", "test") if name in raw and label_column in raw[name].column_names
    ]:
        values = [normalise_label(v) for v in raw[split][label_column]]
        if split == "test":
            unlabelled = [unlabelled_value(v, raw["test"].features[label_column]) for v in values]
            if all(unlabelled):
                continue  # an unlabelled test split: predicted, not scored
            if any(unlabelled):
                first = unlabelled.index(True)
                raise DataError(
                    f"{_where(locate, split, first)} has no label, but other test rows have one. Label every "
                    "test row (it is then scored) or none (it is then only predicted)."
                )
        unseen = [(i, v) for i, v in enumerate(values) if v not in mapping.to_id]
        if unseen:
            first, value = unseen[0]
            others = sorted({repr(v) for _, v in unseen})
            raise DataError(
                f"The {split} data has label(s) the training data never uses: {', '.join(others[:5])}"
                f"{' ...' if len(others) > 5 else ''} (first at {_where(locate, split, first)}). Training labels are: "
                f"{', '.join(mapping.names)}. Fix those labels, or add training examples of those classes."
            )
    return mapping


def _where(locate: dict, split: str, index: int) -> str:
    """'train.csv line 17' (or 'training row 17' where the source has no lines)."""
    if split in locate:
        return locate[split](index)
    return f"{split} row {index + 1}"


def unlabelled_value(value, feature) -> bool:
    """Whether a raw label value means "no label": empty, or -1 in a ClassLabel (GLUE's test splits)."""
    value = normalise_label(value)
    return value is None or value == "" or (isinstance(feature, ClassLabel) and value == -1)


def normalise_label(value):
    """The class a raw label value means: bools and integral floats as ints, strings stripped."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return value.strip()
    return value


def load_classification_data(
    data_args: DataArguments, cache_dir: str | None = None, seed: int = 42
) -> ClassificationData:
    """Load and check the raw data: columns, labels, non-empty splits. No tokenization yet."""
    if data_args.train_file is not None:
        raw, locate = _read_local_files(data_args, cache_dir)
        sources = {split: Path(getattr(data_args, f"{split}_file")).name for split in raw}
    else:
        raw, locate = _read_hub_dataset(data_args, cache_dir), {}
        sources = {"validation": data_args.validation_split_name, "test": data_args.test_split_name}
    if len(raw["train"]) == 0:
        raise DataError(
            f"The training data ({describe_source(data_args)}) is empty. Point --train_file at a file with rows."
        )
    _check_labels_present(raw, data_args.label_column_name, locate)  # before a hold-out shuffles the rows
    if "validation" not in raw:
        raw = _hold_out_validation(raw, data_args, seed)
        locate.pop("train", None)  # rows were shuffled into two splits: their lines are no longer known
        sources["validation"] = f"{data_args.validation_split_percentage}% of train held out"
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
    for split in [name for name in ("validation", "test") if name in raw]:
        for column in text_columns:
            if column not in raw[split].column_names:
                raise DataError(
                    f"Text column '{column}' is in train but not in {split}; {split} columns are: "
                    f"{', '.join(raw[split].column_names)}."
                )
    labels = _label_mapping(raw, data_args.label_column_name, locate)
    test_has_labels = (
        "test" in raw
        and data_args.label_column_name in raw["test"].column_names
        and not all(
            unlabelled_value(v, raw["test"].features[data_args.label_column_name])
            for v in raw["test"][data_args.label_column_name]
        )
    )
    for split, dataset in raw.items():
        if split != "test" or test_has_labels:
            counts = Counter(normalise_label(v) for v in dataset[data_args.label_column_name])
            described = ", ".join(
                f"{labels.names[labels.to_id[k]]} {n}"
                for k, n in sorted(counts.items(), key=lambda kv: labels.to_id[kv[0]])
            )
            logger.info(
                "%s (%s): %d rows; classes: %s", split, sources.get(split) or split, len(dataset), described
            )
    return ClassificationData(
        raw=raw,
        text_columns=text_columns,
        label_column=data_args.label_column_name,
        labels=labels,
        description=describe_source(data_args),
        split_sources={split: sources.get(split) or split for split in raw},
        test_has_labels=test_has_labels,
    )


def tokenize(
    data: ClassificationData, tokenizer, data_args: DataArguments, main_process_first
) -> DatasetDict:
    """Tokenize every split with `datasets.map` (cached on disk, so a rerun skips it).

    No padding here (unless pad_to_max_length): the collator pads each batch to its longest example.
    """
    text_columns, label_column, to_id = data.text_columns, data.label_column, data.labels.to_id

    def encode(batch, with_labels: bool):
        texts = [["" if text is None else str(text) for text in batch[column]] for column in text_columns]
        padding = "max_length" if data_args.pad_to_max_length else False
        encoded = tokenizer(*texts, truncation=True, max_length=data_args.max_seq_length, padding=padding)
        if with_labels:
            encoded[LABEL_COLUMN] = [to_id[normalise_label(value)] for value in batch[label_column]]
        encoded[LENGTH_COLUMN] = [len(ids) for ids in encoded["input_ids"]]
        return encoded

    tokenized = {}
    # Under several processes the main one tokenizes first and the others read its cache.
    with main_process_first(desc="tokenizing the dataset"):
        for split, dataset in data.raw.items():
            tokenized[split] = dataset.map(
                encode,
                fn_kwargs={"with_labels": split != "test" or data.test_has_labels},
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
