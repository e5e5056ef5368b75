"""Inputs longer than --max_seq_length (issue #22), for one text column: `truncate`, `head_tail` (Sun et al.
2019) or `sliding_window` (each window a row with its `document_id`; evaluation/windows.py combines them),
in the room max_seq_length leaves beside the special tokens; and each document's whole length, which
`truncation_report` turns into the figures logged and kept in results.json. docs/data-and-tasks.md,
"Long texts", says it for users.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recipes_lib.errors import ConfigError, DataError

TRUNCATE, HEAD_TAIL, SLIDING_WINDOW = "truncate", "head_tail", "sliding_window"
DOCUMENT_COLUMN = "document_id"  # sliding_window: the input row each window came from
DOCUMENT_LENGTH_COLUMN = "document_length"  # the whole input's tokens, special tokens included
# head_tail: the head's share of the room (128 of 510 in Sun et al. 2019).
HEAD_SHARE = 0.25
# Above this share of a split's examples cut (say 5% of training), the run warns and names the flags that keep them.
CUT_WARNING_SHARE = 0.05

logger = logging.getLogger("recipes_lib")


@dataclass(frozen=True)
class SpecialTokens:
    """How many special tokens a tokenizer puts before and after one text ([CLS] ... [SEP]: 1 and 1)."""

    before: int
    after: int

    @classmethod
    def of(cls, tokenizer) -> SpecialTokens:
        # Read from the tokenizer itself: a probe word with and without its special tokens.
        bare = tokenizer("long", add_special_tokens=False)["input_ids"]
        full = tokenizer("long")["input_ids"]
        before = next((i for i in range(len(full) - len(bare) + 1) if full[i : i + len(bare)] == bare), None)
        if before is None:
            raise ConfigError(
                f"The tokenizer {type(tokenizer).__name__} does not put a text between its special tokens, "
                "so --long_text head_tail and sliding_window cannot cut it; use --long_text truncate."
            )
        return cls(before=before, after=len(full) - len(bare) - before)

    def room(self, max_length: int) -> int:
        """Text tokens that fit in max_length beside the special tokens."""
        return max_length - self.before - self.after


def cut_document(
    ids: list[int], special: SpecialTokens, room: int, mode: str, stride: int
) -> list[list[int]]:
    """The token ids the model sees of one document, `ids` with its special tokens: one row, or windows."""
    end = len(ids) - special.after
    before, text, after = ids[: special.before], ids[special.before : end], ids[end:]
    if len(text) <= room:
        return [ids]
    if mode == TRUNCATE:
        return [before + text[:room] + after]
    if mode == HEAD_TAIL:
        head = int(room * HEAD_SHARE)
        return [before + text[:head] + text[len(text) - (room - head) :] + after]
    step = room - stride
    # Windows start every `step` tokens; the last one is the first that reaches the end of the text.
    starts = range(0, max(len(text) - stride, 1), step)
    return [before + text[start : start + room] + after for start in starts]


def encode_long_texts(tokenizer, texts: list[str], data_args, indices: list[int], max_windows: int | None):
    """One text column tokenized whole, then cut as --long_text says: the model's columns, the input row of
    each output row (`rows`), and each output row's document id and whole length."""
    special = SpecialTokens.of(tokenizer)
    room = special.room(data_args.max_seq_length)
    # Whole on purpose (cut below): verbose=False keeps the tokenizer's "longer than the specified maximum
    # sequence length ... indexing errors" warning, for this call only, from a run that never indexes past it.
    whole = tokenizer(
        texts,
        add_special_tokens=True,
        return_attention_mask=False,
        return_token_type_ids=False,
        verbose=False,
    )
    encoded: dict[str, list] = {"input_ids": [], "rows": [], DOCUMENT_COLUMN: [], DOCUMENT_LENGTH_COLUMN: []}
    for row, ids in enumerate(whole["input_ids"]):
        windows = cut_document(ids, special, room, data_args.long_text, data_args.stride)
        windows = windows[:max_windows] if max_windows is not None else windows
        encoded["input_ids"].extend(windows)
        encoded["rows"].extend([row] * len(windows))
        encoded[DOCUMENT_COLUMN].extend([indices[row]] * len(windows))
        encoded[DOCUMENT_LENGTH_COLUMN].extend([len(ids)] * len(windows))
    names = tokenizer.model_input_names
    if "attention_mask" in names:
        encoded["attention_mask"] = [[1] * len(ids) for ids in encoded["input_ids"]]
    if "token_type_ids" in names:
        encoded["token_type_ids"] = [[0] * len(ids) for ids in encoded["input_ids"]]
    if data_args.pad_to_max_length:
        model_columns = {key: encoded[key] for key in names if key in encoded}
        padded = tokenizer.pad(model_columns, padding="max_length", max_length=data_args.max_seq_length)
        encoded.update({key: list(padded[key]) for key in model_columns})
    return encoded


def check_long_text_columns(data_args, text_columns: tuple[str, ...]) -> None:
    """head_tail and sliding_window cut one text; a sentence pair is an error that says what to do."""
    if data_args.long_text != TRUNCATE and len(text_columns) > 1:
        raise ConfigError(
            f"--long_text {data_args.long_text} cuts one text, but this data is a pair of texts "
            f"({' + '.join(text_columns)}): which one to cut or window depends on the task. Use --long_text "
            "truncate (the tokenizer cuts the longer text first), or join the texts into one column."
        )


def document_ids(dataset) -> np.ndarray | None:
    """Under --long_text sliding_window, the document of each row (the rows are windows); else None."""
    if DOCUMENT_COLUMN not in dataset.column_names:
        return None
    return dataset.data.column(DOCUMENT_COLUMN).to_numpy()


