"""`recipes-lib predict`: label names and probabilities (scores for regression) from a finished run.

    recipes-lib predict outputs/demo/lora --input new_texts.csv --output predictions.jsonl

Every kind of run output (a full model, a LoRA or QLoRA adapter, merged/) loads as the run evaluated it
(adapters.load_trained_model), and everything that shapes an input comes from the run (results.json's
"config", its tokenizer, its precision), so that the validation file gives the run's own
eval_predictions.jsonl. An export (OUTPUT_DIR/export, or one of its .onnx files) runs in ONNX Runtime.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import sys
from pathlib import Path
from typing import Any

import torch
from datasets import DatasetDict
from transformers import AutoConfig, AutoTokenizer

from recipes_lib.config.precision import autocast_for
from recipes_lib.config.tasks import DEFAULT_THRESHOLD, MULTI_LABEL, SINGLE_LABEL
from recipes_lib.data.files import (
    DELIMITED,
    column_note,
    decide_delimiter,
    has_rows,
    parse_delimiter,
    read_local_files,
    write_jsonl,
)
from recipes_lib.data.labels import LabelMapping
from recipes_lib.data.loading import ClassificationData
from recipes_lib.data.long_text import DOCUMENT_COLUMN, LengthsRead, refuse_oversized_texts
from recipes_lib.data.tokenize import padding_collator, tokenize
from recipes_lib.errors import ConfigError, DataError, ModelError, RecipeError
from recipes_lib.evaluation.collapse import is_collapsed, output_variation
from recipes_lib.evaluation.inference import batch_logits
from recipes_lib.evaluation.predictions import THRESHOLDS_FILE, prediction_rows
from recipes_lib.evaluation.windows import combine_windows
from recipes_lib.modeling.adapters import load_trained_model
from recipes_lib.modeling.families import profile_for
from recipes_lib.modeling.weight_files import check_model_files
from recipes_workbench.export.bundle import TrainedRun, find_export, find_run, saved_decisions
from recipes_workbench.export.gate import data_arguments
from recipes_workbench.shared import print_error

logger = logging.getLogger(__name__)

INPUT_FORMATS = (".csv", ".tsv", ".txt", ".json", ".jsonl", ".parquet")
QUOTING_CHOICES = ("auto", "quoted", "none")  # --csv_quoting, as data/files.py decide_quoting reads it
DEFAULT_BATCH_SIZE = 32


def read_input(
    path: str | Path,
    quoting: str = "auto",
    cache_dir: str | None = None,
    delimiter: str = "auto",
    column_names: list[str] | None = None,
):
    """The rows of a .csv, .tsv, .txt, .json, .jsonl or .parquet file (datafiles.read_local_files), or a DataError.

    `column_names` (the run's --column_names, or predict's): a delimited file has no header, as the
    run's files had none; a file whose first line is exactly those names is read with it as its header."""
    path = Path(path)
    formats = ", ".join(INPUT_FORMATS)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise DataError(f"The input file '{path}' {what}. Pass --input a {formats} file of texts.")
    extension = path.suffix.lower()
    if extension not in INPUT_FORMATS:
        raise DataError(
            f"The input file '{path}' has the extension '{path.suffix or '(none)'}', which predict cannot read. "
            f"Save it as one of {formats}: the format is taken from the extension."
        )
    if quoting not in QUOTING_CHOICES:
        raise ConfigError(f"--csv_quoting is '{quoting}'; use one of {', '.join(QUOTING_CHOICES)}.")
    try:
        if column_names is not None and headed_by(path, column_names, parse_delimiter(delimiter)):
            column_names = None
        header = column_names is None and extension in DELIMITED
        if not has_rows(path, header=column_names is None):
            raise DataError(
                f"The input file '{path}' holds no rows{' below the header' if header else ''}. "
                "Pass a file with at least one text to predict."
            )
        loaded, _ = read_local_files(
            {"predict": str(path)}, cache_dir, quoting, parse_delimiter(delimiter), column_names
        )
    except (OSError, UnicodeDecodeError, ValueError, csv.Error) as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DataError(
            f"Could not read the input file '{path}' as {extension[1:]}: {detail}. Check that it is UTF-8 "
            f"text in that format (or a Parquet file), or save it again as one of {formats}."
        ) from None
    dataset = loaded["predict"]
    if len(dataset) == 0:
        raise DataError(
            f"The input file '{path}' holds no rows. Pass a file with at least one text to predict."
        )
    return dataset


