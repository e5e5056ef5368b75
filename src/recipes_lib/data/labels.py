"""Labels: what they mean (LabelMapping), which task they describe (from the training labels, or
--problem_type checked against them), and the checks on every labelled split's raw values, before
tokenization. Multi-label and regression labels have their own modules (multi_label.py, scores.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial

from datasets import ClassLabel, DatasetDict

from recipes_lib.config.arguments import DataArguments
from recipes_lib.config.tasks import AUTO, MULTI_LABEL, REGRESSION, SINGLE_LABEL
from recipes_lib.data.files import split_column_note
from recipes_lib.data.label_column import (
    JOINERS,
    ClassTally,
    LabelColumn,
    in_order,
    is_fraction,
    label_values,
    normalise_label,
    numbered,
    where,
)
from recipes_lib.errors import ConfigError, DataError

logger = logging.getLogger(__name__)


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
        return len(self.names)  # asked once a row by `encode`: no ClassLabel built for it

    @property
    def id2label(self) -> dict[int, str]:
        # Through datasets' ClassLabel, which refuses a name given twice.
        return dict(enumerate(ClassLabel(names=self.names).names))

    @property
    def label2id(self) -> dict[str, int]:
        return {name: i for i, name in self.id2label.items()}

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


def label_mapping(raw: DatasetDict, data_args: DataArguments, locate: dict) -> LabelMapping:
    """The task and its labels, checked on every split that has labels (normalised: `normalise_label`)."""
    label_column = data_args.label_column_name
    for split in ("train", "validation"):
        if label_column not in raw[split].column_names:
            raise DataError(
                f"Label column '{label_column}' is not in the {split} data; its columns are: "
                f"{', '.join(raw[split].column_names)}.{split_column_note(data_args, split)} Set --label_column_name "
                "to the column holding the labels."
            )
    feature, values = raw["train"].features[label_column], label_values(raw["train"], label_column)
    problem_type, delimiter = _problem_type(values, feature, data_args, locate)
    if problem_type == REGRESSION:
        mapping = LabelMapping(names=[label_column], to_id={}, problem_type=REGRESSION)
    elif problem_type == MULTI_LABEL:
        from recipes_lib.data.multi_label import multi_label_mapping  # loaded only for multi-label labels

        mapping = multi_label_mapping(values, feature, LabelMapping([], {}, MULTI_LABEL, delimiter), locate)
    else:
        mapping = _single_label_mapping(values, feature, label_column, locate)
    if data_args.label_names_file is not None:
        from recipes_lib.data.label_names import named  # loaded only with --label_names_file

        mapping = named(mapping, data_args.label_names_file)
    return _checked(mapping, raw, label_column, locate, values)


# An error lists at most this many of the training classes (a file of joined labels read whole has hundreds).
MAX_LISTED_CLASSES = 20


def _holds_joiner(values: LabelColumn) -> bool:
    """Whether a string label holds a JOINERS character: only then may labels be classes joined in a string."""
    return any(
        joiner in value for value in values.distinct[0] if isinstance(value, str) for joiner in JOINERS
    )


def _joined_note(values: LabelColumn) -> str:
    """For single-label classes that hold a joiner: which one, and the option that splits on it."""
    if not _holds_joiner(values):
        return ""
    from recipes_lib.data.multi_label import joined_note  # loaded only when a label holds a joiner

    return joined_note(values)


def _problem_type(
    values: LabelColumn, feature, data_args: DataArguments, locate: dict
) -> tuple[str, str | None]:
    """(the task the labels describe (lists or a delimiter: multi-label; fractions: regression), or the one
    asked for; the delimiter between a row's classes: --label_delimiter's, or the one the labels show)."""
    requested, delimiter = data_args.problem_type, data_args.label_delimiter
    # A datasets feature holding a list per row (List, Sequence, LargeList; [Value] in old releases).
    list_feature = isinstance(feature, list) or (
        hasattr(feature, "feature") and not isinstance(feature, ClassLabel)
    )
    lists = list_feature or values.lists
    if delimiter is not None or (requested in (AUTO, MULTI_LABEL) and not lists and _holds_joiner(values)):
        # Loaded only when the labels may be classes joined in a string.
        from recipes_lib.data.multi_label import read_delimiter

        delimiter = read_delimiter(values, delimiter, requested, lists)
    fraction = None if lists else values.first_fraction()
    if requested == AUTO:
        if lists or delimiter is not None:
            return MULTI_LABEL, delimiter
        if fraction is None and values.kind in ("number", "json"):
            from recipes_lib.data.scores import hint_integer_scores  # whole numbers that may be scores

            hint_integer_scores(values, feature)
        return (REGRESSION if fraction is not None else SINGLE_LABEL), None
    if requested != MULTI_LABEL and (lists or delimiter is not None):
        raise ConfigError(
            f"--problem_type {requested} takes one label per row, but the training labels are "
            f"{'lists' if lists else f'split on --label_delimiter {delimiter!r}'}, which means several classes per "
            "row. Use --problem_type multi_label_classification (or auto)."
        )
    if requested == SINGLE_LABEL and fraction is not None:
        raise DataError(
            f"{where(locate, 'train', fraction)} has the label {values.value(fraction)!r}, which is not a class: "
            "--problem_type single_label_classification needs class names, ids or booleans. For a score to "
            "predict, use --problem_type regression (or auto)."
        )
    return requested, delimiter if requested == MULTI_LABEL else None


def _single_label_mapping(values: LabelColumn, feature, label_column: str, locate: dict) -> LabelMapping:
    if isinstance(feature, ClassLabel):
        return numbered(LabelMapping([], {}), range(feature.num_classes), feature.names)
    tally = values.classes()
    if len(tally.kinds) > 1 or not tally.kinds <= {int, str}:
        kind_names = ", ".join(sorted(k.__name__ for k in tally.kinds))
        odd = tally.first(lambda c: not isinstance(c, int | str))
        if odd is None:  # integers and strings: name the first row whose type is not the first row's
            first_type = type(tally.first(lambda _: True)[1])
            odd = tally.first(lambda c: type(c) is not first_type)
        example = f" (e.g. {odd[1]!r} at {where(locate, 'train', odd[0])})" if odd is not None else ""
        raise DataError(
            f"Label column '{label_column}' mixes value types ({kind_names}){example}. Labels must be all integers "
            "(class ids), all booleans or all strings (class names) for classification, or all numbers for "
            "regression (--problem_type regression)."
        )
    classes = in_order(tally.counts)  # ids 0..K-1 keep their ids; other classes are numbered in sorted order
    joined = _joined_note(values)
    if joined:
        logger.warning("The labels are read as %d single classes.%s", len(classes), joined)
    names = [("False", "True")[c] if values.all_bools else str(c) for c in classes]
    return numbered(LabelMapping([], {}), classes, names)


def check_labels_present(raw: DatasetDict, label_column: str, locate: dict, delimiter: str | None) -> None:
    """Every training and validation row has a label; an error names the first that has none, where it is.

    With --label_delimiter a blank cell is a row of none of the classes, as [] is in a JSON list.
    """
    if delimiter:
        return
    for split in [name for name in ("train", "validation") if name in raw]:
        feature = raw[split].features.get(label_column)
        if feature is None or isinstance(feature, ClassLabel):
            continue  # a missing column is reported with the columns there are, later
        values = label_values(raw[split], label_column, f" (from {where(locate, split, 0)})")
        odd = (
            values.first_where(partial(_names_no_class, listed=values.listed))
            if values.kind == "json"
            else None
        )
        if odd is not None:
            raise DataError(
                f"{where(locate, split, odd)} has the label {values.value(odd)!r}, which names no class: labels must "
                "be class names or ids, booleans, numbers (regression), or lists of class names or ids (multi-label). "
                "Fix that row, or set --label_column_name to the column that holds the labels."
            )
        missing = values.first_missing()
        if missing is not None:
            raise DataError(
                f"{where(locate, split, missing)} has no label (empty '{label_column}'). Fill it in or remove the row."
            )


def _checked(
    mapping: LabelMapping, raw: DatasetDict, label_column: str, locate: dict, train: LabelColumn
) -> LabelMapping:
    """Every labelled split's labels mean something to this mapping: known classes, or numbers for regression."""
    # Multi-label may detect a single class (its rows without it are the negatives); single-label needs two.
    needed = {SINGLE_LABEL: 2, MULTI_LABEL: 1, REGRESSION: 0}[mapping.problem_type]
    if mapping.num_labels < needed:
        raise DataError(
            f"The training data has {mapping.num_labels} distinct label(s) in '{label_column}' "
            f"({mapping.names}, from {where(locate, 'train', 0)} on); classification needs at least {needed}."
        )
    for split in [name for name in ("train", "validation", "test") if name in raw]:
        if label_column not in raw[split].column_names:
            continue
        values = train if split == "train" else label_values(raw[split], label_column)
        if split == "test":
            from recipes_lib.data.hidden_labels import labelled_test  # loaded only with a test split

            if not labelled_test(values, raw["test"].features[label_column], locate):
                continue  # an unlabelled test split: predicted, not scored
        if mapping.problem_type == REGRESSION:
            from recipes_lib.data.scores import check_scores  # loaded only for regression

            check_scores(values, split, locate, label_column)
            continue
        if mapping.multi_hot:
            from recipes_lib.data.multi_label import check_flags  # multi-label only

            check_flags(values, mapping, split, locate)
        if split == "train":
            continue  # its classes are the mapping's own
        tally = _tally(values, mapping)
        unseen = [c for c in tally.counts if c not in mapping.to_id]
        if unseen:
            first, _ = tally.first(lambda c: c not in mapping.to_id)
            others = sorted({repr(v) for v in unseen})
            scores = any(is_fraction(v) for v in unseen)
            shown = MAX_LISTED_CLASSES
            raise DataError(
                f"The {split} data has label(s) the training data never uses: {', '.join(others[:5])}"
                f"{' ...' if len(others) > 5 else ''} (first at {where(locate, split, first)}). Training labels are: "
                f"{', '.join(mapping.names[:shown])}"
                f"{f' ... ({mapping.num_labels} in all)' if mapping.num_labels > shown else ''}. Fix those labels, "
                f"or add training examples of those classes"
                f"{'; if the labels are scores, train with --problem_type regression' if scores else ''}."
                f"{_joined_note(values) if mapping.problem_type == SINGLE_LABEL else ''}"
            )
    return mapping


