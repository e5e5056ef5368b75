"""The data path at scale (issue #24): the quoting decision in constant memory, the label checks as
columnar operations that give what the row-by-row checks gave, tokenization on several processes.

Nothing here is timed: memory is measured against the file's size, and "columnar" is checked by
counting how often a label is looked at in Python.
"""

from __future__ import annotations

import csv
import json
import tracemalloc
from pathlib import Path

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value

from recipes_lib.config.arguments import DataArguments
from recipes_lib.data import label_column, multi_label
from recipes_lib.data import labels as label_module
from recipes_lib.data import tokenize as tokenize_module
from recipes_lib.data.files import RecordLines, decide_quoting
from recipes_lib.data.labels import describe_labels, label_mapping
from recipes_lib.data.loading import load_classification_data
from recipes_lib.errors import ConfigError, DataError

# -- the quoting decision ----------------------------------------------------------------------------


def write_rows(path: Path, count: int, quoted: bool) -> Path:
    """A TSV as pandas writes it (every 7th text holds quotes, a tab and a newline), or GLUE style (quotes
    are text; the last row's starts with one, so the quoted reading fails only at the end of the file)."""
    with open(path, "w", newline="") as handle:
        if quoted:
            writer = csv.writer(handle, delimiter="\t")
            writer.writerow(["text", "label"])
            for i in range(count):
                text = f'he said "hi"\tthen\nleft {i}' if i % 7 == 0 else f"a red cat sat on the mat {i}"
                writer.writerow([text, "warm" if i % 2 else "cool"])
        else:
            handle.write("text\tlabel\n")
            for i in range(count):
                text = f'a "quoted" word {i}' if i % 7 == 0 else f"a red cat sat on the mat {i}"
                if i == count - 1:
                    text = (
                        '"' + text
                    )  # a stray quote, which a quoting writer never leaves: the file is unquoted
                handle.write(f"{text}\t{'warm' if i % 2 else 'cool'}\n")
    return path


@pytest.mark.parametrize("quoted", [True, False], ids=["quoted", "unquoted"])
def test_the_quoting_decision_holds_no_rows_in_memory(tmp_path, quoted):
    """Both readings and the writer check stream: what they hold at once is a small part of the file.

    Before issue #24 the decision kept every record twice, as Python lists: about 19x the file here.
    """
    path = write_rows(tmp_path / "train.tsv", 200_000, quoted)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        decided, lines = decide_quoting(str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decided is quoted
    assert len(lines) == 200_000
    assert peak < size / 5, f"peak {peak / 1e6:.2f} MB for a {size / 1e6:.1f} MB file"


def test_row_lines_are_found_only_when_asked_and_count_multi_line_fields_and_blank_lines(tmp_path):
    path = tmp_path / "train.tsv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t")
        writer.writerow(["text", "label"])
        writer.writerow(["one\ntwo\nthree", "warm"])  # lines 2-4
        handle.write("\n")  # line 5: blank, no row
        writer.writerow(['he said "hi"', "cool"])  # line 6
        writer.writerow(["last", "warm"])  # line 7
    quoted, lines = decide_quoting(str(path))
    assert quoted and isinstance(lines, RecordLines) and len(lines) == 3
    assert lines._found == {}  # nothing read for line numbers until a row's line is asked for
    assert [lines[i] for i in range(3)] == [2, 6, 7]
    with pytest.raises(IndexError):
        lines[3]


def test_a_stray_quote_late_in_a_glue_file_still_reads_unquoted(tmp_path):
    path = write_rows(tmp_path / "train.tsv", 1000, quoted=False)
    with open(path, "a") as handle:
        handle.write('"a stray quote\twarm\nthe end\tcool\n')
    quoted, lines = decide_quoting(str(path))
    assert quoted is False and len(lines) == 1002 and lines[1001] == 1003


def test_an_ambiguous_file_names_the_first_line_the_readings_differ_on(tmp_path):
    path = tmp_path / "train.tsv"
    rows = "".join(f"row {i}\twarm\n" for i in range(50))
    # A quoted field only quoting explains (a doubled quote inside) and, later, a bare stray quote: both
    # readings have evidence, so the run asks.
    path.write_text("text\tlabel\n" + rows + '"red ""cat"""\tcool\n' + rows + 'a 5" screen\twarm\n')
    with pytest.raises(DataError, match="Line 52 has a field in quotes.*but line 103 has .* Say which it is"):
        decide_quoting(str(path))


# -- the labels: read through Arrow, with the outcomes the row-by-row checks had ---------------------