def headed_by(path: Path, column_names: list[str], delimiter: str | None) -> bool:
    """Whether a delimited file's first line is exactly `column_names`: a header, though the run's files had none."""
    if path.suffix.lower() not in DELIMITED:
        return False
    return list(decide_delimiter(str(path), delimiter).header) == list(column_names)


def trained_run(run_dir: str | Path):
    """(the run, and its export when `run_dir` is OUTPUT_DIR/export or a .onnx file in it: ONNX Runtime runs it)."""
    exported = find_export(run_dir)
    if exported is None:
        return find_run(run_dir), None
    run = TrainedRun(
        results_dir=exported.directory, model_dir=exported.directory, results=exported.run_results
    )
    return run, exported


def reading_options(run: TrainedRun, **given: str | None) -> dict[str, Any]:
    """How to read the input: each option as given to predict, else as the run read its files (its config)."""
    config = run.config
    column_names = given.get("column_names") or config.get("column_names")
    return {
        "quoting": given.get("csv_quoting") or config.get("csv_quoting") or "auto",
        "delimiter": given.get("delimiter") or config.get("delimiter") or "auto",
        "column_names": [name.strip() for name in column_names.split(",")] if column_names else None,
    }


def text_columns(
    run: TrainedRun, dataset, input_path: str | Path, named_here: str | None = None, delimiter: str = "auto"
) -> tuple[str, ...]:
    """The columns the run read its texts from (its --text_column_names, else results.json's "text_columns",
    else the input's string columns but the label, as the run took them), or the input's `named_here`."""
    found = dataset.column_names
    named = run.config.get("text_column_names")
    label_column = run.config.get("label_column_name", "label")
    note = column_note(str(input_path), parse_delimiter(delimiter))
    if named_here:
        return input_text_columns(run, found, input_path, named_here, note)
    if named:
        columns, source = tuple(c.strip() for c in str(named).split(",") if c.strip()), "--text_column_names"
    elif run.results.text_columns:
        columns, source = tuple(run.results.text_columns), "the training data's text columns"
    else:
        columns = tuple(
            name
            for name, feature in dataset.features.items()
            if name != label_column and getattr(feature, "dtype", None) in ("string", "large_string")
        )
        if not 1 <= len(columns) <= 2:
            raise DataError(
                f"Cannot tell which columns of '{input_path}' hold the text: the run at {run.results_dir} did not "
                f"record its text columns (it took the training data's string columns other than "
                f"'{label_column}'), and this file's string columns other than '{label_column}' are "
                f"{', '.join(columns) or 'none'} (all columns: {', '.join(found)}).{note} Name the text column "
                "with --text_column_names (or the two of a sentence pair, comma-separated, in the training data's "
                "order)."
            )
        logger.info(
            "Text: %s, the input's string columns other than '%s'.", " + ".join(columns), label_column
        )
        return columns
    missing = [column for column in columns if column not in found]
    if missing:
        trained = " and ".join(f"'{column}'" for column in columns)
        raise DataError(
            f"Text column '{missing[0]}' is not in '{input_path}'; its columns are: {', '.join(found)}.{note} The "
            f"run at {run.results_dir} was trained on {trained} ({source}): name the input's "
            f"{'column' if len(columns) == 1 else 'columns, comma-separated, in that order,'} with "
            "--text_column_names."
        )
    return columns


def input_text_columns(
    run: TrainedRun, found: list[str], input_path, named_here: str, note: str
) -> tuple[str, ...]:
    """--text_column_names: the input's columns, as many as the run trained on, each in the input."""
    columns = tuple(c.strip() for c in named_here.split(",") if c.strip())
    trained = run.config.get("text_column_names") or ",".join(run.results.text_columns or [])
    expected = len([c for c in str(trained).split(",") if c.strip()]) if trained else len(columns)
    if not 1 <= len(columns) <= 2 or len(columns) != expected:
        raise DataError(
            f"--text_column_names is '{named_here}': {len(columns)} column(s), but the run at {run.results_dir} "
            f"was trained on {expected} ({trained or 'its string columns'}). Name one input column per "
            "trained text column, comma-separated, in that order."
        )
    missing = [column for column in columns if column not in found]
    if missing:
        raise DataError(
            f"--text_column_names names '{missing[0]}', which is not in '{input_path}'; its columns are: "
            f"{', '.join(found)}.{note} Name the column holding the texts."
        )
    logger.info("Text: %s (--text_column_names).", " + ".join(columns))
    return columns