def describe_labels(mapping: LabelMapping, dataset, label_column: str) -> str:
    """One log line's worth: rows per class, classes per row (multi-label), or the range of the scores."""
    values = label_values(dataset, label_column)
    if mapping.problem_type == REGRESSION:
        from recipes_lib.data.scores import describe_scores  # loaded only for regression

        return describe_scores(values, mapping.names[0])
    counts = _tally(values, mapping).counts
    described = ", ".join(
        f"{mapping.names[mapping.to_id[k]]} {n}"
        for k, n in sorted(counts.items(), key=lambda kv: mapping.to_id[kv[0]])
    )
    if mapping.problem_type == MULTI_LABEL:
        return f"rows with each class: {described}; {sum(counts.values()) / values.rows:.2f} classes per row"
    return f"classes: {described}"


def _names_no_class(value, listed: bool) -> bool:
    """A JSON object, or a list inside a list: it names no class (and cannot be counted as one)."""
    return isinstance(value, dict) or (
        isinstance(value, list) and (listed or any(isinstance(item, dict | list) for item in value))
    )


def _tally(values: LabelColumn, mapping: LabelMapping) -> ClassTally:
    """The rows' classes as the mapping reads them."""
    if mapping.problem_type != MULTI_LABEL:
        return values.classes()
    from recipes_lib.data.multi_label import multi_label_tally  # multi-label only

    return multi_label_tally(values, mapping)
