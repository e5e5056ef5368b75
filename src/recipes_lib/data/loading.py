"""Data: load a Hub dataset or local files and check them; labels.py maps the labels, tokenize.py tokenizes.

Every check that can fail on the data runs on the raw text, before tokenization and before the
model weights are loaded, so a bad column name costs seconds, not a download.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc
from datasets import Dataset, DatasetDict

from recipes_lib.config.arguments import DataArguments
from recipes_lib.data.files import DELIMITED, has_rows, parse_delimiter, read_local_files, split_column_note
from recipes_lib.data.labels import (
    LabelMapping,
    check_labels_present,
    describe_labels,
    label_mapping,
    label_values,
)
from recipes_lib.data.long_text import refuse_oversized_texts
from recipes_lib.errors import ConfigError, DataError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
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
    # Per split, what max_seq_length cuts (data/long_text.py truncation_report), from tokenize.
    truncation: dict = field(default_factory=dict)


def listed(names: list[str], most: int = 20) -> str:
    """'a, b, c', or the first `most` and how many more: a file of 10,000 columns stays one readable paragraph."""
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"


def describe_source(data_args: DataArguments) -> str:
    if data_args.train_file is not None:
        return data_args.train_file
    from recipes_lib.data.hub_dataset import hub_name  # loaded only by a run on a Hub dataset

    return hub_name(data_args)


def _read_local_files(data_args: DataArguments, cache_dir: str | None) -> tuple[DatasetDict, dict]:
    named = {split: getattr(data_args, f"{split}_file") for split in ("train", "validation", "test")}
    files = {split: path for split, path in named.items() if path or split == "train"}
    column_names = None
    if data_args.column_names is not None:
        column_names = [name.strip() for name in data_args.column_names.split(",")]
        if not any(Path(path).suffix.lower() in DELIMITED for path in files.values()):
            raise ConfigError(
                f"--column_names names the columns of a .csv or .tsv file with no header, but the data files "
                f"({', '.join(files.values())}) are not .csv or .tsv: their records name their own fields. "
                "Leave --column_names out."
            )
    # datasets reports an empty file as 'Instruction "train" corresponds to no data!'; say it plainly.
    for split, path in files.items():
        if not has_rows(path, header=column_names is None):
            raise DataError(
                f"The {'training' if split == 'train' else split} data ({path}) is empty: it holds no examples"
                f"{' below the header' if Path(path).suffix.lower() in DELIMITED and column_names is None else ''}. "
                f"Point --{split}_file at a file with rows."
            )
    return read_local_files(
        files, cache_dir, data_args.csv_quoting, parse_delimiter(data_args.delimiter), column_names
    )


def _resolve_text_columns(data_args: DataArguments, train: Dataset) -> tuple[str, ...]:
    found = train.column_names
    if data_args.text_column_names is not None:
        columns = tuple(c.strip() for c in data_args.text_column_names.split(",") if c.strip())
        missing = [c for c in columns if c not in found]
        if missing:
            raise DataError(
                f"Text column '{missing[0]}' is not in the training data ({describe_source(data_args)}); its columns are: {listed(found)}."
                f"{split_column_note(data_args, 'train')} Set --text_column_names to one of them (or two, "
                "comma-separated, for pairs)."
            )
        return columns
    candidates = [
        name
        for name, feature in train.features.items()
        if name != data_args.label_column_name
        and getattr(feature, "dtype", None) in ("string", "large_string")
    ]
    # Only a pair can hide an id beside its text (and a wide file's every column is not scanned).
    ids = [name for name in candidates if _is_id_column(train, name)] if len(candidates) == 2 else []
    if len(ids) == 1:
        # A comment id beside its comment: a second text only a user names trains as a sentence pair.
        (text,) = [name for name in candidates if name not in ids]
        logger.warning(
            "Column '%s' is not used as text: it is unique per row and holds no spaces (an id, e.g. %r). The "
            "text is '%s'. To train on both as a sentence pair, give --text_column_names %s,%s.",
            ids[0], train[0][ids[0]], text, text, ids[0],
        )  # fmt: skip
        return (text,)
    if not 1 <= len(candidates) <= 2:
        raise DataError(
            f"Cannot tell which columns of {describe_source(data_args)} hold the text: string columns other than the label are "
            f"{listed(candidates) or 'none'} (all columns: {listed(found)}).{split_column_note(data_args, 'train')} "
            "Name them with --text_column_names (one column, or two comma-separated for pairs)."
        )
    if len(candidates) == 2:
        logger.warning(
            "Training on sentence pairs: '%s' and '%s', the string columns besides the label. To train on one "
            "text, name it with --text_column_names.",
            *candidates,
        )
    return tuple(candidates)


def _is_id_column(train: Dataset, column: str) -> bool:
    """Whether a string column reads as a row id: a distinct value in every row (two rows at least), none
    holding a space, as comment or document ids do ('eebbqej', 't3_8gjk2'); texts have spaces."""
    values = train.with_format("arrow")[column]
    if len(values) < 2 or values.null_count:
        return False
    return (
        pc.count_distinct(values).as_py() == len(values)
        and not pc.any(pc.match_substring_regex(values, r"\s")).as_py()
    )


def load_classification_data(
    data_args: DataArguments, cache_dir: str | None = None, seed: int = 42
) -> ClassificationData:
    """Load and check the raw data: columns, labels, non-empty splits. No tokenization yet."""
    label_column = data_args.label_column_name
    if data_args.train_file is not None:
        if data_args.split_column is not None:
            from recipes_lib.data.split_column import check_split_column_options, split_by_column

            check_split_column_options(data_args)
        raw, locate = _read_local_files(data_args, cache_dir)
        sources = {split: Path(getattr(data_args, f"{split}_file")).name for split in raw}
        if data_args.split_column is not None:
            raw, locate, sources = split_by_column(raw, locate, data_args.split_column, data_args.train_file)
    else:
        from recipes_lib.data.hub_dataset import read_hub_dataset  # loaded only by a run on a Hub dataset

        raw, locate = read_hub_dataset(data_args, cache_dir), {}
        sources = {"validation": data_args.validation_split_name, "test": data_args.test_split_name}
    if len(raw["train"]) == 0:
        raise DataError(
            f"The training data ({describe_source(data_args)}) is empty. Point --train_file at a file with rows."
        )
    # Before a hold-out shuffles the rows.
    check_labels_present(raw, label_column, locate, data_args.label_delimiter)
    if "validation" not in raw:
        held_out = raw["train"].train_test_split(
            test_size=data_args.validation_split_percentage / 100, seed=seed
        )
        logger.warning(
            "No validation split or file: holding out %d%% of train (%d examples) for evaluation.",
            data_args.validation_split_percentage,
            len(held_out["test"]),
        )
        raw = DatasetDict({**raw, "train": held_out["train"], "validation": held_out["test"]})
        locate.pop("train", None)  # rows were shuffled into two splits: their lines are no longer known
        sources["validation"] = f"{data_args.validation_split_percentage}% of train held out"
    if len(raw["validation"]) == 0:
        raise DataError(
            f"The validation data ({data_args.validation_file or describe_source(data_args)}) is empty. "
            "Give a validation file with rows, or leave it out to hold out part of train."
        )
    for split, most in (("train", data_args.max_train_samples), ("validation", data_args.max_eval_samples)):
        if most is not None:
            raw[split] = raw[split].select(range(min(most, len(raw[split]))))

    text_columns = _resolve_text_columns(data_args, raw["train"])
    for split in [name for name in ("validation", "test") if name in raw]:
        for column in text_columns:
            if column not in raw[split].column_names:
                raise DataError(
                    f"Text column '{column}' is in train but not in {split}; {split} columns are: "
                    f"{listed(raw[split].column_names)}.{split_column_note(data_args, split)}"
                )
    refuse_oversized_texts(raw, text_columns, data_args.max_text_chars, sources, locate)
    labels = label_mapping(raw, data_args, locate)
    test, test_has_labels = raw.get("test"), False
    if test is not None and label_column in test.column_names:
        from recipes_lib.data.hidden_labels import labelled_test  # loaded only with a test split

        test_has_labels = labelled_test(label_values(test, label_column), test.features[label_column], locate)
    for split, dataset in raw.items():
        if split != "test" or test_has_labels:
            logger.info(
                "%s (%s): %d rows; %s",
                split,
                sources.get(split) or split,
                len(dataset),
                describe_labels(labels, dataset, label_column),
            )
    return ClassificationData(
        raw=raw,
        text_columns=text_columns,
        label_column=label_column,
        labels=labels,
        description=describe_source(data_args),
        split_sources={split: sources.get(split) or split for split in raw},
        test_has_labels=test_has_labels,
    )
