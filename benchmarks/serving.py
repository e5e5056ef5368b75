"""Serving speed side by side, in one run, on the same rows: PyTorch eager, ONNX Runtime fp32, ONNX Runtime int8.

    recipes-lib export outputs/demo/full_ft --quantize int8
    python benchmarks/serving.py outputs/demo/full_ft [--input data/support_tickets/validation.csv] [--rows 256]

For each engine, in its own fresh process (so that one engine's memory and threads cannot colour the
next): the model loads, then
    latency at batch 1      each of the first --latency_rows rows alone (no padding), after --warmup calls:
                            median and 95th percentile, in milliseconds
    throughput at batch 32  all --rows rows in batches of 32, each padded to its longest row: rows per second
    peak memory             the process's peak resident set (Linux VmHWM, reset through /proc/self/clear_refs
                            just before the model loads) less its RSS at that moment (libraries imported,
                            rows tokenized): what loading the model and serving add
    size on disk            the weights' files (model.safetensors; model.onnx and model.int8.onnx)
Every engine gets --threads intra-op threads (default: every core this process may use). The texts are
tokenized by the export's tokenizer with the run's max_seq_length (truncation). PyTorch eager runs the
model the export was made from (a LoRA adapter merged, as exported), in fp32 under inference_mode.

Results go to benchmarks/results/serving_<UTC time>.json (and .md) with the machine: CPU model, cores,
whether it has AVX-512 BF16, library versions, date and git commit; the export's gate figures
(agreement, accuracy) are copied from its export_report.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ENGINES = ("pytorch", "onnx_fp32", "onnx_int8")
ENGINE_TITLES = {
    "pytorch": "PyTorch eager (fp32)",
    "onnx_fp32": "ONNX Runtime fp32",
    "onnx_int8": "ONNX Runtime int8",
}
THROUGHPUT_BATCH = 32
VERSIONED = ("torch", "transformers", "onnx", "onnxscript", "onnxruntime", "numpy")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "run_dir", help="a finished run's output_dir holding export/ (recipes-lib export --quantize int8)"
    )
    parser.add_argument(
        "--input",
        help="texts to serve (.csv or .tsv with the run's text column); default: the run's validation file",
    )
    parser.add_argument(
        "--rows", type=int, default=256, help="rows for the batch-32 throughput (default 256)"
    )
    parser.add_argument(
        "--latency_rows", type=int, default=100, help="rows timed one at a time (default 100)"
    )
    parser.add_argument(
        "--warmup", type=int, default=10, help="untimed calls before each measurement (default 10)"
    )
    parser.add_argument(
        "--threads", type=int, default=len(os.sched_getaffinity(0)), help="intra-op threads per engine"
    )
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--report_dir", default=str(REPO_ROOT / "benchmarks" / "results"))
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)  # the child process's engine
    return parser.parse_args(argv)


def _texts(args) -> list[str]:
    import csv

    results = json.loads((Path(args.run_dir) / "results.json").read_text())
    config = results["config"]
    path = args.input or config.get("validation_file")
    if not path:
        sys.exit("error: the run has no validation_file; pass --input, a .csv of texts.")
    column = (config.get("text_column_names") or "text").split(",")[0].strip()
    delimiter = "\t" if str(path).endswith(".tsv") else ","  # the runs' csv and tsv files
    with open(path, newline="") as handle:
        texts = [row[column] for row in csv.DictReader(handle, delimiter=delimiter)]
    if not texts:
        sys.exit(f"error: {path} holds no rows.")
    return [texts[i % len(texts)] for i in range(max(args.rows, args.latency_rows))]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak_rss() -> bool:
    """Linux: start the process's peak RSS (VmHWM) afresh from its current RSS; False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes() -> int:
    """VmHWM, the peak RSS since the last reset (ru_maxrss, the lifetime peak, where /proc is absent)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


def measure(args) -> dict:
    """One engine, in this (child) process."""
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from recipes_workbench.export.bundle import EXPORT_SUBDIR, FP32_MODEL, INT8_MODEL
    from recipes_workbench.export.onnx_model import model_to_export, size_on_disk
    from recipes_workbench.export.runtime import onnx_session, session_logits

    torch.set_num_threads(args.threads)
    export_dir = Path(args.run_dir) / EXPORT_SUBDIR
    tokenizer = AutoTokenizer.from_pretrained(export_dir)
    max_length = json.loads((export_dir / "export_config.json").read_text())["max_seq_length"]
    texts = _texts(args)
    names = list(tokenizer.model_input_names)
    singles = [
        tokenizer(text, truncation=True, max_length=max_length, return_tensors="np")
        for text in texts[: args.latency_rows]
    ]
    batches = [
        tokenizer(
            texts[start : start + THROUGHPUT_BATCH],
            truncation=True,
            max_length=max_length,
            padding=True,
            return_tensors="np",
        )
        for start in range(0, args.rows, THROUGHPUT_BATCH)
    ]
    peak_was_reset = _reset_peak_rss()  # the peak counted from here: not the imports' or the tokenizer's
    before_load = _rss_bytes()
    if args.engine == "pytorch":
        import tempfile

        from recipes_workbench.export.bundle import find_run

        model_dir = find_run(args.run_dir).model_dir
        with tempfile.TemporaryDirectory() as scratch:
            model, _ = model_to_export(model_dir, scratch)
        weights = [
            p for p in model_dir.iterdir() if p.name.startswith("model") and p.suffix == ".safetensors"
        ]
        weights += [p for p in model_dir.iterdir() if p.name.startswith("adapter_model")]
        size = sum(p.stat().st_size for p in weights)

        def run(batch):
            with torch.inference_mode():
                return model(**{name: torch.from_numpy(batch[name]) for name in names}).logits.numpy()
    else:
        path = export_dir / (FP32_MODEL if args.engine == "onnx_fp32" else INT8_MODEL)
        session = onnx_session(path, threads=args.threads)
        size = size_on_disk(path)

        def run(batch):
            return session_logits(session, batch)

    for batch in (singles * args.warmup)[: args.warmup]:
        run(batch)
    latencies = []
    for batch in singles:
        started = time.perf_counter()
        run(batch)
        latencies.append(1000 * (time.perf_counter() - started))
    run(batches[0])
    started = time.perf_counter()
    for batch in batches:
        run(batch)
    elapsed = time.perf_counter() - started
    peak = _peak_rss_bytes()
    return {
        "engine": args.engine,
        "latency_ms_median": statistics.median(latencies),
        "latency_ms_p95": float(np.percentile(latencies, 95)),
        "throughput_rows_per_s": args.rows / elapsed,
        "size_bytes": size,
        "peak_memory_bytes": peak - before_load,
        "peak_memory_source": "VmHWM reset before loading, less RSS before loading"
        if peak_was_reset
        else "lifetime ru_maxrss less RSS before loading",
        "rows": args.rows,
        "latency_rows": len(singles),
    }


def machine() -> dict:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
        platform.processor(),
    )
    flags = next(
        (line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), []
    )
    versions = {}
    for package in VERSIONED:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    versions["python"] = platform.python_version()
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "avx512f": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "load_average_at_start": os.getloadavg(),
        "versions": versions,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git_commit": commit,
    }


def markdown(rows: list[dict]) -> str:
    base = next((row for row in rows if row["engine"] == "pytorch"), rows[0])
    lines = [
        "| engine | batch-1 latency median (p95) | vs PyTorch | batch-32 rows/s | vs PyTorch | size on disk | peak memory (RSS delta) | agreement | accuracy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        gate = row.get("gate") or {}
        accuracy = gate.get("onnx", gate.get("pytorch", {})).get("accuracy")
        agreement = f"{100 * gate['agreement']:.2f}%" if "agreement" in gate else "-"
        lines.append(
            f"| {ENGINE_TITLES[row['engine']]} | {row['latency_ms_median']:.2f} ms ({row['latency_ms_p95']:.2f}) "
            f"| {base['latency_ms_median'] / row['latency_ms_median']:.2f}x faster "
            f"| {row['throughput_rows_per_s']:.0f} | {row['throughput_rows_per_s'] / base['throughput_rows_per_s']:.2f}x "
            f"| {row['size_bytes'] / 2**20:.1f} MiB | {row['peak_memory_bytes'] / 2**20:.0f} MiB "
            f"| {agreement} | {'-' if accuracy is None else f'{accuracy:.4f}'} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.engine is not None:
        print(json.dumps(measure(args)))
        return 0
    export_dir = Path(args.run_dir) / "export"
    if not (export_dir / "export_report.json").is_file():
        sys.exit(
            f"error: no export in {export_dir}; run `recipes-lib export {args.run_dir} --quantize int8` first."
        )
    report = json.loads((export_dir / "export_report.json").read_text())
    machine_at_start = machine()  # the load average before the engines run
    rows = []
    for engine in args.engines:
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            *(argv if argv is not None else sys.argv[1:]),
            "--engine",
            engine,
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"error: the {engine} engine failed:\n{done.stderr[-2000:]}")
        row = json.loads(done.stdout.strip().splitlines()[-1])
        gate = report["models"].get({"onnx_fp32": "fp32", "onnx_int8": "int8"}.get(engine, "fp32"))
        row["gate"] = {"pytorch": gate["pytorch"]} if engine == "pytorch" and gate else gate
        rows.append(row)
        print(
            f"{engine}: {row['latency_ms_median']:.2f} ms median at batch 1, {row['throughput_rows_per_s']:.0f} rows/s at batch 32",
            file=sys.stderr,
        )
    record = {
        "run_dir": str(args.run_dir),
        "threads": args.threads,
        "machine": machine_at_start,
        "engines": rows,
    }
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    report_dir = Path(args.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / f"serving_{stamp}.json").write_text(json.dumps(record, indent=2) + "\n")
    table = markdown(rows)
    (report_dir / f"serving_{stamp}.md").write_text(table + "\n")
    print(table)
    print(f"Wrote {report_dir / f'serving_{stamp}.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