def document_lengths(dataset) -> np.ndarray:
    """The whole length of each document of a tokenized split (one per document, however many windows)."""
    lengths = dataset.data.column(DOCUMENT_LENGTH_COLUMN).to_numpy()
    if DOCUMENT_COLUMN not in dataset.column_names:
        return lengths
    _, first_rows = np.unique(dataset.data.column(DOCUMENT_COLUMN).to_numpy(), return_index=True)
    return lengths[np.sort(first_rows)]


def truncation_report(
    lengths: np.ndarray, rows: int, max_seq_length: int, model_limit: int | None
) -> dict[str, Any]:
    """What max_seq_length cuts of one split (the figures docs/data-and-tasks.md lists). Lengths count the
    special tokens; the percentiles are never capped at `model_limit`, whose share is its own figure."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) == 0:
        return {"examples": 0}
    over = lengths > max_seq_length
    ordered = np.sort(lengths)

    def percentile(share: float) -> int:
        # The shortest length that at least `share` of the examples fit in whole (nearest rank).
        return int(ordered[math.ceil(share * len(ordered)) - 1])

    return {
        "examples": len(lengths),
        "rows": rows,
        "longer_than_max_seq_length": int(over.sum()),
        "longer_share": round(float(over.mean()), 4),
        "tokens_past_max_seq_length_share": round(
            float(np.clip(lengths - max_seq_length, 0, None).sum() / lengths.sum()), 4
        ),
        "median_length": int(np.median(lengths)),
        "longest": int(lengths.max()),
        "length_keeping_95pct": percentile(0.95),
        "length_keeping_99pct": percentile(0.99),
        "max_seq_length_keeps_share": round(float((~over).mean()), 4),
        "model_max_length": model_limit,
        "model_max_length_keeps_share": (
            None if model_limit is None else round(float((lengths <= model_limit).mean()), 4)
        ),
    }


@dataclass(frozen=True)
class LengthsRead:
    """Who reads the lengths, which decides what the log may advise."""

    pair: bool = False  # sentence pairs: cut longer text first; head_tail and sliding_window refuse them
    # Predict and export read rows as this finished run was trained: they can change neither max_seq_length
    # nor --long_text, so they name its settings. None: a recipe about to train, which may change both.
    finished_run: str | None = None
    names: dict[str, str] = field(default_factory=dict)  # the log's name of a split (predict: its input)


RECIPE_READ = LengthsRead()  # a recipe about to train, on one text per row


def _length_line(split: str, report: dict[str, Any], data_args) -> str:
    """One split's figures: examples cut, the percentiles, and what each limit keeps whole."""
    limit = report["model_max_length"]
    model = (
        f", the model's limit of {limit} keeps {100 * report['model_max_length_keeps_share']:.1f}%"
        if limit
        else ""
    )
    windows = f"; {report['rows']} windows" if data_args.long_text == SLIDING_WINDOW else ""
    return (
        f"Lengths of {split} (max_seq_length {data_args.max_seq_length}, --long_text {data_args.long_text}): "
        f"{report['longer_than_max_seq_length']} of {report['examples']} examples longer "
        f"({100 * report['longer_share']:.1f}%, {100 * report['tokens_past_max_seq_length_share']:.1f}% of "
        f"tokens), median {report['median_length']}, longest {report['longest']}; 95% are at most "
        f"{report['length_keeping_95pct']} tokens, 99% at most {report['length_keeping_99pct']}; max_seq_length "
        f"keeps {100 * report['max_seq_length_keeps_share']:.1f}% whole{model}{windows}"
    )


def log_truncation(reports: dict[str, dict[str, Any]], data_args, read: LengthsRead = RECIPE_READ) -> None:
    """One line per split; a warning when more than CUT_WARNING_SHARE of a split's examples lose tokens."""
    for split, report in reports.items():
        if report.get("examples"):
            logger.info("%s", _length_line(read.names.get(split, split), report, data_args))
    # Training is what the threshold is about; an evaluated split cut much more (SST-2's validation
    # sentences are longer than its training phrases) deserves the same warning.
    cut = {
        read.names.get(split, split): r
        for split, r in reports.items()
        if r.get("longer_share", 0) > CUT_WARNING_SHARE
    }
    if data_args.long_text != SLIDING_WINDOW and cut:
        from recipes_lib.data.length_advice import warn_cut  # loaded only when a split is cut that much

        warn_cut(cut, data_args, read)


def refuse_oversized_texts(
    raw, text_columns: tuple[str, ...], max_chars: int, sources: dict[str, str], locate: dict
) -> None:
    """A text field longer than --max_text_chars, refused before tokenizing (columnar: Arrow's lengths), in
    each split's own rows (a selected or held-out split shares another's table: `dataset.data` would not do)."""
    for split, dataset in raw.items():
        for column in text_columns:
            values = dataset.with_format("arrow")[column]
            if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
                continue
            lengths = pc.utf8_length(values)
            longest = pc.max(lengths).as_py()
            if longest is not None and longest > max_chars:
                row = pc.index(lengths, longest).as_py()
                where = (
                    locate[split](row)
                    if split in locate
                    else f"Row {row + 1} of {sources.get(split) or split}"
                )
                raise DataError(
                    f"{where} has a '{column}' of {longest:,} characters, over "
                    f"the bound of {max_chars:,} (--max_text_chars): the tokenizer would need about "
                    f"{longest * 80 / 2**30:.1f} GiB for it. Check that row (a file read with the wrong delimiter "
                    "or quoting can make one field of the whole file); for documents that long, raise "
                    f"--max_text_chars (with about 80 bytes of memory a character), e.g. --max_text_chars {longest}."
                )
