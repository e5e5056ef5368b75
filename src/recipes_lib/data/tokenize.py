"""Tokenization (cached by datasets) and the collator that pads each batch."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import TYPE_CHECKING

from datasets import DatasetDict

from recipes_lib.config.arguments import DataArguments
from recipes_lib.data.long_text import (
    DOCUMENT_COLUMN,
    DOCUMENT_LENGTH_COLUMN,
    RECIPE_READ,
    SLIDING_WINDOW,
    LengthsRead,
    check_long_text_columns,
    document_lengths,
    encode_long_texts,
    log_truncation,
    truncation_report,
)

if TYPE_CHECKING:
    from recipes_lib.data.loading import ClassificationData

LABEL_COLUMN = "labels"  # what the model's forward() expects
LENGTH_COLUMN = "length"  # tokens per example, read by the length-grouped sampler

logger = logging.getLogger(__name__)

# Without --preprocessing_num_workers, a split of at least this many rows is tokenized by one
# process per available core (at most MAX_TOKENIZING_PROCESSES, and at least half this many rows
# each). A fast tokenizer's batch call runs on one core here (measured: CPU time = wall time), at
# about 10,000 short rows a second (all-MiniLM-L6-v2, SST-2 sentences, 2-core EPYC), and each
# worker costs about a second to start, write its shard and hand it back: on 20,000 rows two
# processes took a second longer than one, so below ~50,000 rows (~5 s on one core) the workers
# cost about what they save; above it, the split's time divides by the cores that are free.
PARALLEL_TOKENIZING_ROWS = 50_000
MAX_TOKENIZING_PROCESSES = 8


def tokenizing_processes(rows: int, requested: int | None) -> int | None:
    """num_proc for a split's `datasets.map`: the one asked for; else the cores for a large split, else one;
    the same on every process of a machine, so the others find the main one's cache files (named by it)."""
    if requested is not None:
        return requested
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if rows < PARALLEL_TOKENIZING_ROWS or cores < 2:
        return None
    return min(cores, MAX_TOKENIZING_PROCESSES, rows // (PARALLEL_TOKENIZING_ROWS // 2))


class TokenizedSplits(DatasetDict):
    """The tokenized splits, with what max_seq_length cut in each (`truncation`, long_text.truncation_report)."""

    def __init__(self, splits, truncation: dict):
        super().__init__(splits)
        self.truncation = truncation


def tokenize(
    data: ClassificationData,
    tokenizer,
    data_args: DataArguments,
    main_process_first,
    model_limit: int | None = None,
    read: LengthsRead = RECIPE_READ,
) -> TokenizedSplits:
    """Every split tokenized with `datasets.map` (cached on disk), unpadded unless pad_to_max_length (the
    collator pads each batch), longer inputs cut as --long_text says (data/long_text.py), with each split's
    truncation report (`model_limit`: the most tokens the model takes; `read`: who reads the rows)."""
    text_columns, label_column, labels = data.text_columns, data.label_column, data.labels
    check_long_text_columns(data_args, text_columns)

    def encode(batch, indices, with_labels: bool, max_windows: int | None):
        texts = [["" if text is None else str(text) for text in batch[column]] for column in text_columns]
        if len(texts) == 1:  # one text: tokenized whole, then cut or windowed (long_text.py)
            encoded = encode_long_texts(tokenizer, texts[0], data_args, indices, max_windows)
            rows = encoded.pop("rows")
        else:  # a pair: the tokenizer truncates the longer text first; its whole length for the report
            padding = "max_length" if data_args.pad_to_max_length else False
            encoded = tokenizer(*texts, truncation=True, max_length=data_args.max_seq_length, padding=padding)
            whole = tokenizer(*texts, return_attention_mask=False, return_token_type_ids=False, verbose=False)
            encoded[DOCUMENT_LENGTH_COLUMN] = [len(ids) for ids in whole["input_ids"]]
            rows = range(len(texts[0]))
        if with_labels:
            row_labels = [labels.encode(value) for value in batch[label_column]]
            encoded[LABEL_COLUMN] = [row_labels[row] for row in rows]
        if data_args.long_text != SLIDING_WINDOW:
            encoded.pop(DOCUMENT_COLUMN, None)  # one row per input: the row is the document
        encoded[LENGTH_COLUMN] = [len(ids) for ids in encoded["input_ids"]]
        return dict(encoded)

    tokenized = {}
    # Under several processes the main one tokenizes first and the others read its cache.
    with main_process_first(desc="tokenizing the dataset"):
        for split, dataset in data.raw.items():
            processes = tokenizing_processes(len(dataset), data_args.preprocessing_num_workers)
            if processes is not None and data_args.preprocessing_num_workers is None:
                logger.info("Tokenizing %s (%d rows) in %d processes.", split, len(dataset), processes)
            tokenized[split] = dataset.map(
                encode,
                fn_kwargs={
                    "with_labels": split != "test" or data.test_has_labels,
                    # Only training may skip windows: evaluation and predict read every document whole.
                    "max_windows": data_args.max_windows_per_document if split == "train" else None,
                },
                with_indices=True,
                batched=True,
                remove_columns=dataset.column_names,
                num_proc=processes,
                load_from_cache_file=not data_args.overwrite_cache,
                desc=f"Tokenizing {read.names.get(split, split)}",
            )
    truncation = {
        split: truncation_report(
            document_lengths(dataset), len(dataset), data_args.max_seq_length, model_limit
        )
        for split, dataset in tokenized.items()
    }
    log_truncation(truncation, data_args, dataclasses.replace(read, pair=len(text_columns) > 1))
    return TokenizedSplits(
        {split: dataset.remove_columns(DOCUMENT_LENGTH_COLUMN) for split, dataset in tokenized.items()},
        truncation,
    )


def padding_collator(tokenizer, data_args: DataArguments, device):
    """Pads each batch to its longest example; on a GPU to a multiple of 8 unless told otherwise (tensor
    cores run at full rate on multiples of 8; on a CPU they only add work)."""
    from transformers import DataCollatorWithPadding

    pad_to_multiple_of = data_args.pad_to_multiple_of
    if pad_to_multiple_of is None and device.type == "cuda":
        pad_to_multiple_of = 8
    return DataCollatorWithPadding(tokenizer, pad_to_multiple_of=pad_to_multiple_of)