# What the label checks gave before issue #24 (row by row), for each kind of label: task, class names,
# ids, flags or not, and the log line of describe_labels.
KINDS = [
    ("class names", ["billing ", "billing", " shipping", "shipping", "account"], {}, "single_label_classification", ["account", "billing", "shipping"], {"account": 0, "billing": 1, "shipping": 2}, False, "classes: account 1, billing 2, shipping 2"),
    ("ids 0..K-1", [0, 1, 2, 1, 0], {}, "single_label_classification", ["0", "1", "2"], {0: 0, 1: 1, 2: 2}, False, "classes: 0 2, 1 2, 2 1"),
    ("ids to remap", [1, 3, 5, 3], {}, "single_label_classification", ["1", "3", "5"], {1: 0, 3: 1, 5: 2}, False, "classes: 1 1, 3 2, 5 1"),
    ("booleans", [True, False, True, True], {}, "single_label_classification", ["False", "True"], {0: 0, 1: 1}, False, "classes: False 1, True 3"),
    ("integral floats", [1.0, 0.0, 1.0, 0.0], {}, "single_label_classification", ["0", "1"], {0: 0, 1: 1}, False, "classes: 0 2, 1 2"),
    ("scores", [0.5, 0.25, 1.0, 0.75], {}, "regression", ["label"], {}, False, "score 'label' mean 0.625, min 0.25, max 1"),
    ("ids as scores", [1, 5, 3, 4], {"problem_type": "regression"}, "regression", ["label"], {}, False, "score 'label' mean 3.25, min 1, max 5"),
    ("numeric strings as scores", ["0.5", " 1.5", "2"], {"problem_type": "regression"}, "regression", ["label"], {}, False, "score 'label' mean 1.33, min 0.5, max 2"),
    ("lists of names", [["warm", "cool"], ["cool"], [], [" warm"]], {}, "multi_label_classification", ["cool", "warm"], {"cool": 0, "warm": 1}, False, "rows with each class: cool 2, warm 2; 1.00 classes per row"),
    ("lists of ids", [[0], [1, 2], [], [2]], {}, "multi_label_classification", ["0", "1", "2"], {0: 0, 1: 1, 2: 2}, False, "rows with each class: 0 1, 1 1, 2 2; 1.00 classes per row"),
    ("0/1 flags", [[1, 0, 1], [0, 1, 0], [0, 0, 0]], {}, "multi_label_classification", ["0", "1", "2"], {0: 0, 1: 1, 2: 2}, True, "rows with each class: 0 1, 1 1, 2 1; 1.00 classes per row"),
    ("delimited names", ["billing;shipping", "shipping", "", " billing ; account"], {"label_delimiter": ";"}, "multi_label_classification", ["account", "billing", "shipping"], {"account": 0, "billing": 1, "shipping": 2}, False, "rows with each class: account 1, billing 2, shipping 2; 1.25 classes per row"),
    ("class label", [2, 0, 1, 0], {}, "single_label_classification", ["neg", "neu", "pos"], {0: 0, 1: 1, 2: 2}, False, "classes: neg 2, neu 1, pos 1"),
    ("list of class labels", [[0], [2, 1], []], {}, "multi_label_classification", ["joy", "anger", "fear"], {0: 0, 1: 1, 2: 2}, False, "rows with each class: joy 1, anger 1, fear 1; 1.00 classes per row"),
]  # fmt: skip

FEATURES = {
    "class label": Features({"text": Value("string"), "label": ClassLabel(names=["neg", "neu", "pos"])}),
    "list of class labels": Features(
        {"text": Value("string"), "label": Sequence(ClassLabel(names=["joy", "anger", "fear"]))}
    ),
}


def split_of(values, features=None) -> Dataset:
    return Dataset.from_dict(
        {"text": [f"row {i}" for i in range(len(values))], "label": values}, features=features
    )


def outcome(raw: DatasetDict, options: dict, locate: dict | None = None):
    """What the checks make of the labels: the mapping and each split's log line, or the error."""
    try:
        mapping = label_mapping(raw, DataArguments(train_file="train.jsonl", **options), locate or {})
    except (DataError, ConfigError) as error:
        return type(error).__name__, str(error)
    described = [describe_labels(mapping, dataset, "label") for dataset in raw.values()]
    return mapping.problem_type, mapping.names, mapping.to_id, mapping.multi_hot, mapping.delimiter, described