def row_ids(dataset, id_column: str | None, input_path, delimiter: str = "auto") -> list:
    """Each input row's id: its `id_column` value, or its number (0 for the first data row)."""
    if id_column is None:
        return list(range(len(dataset)))
    if id_column not in dataset.column_names:
        note = column_note(str(input_path), parse_delimiter(delimiter))
        raise DataError(
            f"--id_column '{id_column}' is not in '{input_path}'; its columns are: "
            f"{', '.join(dataset.column_names)}.{note} Name one of them, or leave --id_column out to number the "
            "rows (0 for the first)."
        )
    return dataset[id_column]


def _autocast(run: TrainedRun, device: torch.device):
    """The run's mixed precision (the Trainer's autocast) on the kind of device the run evaluated on; elsewhere
    fp32 (bf16 on a CPU can be tens of times slower than the GPU run it came from)."""
    run_device = str(run.results.device or "cpu").split(":")[0].split(" ")[0]
    precision = (run.results.precision or "fp32") if run_device == device.type else "fp32"
    return autocast_for(precision, device.type)


def predict(
    run_dir: str | Path,
    input_file: str | Path,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str | torch.device | None = None,
    csv_quoting: str | None = None,
    progress: bool = True,
    text_column_names: str | None = None,
    id_column: str | None = None,
    with_ids: bool = False,
    delimiter: str | None = None,
    column_names: str | None = None,
    max_text_chars: int | None = None,
) -> list[dict[str, Any]]:
    """One row per input row, in input order, in the format of evaluation/predictions.py (by the run's kind of task).

    `with_ids`: each row starts with "id", the input's `id_column` value or the row's number (0 first).
    `csv_quoting`, `delimiter`, `column_names` (comma-separated) and `text_column_names`: None reads the
    input as the run read its files (its --csv_quoting, --delimiter, --column_names, text columns);
    `max_text_chars` None bounds a text field as the run did (its --max_text_chars, 1,000,000 by default)."""
    if batch_size <= 0:
        raise ConfigError(
            f"--batch_size is {batch_size}; it must be a positive integer (32 is a good start)."
        )
    run, exported = trained_run(run_dir)  # the cheap checks first: run, input, columns; then the weights
    data_args = data_arguments(run.config)
    reading = reading_options(run, csv_quoting=csv_quoting, delimiter=delimiter, column_names=column_names)
    dataset = read_input(input_file, cache_dir=run.config.get("cache_dir"), **reading)
    delimiter = reading["delimiter"]
    columns = text_columns(run, dataset, input_file, text_column_names, delimiter)
    # As training does: one runaway field (a wrong delimiter or quoting) costs ~80 bytes a character to tokenize.
    bound = data_args.max_text_chars if max_text_chars is None else max_text_chars
    refuse_oversized_texts({"input": dataset}, tuple(columns), bound, {"input": Path(input_file).name}, {})
    ids = row_ids(dataset, id_column, input_file, delimiter) if with_ids or id_column else None
    if device is None or exported is not None:  # an export runs in ONNX Runtime, on the CPU
        device = "cuda" if exported is None and torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    check_model_files(run.model_dir)  # a damaged config or weights file: one paragraph naming it
    try:
        tokenizer = AutoTokenizer.from_pretrained(run.model_dir)
        model_config = AutoConfig.from_pretrained(run.model_dir)
    except (OSError, ValueError) as error:
        raise ModelError(
            f"Could not load the tokenizer and config.json saved in '{run.model_dir}' "
            f"({str(error).strip().splitlines()[0]}). A finished run saves both next to the model; run it again."
        ) from None
    label_names = [model_config.id2label[i] for i in range(model_config.num_labels)]
    problem_type = model_config.problem_type or run.results.problem_type or SINGLE_LABEL
    thresholds, decision_threshold = run_decisions(run, label_names, problem_type)
    logger.info(
        "Predicting %d rows of %s with the %s in %s on %s (text: %s, max_seq_length %d)",
        len(dataset),
        input_file,
        exported.describe() if exported is not None else run.describe(),
        run.model_dir,
        device,
        " + ".join(columns),
        data_args.max_seq_length,
    )

    encoded = encode_input(dataset, columns, input_file, tokenizer, model_config, data_args)
    collator = padding_collator(tokenizer, data_args, device)
    if exported is not None:
        from recipes_workbench.export.runtime import onnx_logits, onnx_session

        logits = onnx_logits(onnx_session(exported.onnx_path), encoded, collator, batch_size, progress)
    else:
        model = load_trained_model(run.model_dir, device=device).eval()
        with _autocast(run, device):
            logits = batch_logits(model, encoded, collator, device, batch_size, progress)
    if DOCUMENT_COLUMN in encoded.column_names:  # --long_text sliding_window: one row per document
        document_ids = encoded.data.column(DOCUMENT_COLUMN).to_numpy()
        logits, _ = combine_windows(logits, document_ids, data_args.window_pooling)
    warn_if_constant(logits, problem_type, input_file)
    rows = prediction_rows(logits, label_names, problem_type, thresholds, decision_threshold)
    return rows if ids is None else [{"id": id_, **row} for id_, row in zip(ids, rows, strict=True)]


