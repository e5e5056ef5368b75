"""Data: load a Hub dataset or local files, map labels to ids, tokenize (cached), collate.

Every check that can fail on the data runs on the raw text, before tokenization and before the
model weights are loaded, so a bad column name costs seconds, not a download.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from datasets import ClassLabel, Dataset, DatasetDict

from recipes_lib.config.arguments import DataArguments, dataset_source
from recipes_lib.config.tasks import AUTO, MULTI_LABEL, REGRESSION, SINGLE_LABEL
from recipes_lib.data.files import has_rows, read_local_files
from recipes_lib.errors import ConfigError, DataError

logger = logging.getLogger(__name__)

LABEL_COLUMN = "labels"  # what the model's forward() expects
LENGTH_COLUMN = "length"  # tokens per example, read by the length-grouped sampler


@dataclass
class LabelMapping:
    """What the labels mean: class names in id order (or the score's name), and the kind of task.

    String labels are sorted, so ids are stable across runs. A regression task has one "class",
    named after its label column: the model has one output.
    """

    names: list[str]
    # Raw label value -> id. Identity for ClassLabel features and for ints that are already 0..K-1.
    to_id: dict = field(repr=False)
    problem_type: str = SINGLE_LABEL
    # Multi-label from strings: the separator between a row's classes ('billing;shipping'); a blank
    # cell is then a row of none of the classes.
    delimiter: str | None = None
    # Multi-label as 0/1 flags, one per class, in every row ([0, 1, 1]): classes by position.
    multi_hot: bool = False

    @property
    def num_labels(self) -> int:
        return len(self.names)

    @property
    def id2label(self) -> dict[int, str]:
        return dict(enumerate(self.names))

    @property
    def label2id(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    def classes_of(self, value) -> list:
        """A multi-label row's classes, as raw values (normalised): a list as is, a string split, a scalar alone."""
        if isinstance(value, list | tuple):
            if self.multi_hot:
                return [position for position, flag in enumerate(value) if normalise_label(flag) == 1]
            return [normalise_label(v) for v in value]
        value = normalise_label(value)
        if self.delimiter is not None:
            # A file where no row holds the delimiter reads as numbers ('2'): its classes are still strings.
            text = "" if value is None else str(value)
            return [part.strip() for part in text.split(self.delimiter) if part.strip()]
        return [value]

    def encode(self, value):
        """What the model is trained on: a class id, a multi-hot row of 0.0/1.0, or a float."""
        if self.problem_type == REGRESSION:
            return float(value)
        if self.problem_type == MULTI_LABEL:
            row = [0.0] * self.num_labels
            for raw in self.classes_of(value):
                row[self.to_id[raw]] = 1.0
            return row
        return self.to_id[normalise_label(value)]


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


def _label_mapping(raw: DatasetDict, data_args: DataArguments, locate: dict) -> LabelMapping:
    """The task and its labels, checked on every split that has labels.

    Labels are normalised first (`normalise_label`): booleans are classes 0 and 1 (False, True),
    integers written as floats (1.0, from a CSV column with a blank) are integers, and strings lose
    stray whitespace, so 'billing ' and 'billing' are one class.
    """
    label_column = data_args.label_column_name
    for split in ("train", "validation"):
        if label_column not in raw[split].column_names:
            raise DataError(
                f"Label column '{label_column}' is not in the {split} data; its columns are: "
                f"{', '.join(raw[split].column_names)}. Set --label_column_name to the column holding the labels."
            )
    feature, values = raw["train"].features[label_column], raw["train"][label_column]
    problem_type = _problem_type(values, feature, data_args, locate)
    if problem_type == REGRESSION:
        mapping = LabelMapping(names=[label_column], to_id={}, problem_type=REGRESSION)
    elif problem_type == MULTI_LABEL:
        mapping = _multi_label_mapping(values, feature, data_args.label_delimiter, locate)
    else:
        mapping = _single_label_mapping(values, feature, label_column, locate)
    return _checked(mapping, raw, label_column, locate)


def _is_list_feature(feature) -> bool:
    """A datasets feature holding a list per row (List, Sequence, LargeList; [Value] in old releases)."""
    return isinstance(feature, list) or (hasattr(feature, "feature") and not isinstance(feature, ClassLabel))


def _problem_type(values: list, feature, data_args: DataArguments, locate: dict) -> str:
    """The task the labels describe (lists or a delimiter: multi-label; fractions: regression), or the one asked for."""
    requested, delimiter = data_args.problem_type, data_args.label_delimiter
    if delimiter == "":
        raise ConfigError(
            "--label_delimiter is empty; give the string between a row's classes, e.g. ';' or '|'."
        )
    lists = _is_list_feature(feature) or any(isinstance(value, list | tuple) for value in values)
    if delimiter is not None and (lists or not any(isinstance(normalise_label(v), str) for v in values)):
        raise ConfigError(
            f"--label_delimiter '{delimiter}' splits string labels, but the training labels are "
            f"{'lists already' if lists else 'not strings'}. Leave --label_delimiter out."
        )
    fraction = None if lists else next((i for i, v in enumerate(values) if _is_fraction(v)), None)
    if requested == AUTO:
        if lists or delimiter is not None:
            return MULTI_LABEL
        return REGRESSION if fraction is not None else SINGLE_LABEL
    if requested != MULTI_LABEL and (lists or delimiter is not None):
        raise ConfigError(
            f"--problem_type {requested} takes one label per row, but the training labels are "
            f"{'lists' if lists else f'split on --label_delimiter {delimiter!r}'}, which means several classes per "
            "row. Use --problem_type multi_label_classification (or auto)."
        )
    if requested == SINGLE_LABEL and fraction is not None:
        raise DataError(
            f"{_where(locate, 'train', fraction)} has the label {values[fraction]!r}, which is not a class: "
            "--problem_type single_label_classification needs class names, ids or booleans. For a score to "
            "predict, use --problem_type regression (or auto)."
        )
    return requested


def _multi_hot(values: list) -> bool:
    """Whether list labels are 0/1 flags, one per class, rather than the classes themselves.

    Every row a list of the same length (at least 2) holding only 0 and 1: a list of class ids
    varies in length from row to row, and [0, 1, 0] would name class 0 twice.
    """
    if not values or not all(isinstance(value, list | tuple) for value in values):
        return False
    widths = {len(value) for value in values}
    flags = {normalise_label(flag) for value in values for flag in value}
    return len(widths) == 1 and widths.pop() >= 2 and flags <= {0, 1}


def _is_fraction(value) -> bool:
    return isinstance(value, float) and not isinstance(value, bool) and not value.is_integer()


def _is_number(value) -> bool:
    """Whether a label can be a regression target: a finite number (a numeric string, from JSON, too)."""
    if isinstance(value, bool) or value is None:
        return False
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _single_label_mapping(values: list, feature, label_column: str, locate: dict) -> LabelMapping:
    if isinstance(feature, ClassLabel):
        names = list(feature.names)
        return LabelMapping(names=names, to_id={i: i for i in range(len(names))})
    train_values = [normalise_label(value) for value in values]
    kinds = {type(value) for value in train_values}
    if len(kinds) > 1 or not kinds <= {int, str}:
        kind_names = ", ".join(sorted(k.__name__ for k in kinds))
        odd = next((i for i, v in enumerate(train_values) if not isinstance(v, int | str)), None)
        example = (
            f" (e.g. {train_values[odd]!r} at {_where(locate, 'train', odd)})" if odd is not None else ""
        )
        raise DataError(
            f"Label column '{label_column}' mixes value types ({kind_names}){example}. Labels must be all integers "
            "(class ids), all booleans or all strings (class names) for classification, or all numbers for "
            "regression (--problem_type regression)."
        )
    unique = sorted(set(train_values))
    if kinds == {int} and unique == list(range(len(unique))):
        mapping = LabelMapping(names=[str(v) for v in unique], to_id={v: v for v in unique})
    else:
        mapping = LabelMapping(names=[str(v) for v in unique], to_id={v: i for i, v in enumerate(unique)})
    if all(isinstance(value, bool) for value in values):
        mapping.names = ["False", "True"][: mapping.num_labels]
    return mapping


def _multi_label_mapping(values: list, feature, delimiter: str | None, locate: dict) -> LabelMapping:
    """Class names from every class a training row names; a Hub list of ClassLabel keeps its names and order."""
    inner = getattr(feature, "feature", None)
    if isinstance(inner, ClassLabel):
        names = list(inner.names)
        return LabelMapping(names, {i: i for i in range(len(names))}, MULTI_LABEL, delimiter)
    if _multi_hot(values):
        width = len(values[0])
        logger.info(
            "Labels are rows of %d 0/1 flags: class i is the i-th flag, named '%d' to '%d'.",
            width,
            0,
            width - 1,
        )
        return LabelMapping(
            [str(i) for i in range(width)], {i: i for i in range(width)}, MULTI_LABEL, multi_hot=True
        )
    probe = LabelMapping([], {}, MULTI_LABEL, delimiter)
    seen: set = set()
    for index, value in enumerate(values):
        classes = probe.classes_of(value)
        odd = next(
            (i for i, c in enumerate(classes) if isinstance(c, bool) or not isinstance(c, int | str)), None
        )
        if odd is not None:
            raise DataError(
                f"{_where(locate, 'train', index)} lists {classes[odd]!r} among its classes; a multi-label row lists "
                "class names (strings) or class ids (integers). Fix that row."
            )
        if len(set(classes)) != len(classes):
            raise DataError(
                f"{_where(locate, 'train', index)} has the labels {value!r}, which name a class twice. A multi-label "
                "row lists each of its classes once (['billing', 'shipping']); a row of 0/1 flags per class must be "
                "written as the names of the classes flagged."
            )
        seen.update(classes)
    if len({type(c) for c in seen}) > 1:
        raise DataError(
            "The multi-label rows mix class names and class ids (strings and integers). Use one or the other."
        )
    unique = sorted(seen)
    identity = all(isinstance(c, int) for c in unique) and unique == list(range(len(unique)))
    to_id = {c: c for c in unique} if identity else {c: i for i, c in enumerate(unique)}
    return LabelMapping([str(c) for c in unique], to_id, MULTI_LABEL, delimiter)


def _check_labels_present(raw: DatasetDict, label_column: str, locate: dict, delimiter: str | None) -> None:
    """Every training and validation row has a label; an error names the first that has none, where it is.

    With --label_delimiter a blank cell is a row of none of the classes, as [] is in a JSON list.
    """
    if delimiter:
        return
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
    """Every labelled split's labels mean something to this mapping: known classes, or numbers for regression."""
    # Multi-label may detect a single class (its rows without it are the negatives); single-label needs two.
    needed = {SINGLE_LABEL: 2, MULTI_LABEL: 1, REGRESSION: 0}[mapping.problem_type]
    if mapping.num_labels < needed:
        raise DataError(
            f"The training data has {mapping.num_labels} distinct label(s) in '{label_column}' "
            f"({mapping.names}); classification needs at least {needed}."
        )
    for split in [name for name in ("train", "validation", "test") if name in raw]:
        if label_column not in raw[split].column_names:
            continue
        values = raw[split][label_column]
        if split == "test":
            unlabelled = [unlabelled_value(v, raw["test"].features[label_column]) for v in values]
            if labels_hidden(values, raw["test"].features[label_column]):
                continue  # an unlabelled test split: predicted, not scored
            if any(unlabelled):
                first = unlabelled.index(True)
                raise DataError(
                    f"{_where(locate, split, first)} has no label, but other test rows have one. Label every "
                    "test row (it is then scored) or none (it is then only predicted)."
                )
        if mapping.problem_type == REGRESSION:
            bad = next((i for i, v in enumerate(values) if not _is_number(v)), None)
            if bad is not None:
                raise DataError(
                    f"{_where(locate, split, bad)} has the label {values[bad]!r}, which is not a number; regression "
                    f"learns a score per row, so every '{label_column}' must be a finite number. Fix that row, or, "
                    "for classes, use --problem_type auto or single_label_classification."
                )
            continue
        if mapping.multi_hot:
            bad = next(
                (
                    i
                    for i, v in enumerate(values)
                    if not isinstance(v, list | tuple) or len(v) != mapping.num_labels
                ),
                None,
            )
            if bad is not None:
                raise DataError(
                    f"{_where(locate, split, bad)} has the labels {values[bad]!r}, but the training rows are "
                    f"{mapping.num_labels} 0/1 flags, one per class. Give every row the same {mapping.num_labels} flags."
                )
        if split == "train":
            continue  # its classes are the mapping's own
        classes = (
            mapping.classes_of if mapping.problem_type == MULTI_LABEL else lambda v: [normalise_label(v)]
        )
        unseen = [(i, c) for i, v in enumerate(values) for c in classes(v) if c not in mapping.to_id]
        if unseen:
            first, value = unseen[0]
            others = sorted({repr(v) for _, v in unseen})
            raise DataError(
                f"The {split} data has label(s) the training data never uses: {', '.join(others[:5])}"
                f"{' ...' if len(others) > 5 else ''} (first at {_where(locate, split, first)}). Training labels are: "
                f"{', '.join(mapping.names)}. Fix those labels, or add training examples of those classes"
                + (
                    "; if the labels are scores, train with --problem_type regression."
                    if any(_is_fraction(v) for _, v in unseen)
                    else "."
                )
            )
    return mapping


def describe_labels(mapping: LabelMapping, values: list) -> str:
    """One log line's worth: rows per class, classes per row (multi-label), or the range of the scores."""
    if mapping.problem_type == REGRESSION:
        scores = [float(v) for v in values]
        return (
            f"score '{mapping.names[0]}' mean {sum(scores) / len(scores):.3g}, min {min(scores):.3g}, "
            f"max {max(scores):.3g}"
        )
    classes = mapping.classes_of if mapping.problem_type == MULTI_LABEL else lambda v: [normalise_label(v)]
    rows = [classes(value) for value in values]
    counts = Counter(c for row in rows for c in row)
    described = ", ".join(
        f"{mapping.names[mapping.to_id[k]]} {n}"
        for k, n in sorted(counts.items(), key=lambda kv: mapping.to_id[kv[0]])
    )
    if mapping.problem_type == MULTI_LABEL:
        return f"rows with each class: {described}; {sum(map(len, rows)) / len(rows):.2f} classes per row"
    return f"classes: {described}"


def _where(locate: dict, split: str, index: int) -> str:
    """'train.csv line 17' (or 'training row 17' where the source has no lines)."""
    if split in locate:
        return locate[split](index)
    return f"{split} row {index + 1}"


def labels_hidden(values: list, feature) -> bool:
    """Whether a test split's labels are all absent: empty, or -1 everywhere (GLUE's hidden test labels,
    in a ClassLabel or, for STS-B, a float column)."""
    return all(unlabelled_value(v, feature) for v in values) or all(normalise_label(v) == -1 for v in values)


def unlabelled_value(value, feature) -> bool:
    """Whether a raw label value means "no label": empty, or -1 in a ClassLabel (GLUE's test splits)."""
    value = normalise_label(value)
    return value is None or value == "" or (isinstance(feature, ClassLabel) and value == -1)


def normalise_label(value):
    """The class a raw label value means: bools and integral floats as ints, strings stripped, NaN as none."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and math.isnan(value):
        return None  # a blank cell in a numeric column
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
    _check_labels_present(
        raw, data_args.label_column_name, locate, data_args.label_delimiter
    )  # before a hold-out shuffles the rows
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
    labels = _label_mapping(raw, data_args, locate)
    test_has_labels = (
        "test" in raw
        and data_args.label_column_name in raw["test"].column_names
        and not labels_hidden(
            raw["test"][data_args.label_column_name], raw["test"].features[data_args.label_column_name]
        )
    )
    for split, dataset in raw.items():
        if split != "test" or test_has_labels:
            logger.info(
                "%s (%s): %d rows; %s",
                split,
                sources.get(split) or split,
                len(dataset),
                describe_labels(labels, dataset[data_args.label_column_name]),
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
    text_columns, label_column, labels = data.text_columns, data.label_column, data.labels

    def encode(batch, with_labels: bool):
        texts = [["" if text is None else str(text) for text in batch[column]] for column in text_columns]
        padding = "max_length" if data_args.pad_to_max_length else False
        encoded = tokenizer(*texts, truncation=True, max_length=data_args.max_seq_length, padding=padding)
        if with_labels:
            encoded[LABEL_COLUMN] = [labels.encode(value) for value in batch[label_column]]
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