@pytest.mark.parametrize("kind", KINDS, ids=[kind[0] for kind in KINDS])
def test_the_columnar_label_checks_give_the_mapping_the_row_by_row_checks_gave(kind):
    name, values, options, problem_type, names, to_id, multi_hot, described = kind
    raw = DatasetDict(
        {"train": split_of(values, FEATURES.get(name)), "validation": split_of(values, FEATURES.get(name))}
    )
    expected = (problem_type, names, to_id, multi_hot, options.get("label_delimiter"), [described, described])
    assert outcome(raw, options) == expected


# Labels the checks refuse, each kind of error, and the error the row-by-row checks gave (recorded from
# them before they were deleted): the columnar reading must say the same.
BAD = [
    ('an unseen class', ['warm', 'cool'], ['warm', 'lukewarm', 'hot', 'lukewarm'], {}, 'DataError', "The validation data has label(s) the training data never uses: 'hot', 'lukewarm' (first at validation.jsonl line 2). Training labels are: cool, warm. Fix those labels, or add training examples of those classes."),
    ('an unseen score-like class', [1, 0], [1, 0.5], {}, 'DataError', 'The validation data has label(s) the training data never uses: 0.5 (first at validation.jsonl line 2). Training labels are: 0, 1. Fix those labels, or add training examples of those classes; if the labels are scores, train with --problem_type regression.'),
    ('a non-number for regression', [0.5, 0.25], ['0.5', 'high'], {}, 'DataError', "validation.jsonl line 2 has the label 'high', which is not a number; regression learns a score per row, so every 'label' must be a finite number. Fix that row, or, for classes, use --problem_type auto or single_label_classification."),
    ('an infinite score', [0.5, 0.25], [0.5, float("inf")], {}, 'DataError', "validation.jsonl line 2 has the label inf, which is not a number; regression learns a score per row, so every 'label' must be a finite number. Fix that row, or, for classes, use --problem_type auto or single_label_classification."),
    ('a boolean score', [0.5, 0.25], [True, False], {'problem_type': 'regression'}, 'DataError', "validation.jsonl line 1 has the label True, which is not a number; regression learns a score per row, so every 'label' must be a finite number. Fix that row, or, for classes, use --problem_type auto or single_label_classification."),
    ('a fraction as a class', [1.0, 0.5], [1.0], {'problem_type': 'single_label_classification'}, 'DataError', 'train.jsonl line 2 has the label 0.5, which is not a class: --problem_type single_label_classification needs class names, ids or booleans. For a score to predict, use --problem_type regression (or auto).'),
    ('a class named twice', [['warm'], ['cool', 'cool ']], [['warm']], {}, 'DataError', "train.jsonl line 2 has the labels ['cool', 'cool '], which name a class twice. A multi-label row lists each of its classes once (['billing', 'shipping']); a row of 0/1 flags per class must be written as the names of the classes flagged."),
    ('a fraction among class ids', [[1], [2, 1.5]], [[1]], {}, 'DataError', 'train.jsonl line 2 lists 1.5 among its classes; a multi-label row lists class names (strings) or class ids (integers). Fix that row.'),
    ('an unseen class in a list', [['warm'], ['cool']], [['warm', 'bird'], ['bird'], []], {}, 'DataError', "The validation data has label(s) the training data never uses: 'bird' (first at validation.jsonl line 1). Training labels are: cool, warm. Fix those labels, or add training examples of those classes."),
    ('flags of another width', [[0, 1], [1, 0]], [[0, 1], [1, 0, 1]], {}, 'DataError', 'validation.jsonl line 2 has the labels [1, 0, 1], but the training rows are 2 0/1 flags, one per class. Give every row the same 2 flags.'),
    ('a delimiter on ids', [1, 0], [1], {'label_delimiter': ';'}, 'ConfigError', "--label_delimiter ';' splits string labels, but the training labels are not strings. Leave --label_delimiter out."),
    ('a delimiter on lists', [['a'], ['b']], [['a']], {'label_delimiter': ';'}, 'ConfigError', "--label_delimiter ';' splits string labels, but the training labels are lists already. Leave --label_delimiter out."),
    ('a delimited class twice', ['a;b', 'b;b'], ['a'], {'label_delimiter': ';'}, 'DataError', "train.jsonl line 2 has the labels 'b;b', which name a class twice. A multi-label row lists each of its classes once (['billing', 'shipping']); a row of 0/1 flags per class must be written as the names of the classes flagged."),
    ('an unseen delimited class', ['a;b', 'b'], ['a;c', 'c'], {'label_delimiter': ';'}, 'DataError', "The validation data has label(s) the training data never uses: 'c' (first at validation.jsonl line 1). Training labels are: a, b. Fix those labels, or add training examples of those classes."),
    ('lists for single-label', [['a'], ['b']], [['a']], {'problem_type': 'single_label_classification'}, 'ConfigError', '--problem_type single_label_classification takes one label per row, but the training labels are lists, which means several classes per row. Use --problem_type multi_label_classification (or auto).'),
    ('one class', ['warm', 'warm'], ['warm'], {}, 'DataError', "The training data has 1 distinct label(s) in 'label' (['warm'], from train.jsonl line 1 on); classification needs at least 2."),
]  # fmt: skip