def encode_input(dataset, columns, input_file, tokenizer, model_config, data_args):
    """The input tokenized as the run tokenized (data.tokenize), an unlabelled split; its lengths logged as the
    input file's, with the model's limit and no option predict lacks."""
    label_names = [model_config.id2label[i] for i in range(model_config.num_labels)]
    data = ClassificationData(
        raw=DatasetDict({"test": dataset}),
        text_columns=columns,
        label_column=data_args.label_column_name,
        labels=LabelMapping(names=label_names, to_id={}),
        description=str(input_file),
    )
    read = LengthsRead(finished_run="the run", names={"test": Path(input_file).name})
    limit = profile_for(model_config).max_length
    return tokenize(data, tokenizer, data_args, lambda desc: contextlib.nullcontext(), limit, read)["test"]


def warn_if_constant(logits, problem_type: str, input_file) -> None:
    """A warning when the model gives every row the same output (evaluation/collapse.py): its predictions
    do not depend on the text, and nothing else in the output would say so."""
    variation = output_variation(logits, problem_type)
    if is_collapsed(variation):
        logger.warning(
            "The model gives all %d rows of %s the same prediction, and no output varies by more than %.4f "
            "across them: its predictions do not depend on the text. The model collapsed in training (its "
            "run's results.json says model_collapsed, and its end-of-run warning what usually helps); "
            "retrain it before trusting these predictions.",
            variation["rows"],
            input_file,
            variation["output_std"],
        )


def run_decisions(run: TrainedRun, label_names: list[str], problem_type: str):
    """The thresholds the run saved (bundle.saved_decisions), said in the log; a multi-label run without
    them decides every class at probability 0.5."""
    saved_in = (run.model_dir, run.results_dir)
    thresholds, decision_threshold = saved_decisions(saved_in, run.results, label_names, problem_type)
    if problem_type == MULTI_LABEL and thresholds is None:
        logger.warning(
            "No %s in %s: deciding every class at probability 0.5, not at the thresholds the run tuned.",
            THRESHOLDS_FILE,
            run.model_dir,
        )
        thresholds = [DEFAULT_THRESHOLD] * len(label_names)
    if decision_threshold is not None:
        logger.info(
            "The positive class is predicted at probability %.2f or above (the run's threshold).",
            decision_threshold,
        )
    return thresholds, decision_threshold


def write_predictions(run_dir: str, input_file: str, output: str | None = None, **options) -> int:
    """`recipes-lib predict`: the rows as JSON Lines, to `output` or standard output; returns the exit code."""
    # Progress and notes on stderr: stdout carries only the predictions.
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    path = Path(output) if output else None
    if path is not None and not path.parent.is_dir():
        print(
            f"error: the directory of --output '{path}' does not exist. Create it, or write elsewhere.",
            file=sys.stderr,
        )
        return 2
    try:
        rows = predict(run_dir, input_file, with_ids=True, **options)
    except RecipeError as error:
        print_error(error)
        return error.exit_code
    if path is None:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
    else:
        write_jsonl(path, rows)
        print(f"Wrote {len(rows)} predictions to {path}", file=sys.stderr)
    return 0