def locator(split: str):
    return lambda index: f"{split}.jsonl line {index + 1}"


@pytest.mark.parametrize("case", BAD, ids=[case[0] for case in BAD])
def test_bad_labels_are_the_same_error_columnar_and_row_by_row(case):
    _, train, validation, options, error, message = case
    raw = DatasetDict({"train": split_of(train), "validation": split_of(validation)})
    assert outcome(raw, options, {split: locator(split) for split in raw}) == (error, message)


@pytest.mark.parametrize(
    "labels, message",
    [
        (
            ["warm", 1],
            r"Label column 'label' mixes value types \(int, str\) \(e\.g\. 1 at train.jsonl line 2\)\. Labels must",
        ),
        ([["warm"], [1]], "The multi-label rows mix class names and class ids"),
    ],
)
def test_a_json_column_of_mixed_types_keeps_the_errors_it_had(tmp_path, labels, message):
    train = tmp_path / "train.jsonl"
    train.write_text(
        "".join(json.dumps({"text": f"row {i}", "label": v}) + "\n" for i, v in enumerate(labels))
    )
    with pytest.raises(DataError, match=message):
        load_classification_data(DataArguments(train_file=str(train), validation_file=str(train)))


def test_the_label_checks_look_at_each_distinct_label_not_each_row(monkeypatch):
    """200,000 rows of each kind: the labels are normalised in Python a few times per distinct value."""
    calls = {"count": 0}
    normalise = label_column.normalise_label

    def counted(value):
        calls["count"] += 1
        return normalise(value)

    # each module that reads these labels (hidden_labels reads a test split's; there is none here)
    for module in (label_column, label_module, multi_label):
        monkeypatch.setattr(module, "normalise_label", counted)
    rows = 200_000
    for values, options in [
        ([("warm", "cool ", "cold")[i % 3] for i in range(rows)], {}),
        ([i % 4 for i in range(rows)], {}),
        ([bool(i % 2) for i in range(rows)], {}),
        ([(i % 1000) / 7 for i in range(rows)], {}),
        ([[("warm", "cool")[i % 2]] + (["hot"] if i % 3 == 0 else []) for i in range(rows)], {}),
        ([[i % 2, 1 - i % 2] for i in range(rows)], {}),
        ([("a;b", "b", "")[i % 3] for i in range(rows)], {"label_delimiter": ";"}),
    ]:
        calls["count"] = 0
        split = split_of(values)
        held_out = split.train_test_split(test_size=0.1, seed=0)  # an indices mapping, as a hold-out makes
        raw = DatasetDict({"train": held_out["train"], "validation": held_out["test"]})
        problem_type, *_ = outcome(raw, options)
        assert problem_type != "DataError"
        assert calls["count"] < 100, (values[:3], calls["count"])


def test_a_held_out_split_reads_its_own_rows_labels():
    split = split_of([f"class {i % 3}" if i % 10 else "rare" for i in range(300)])
    held_out = split.shuffle(seed=3).select(range(50))
    reader = label_column.label_values(held_out, "label")
    assert [reader.value(i) for i in range(50)] == held_out["label"][:]
    assert describe_labels(
        label_mapping(
            DatasetDict({"train": held_out, "validation": held_out}), DataArguments(train_file="x.csv"), {}
        ),
        held_out,
        "label",
    ) == describe_labels_row_by_row(held_out)


def describe_labels_row_by_row(dataset) -> str:
    from collections import Counter

    counts = Counter(value.strip() for value in dataset["label"])
    return "classes: " + ", ".join(f"{name} {counts[name]}" for name in sorted(counts))


# -- tokenization ------------------------------------------------------------------------------------


def test_a_large_split_is_tokenized_by_a_process_per_core_unless_told():
    cores = len(tokenize_module.os.sched_getaffinity(0))
    threshold = tokenize_module.PARALLEL_TOKENIZING_ROWS
    assert tokenize_module.tokenizing_processes(threshold - 1, None) is None
    assert tokenize_module.tokenizing_processes(10 * threshold, 3) == 3  # --preprocessing_num_workers wins
    expected = None if cores < 2 else min(cores, tokenize_module.MAX_TOKENIZING_PROCESSES)
    assert tokenize_module.tokenizing_processes(100 * threshold, None) == expected


def test_tokenizing_on_several_processes_is_cached(tmp_path, tiny_bert, monkeypatch):
    from transformers import AutoTokenizer

    from recipes_lib.data.tokenize import tokenize

    class NoBarrier:
        def __call__(self, desc=None):
            return self

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    train = tmp_path / "train.csv"
    with open(train, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows((f"a {('red', 'blue')[i % 2]} cat {i}", ("warm", "cool")[i % 2]) for i in range(400))
    monkeypatch.setattr(tokenize_module, "PARALLEL_TOKENIZING_ROWS", 100)
    monkeypatch.setattr(tokenize_module.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    data_args = DataArguments(train_file=str(train), validation_file=str(train), max_seq_length=16)
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    first = tokenize(
        load_classification_data(data_args, cache_dir=str(tmp_path / "cache")),
        tokenizer,
        data_args,
        NoBarrier(),
    )
    files = [entry["filename"] for entry in first["train"].cache_files]
    assert len(files) == 2 and all("_of_00002" in name for name in files)
    written = {name: Path(name).stat().st_mtime_ns for name in files}
    again = tokenize(
        load_classification_data(data_args, cache_dir=str(tmp_path / "cache")),
        tokenizer,
        data_args,
        NoBarrier(),
    )
    assert [entry["filename"] for entry in again["train"].cache_files] == files
    assert {name: Path(name).stat().st_mtime_ns for name in files} == written  # read back, not written again
    assert again["train"]["labels"] == first["train"]["labels"] == [1, 0] * 200


# -- benchmarks/data_scale.py measures what it says ----------------------------------------------------


def load_data_scale():
    import importlib.util
    import sys

    from tests.helpers.repo import REPO_ROOT

    spec = importlib.util.spec_from_file_location(
        "benchmark_data_scale", REPO_ROOT / "benchmarks" / "data_scale.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_files_are_written_as_their_format_says_and_read_back_so(tmp_path):
    data_scale = load_data_scale()
    source = tmp_path / "sst2.tsv"
    source.write_text(
        "sentence\tlabel\n" + "".join(f"a fine , long film number {i} \t{i % 2}\n" for i in range(50))
    )
    for form in data_scale.FORMATS:
        train, _ = data_scale.data_files(tmp_path / "files", source, 1000, form)
        quoted, lines = decide_quoting(str(train))
        assert quoted is form.endswith("-quoted"), form
        assert len(lines) == 1000, form
        text = train.read_text()
        assert '"' in text  # quotes inside texts, stray ones in the unquoted files
        if form.endswith("-quoted"):
            assert text.count("\n") > 1001  # multi-line fields


def test_the_benchmark_ratios_are_against_plain_on_the_same_file():
    data_scale = load_data_scale()

    def result(way, seconds, cpu, rss, form="tsv-quoted"):
        return {
            "way": way, "rows": 1000, "format": form, "file_mb": 1.0, "seconds": seconds, "cpu_seconds": cpu,
            "peak_rss_mb": rss, "peak_tree_rss_mb": rss, "rss_after_imports_mb": 500.0, "num_proc": None,
        }  # fmt: skip

    (row,) = data_scale.ratios([result("plain", 10.0, 8.0, 600.0), result("ours", 12.0, 10.0, 630.0)])
    assert row["ours"]["time_ratio"] == 1.2 and row["ours"]["cpu_ratio"] == 1.25
    assert row["ours"]["rss_ratio"] == 1.05 and row["errors"] == {}
    header = {
        "machine": {
            "cpu": "x",
            "cores": 2,
            "avx512_bf16": False,
            "memory_gb": 1,
            "load_average_at_start": (1, 1, 1),
        },
        "versions": {"datasets": "1"},
        "baseline_rss_mb": 500.0,
    }
    table = data_scale.markdown([row], header, "python benchmarks/data_scale.py")
    assert "| 1,000 | tsv-quoted | 1 | 10.0 | 12.0 | 1.20x | 8.0 | 10.0 | 1.25x |" in table
    assert "| 1,000 | tsv-quoted | 600 | 630 | 1.05x | +30 |" in table
