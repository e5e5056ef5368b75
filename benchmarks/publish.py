"""Records of the demos' figures, and the published tables generated from them.

Every figure README.md, benchmarks/RESULTS.md and docs/ show from a demo comes from a record in
benchmarks/results/: the figures of each run, and the machine that ran them (CPU model and flags,
GPU, library versions, date, git commit). The Makefile's demo targets write one when they finish:

    python benchmarks/publish.py start outputs/demo/.started      # when the demo starts: the time and the commit
    python benchmarks/publish.py record demo outputs/demo/full_ft outputs/demo/lora ... --command "make demo" \
        --started outputs/demo/.started                              # the commit it started at, its wall time
    python benchmarks/publish.py record sweep-demo outputs/sweep_demo --command "make sweep-demo"
    python benchmarks/publish.py record distill-demo outputs/distill_demo/teacher outputs/distill_demo/distill_seed42 ...

and a published table sits between markers naming its table kind and its record:

    <!-- record demo benchmarks/results/demo-2026-12-03T061500Z.json: start -->
    ...generated...
    <!-- record: end -->

    python benchmarks/publish.py tables            # rewrites every marked block from its record
    python benchmarks/publish.py tables --check    # exit 1 if a block differs from its record

tests/test_publish.py runs the check on every file: a table edited by hand, or a record changed
without its table, fails the default test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
PUBLISHED_FILES = (
    "README.md",
    "benchmarks/RESULTS.md",
    *sorted(f"docs/{p.name}" for p in (REPO_ROOT / "docs").glob("*.md")),
)
LIBRARIES = (
    "torch",
    "transformers",
    "accelerate",
    "datasets",
    "peft",
    "bitsandbytes",
    "onnxruntime",
    "recipes-lib",
)
# CPU flags that decide how the recipes compute on CPU (docs/precision.md).
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
BLOCK = re.compile(
    r"(?P<start><!-- record (?P<table>[\w-]+) (?P<record>\S+): start -->\n)(?P<body>.*?)(?P<end><!-- record: end -->)",
    re.DOTALL,
)


# --- the machine -------------------------------------------------------------------------------------


def machine() -> dict:
    """What ran the figures: CPU model, cores and the flags that matter, GPU, library versions."""
    cpu = {"model": platform.processor() or platform.machine(), "cores": None, "flags": {}}
    try:
        text = Path("/proc/cpuinfo").read_text()
        model = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
        flags = set((re.search(r"^flags\s*:\s*(.+)$", text, re.MULTILINE) or [None, ""])[1].split())
        cpu["model"] = model.group(1).strip() if model else cpu["model"]
        cpu["cores"] = len(re.findall(r"^processor\s*:", text, re.MULTILINE))
        cpu["flags"] = {flag: flag in flags for flag in CPU_FLAGS}
    except OSError:  # not Linux: the model platform gives, no flags
        pass
    gpu = None
    try:
        import torch

        if torch.cuda.is_available():
            gpu = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    # How busy the machine was when the record was written (1, 5, 15 min): times and speeds depend on it.
    load = [round(value, 2) for value in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {
        "cpu": cpu,
        "gpu": gpu,
        "python": platform.python_version(),
        "versions": versions,
        "load_average": load,
    }


def git_commit() -> dict:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "--short", "HEAD") or None,
        "dirty": bool(git("status", "--porcelain", "src", "recipes")),
    }


def write_start(path: Path) -> None:
    """A demo's start: the time in seconds (as `date +%s` writes it) in `path`, the checkout's commit and
    whether src or recipes differ from it beside it (PATH.git.json), so the record names what ran."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{int(time.time())}\n")
    path.with_name(path.name + ".git.json").write_text(
        json.dumps({**git_commit(), "read_at": "start"}) + "\n"
    )


def read_start(path: Path) -> tuple[float, dict | None]:
    """(seconds since the start written at `path`, the commit then; None from a start file without it)."""
    wall_s = time.time() - int(path.read_text().split()[0])
    git_file = path.with_name(path.name + ".git.json")
    return wall_s, json.loads(git_file.read_text()) if git_file.is_file() else None


# --- records -----------------------------------------------------------------------------------------

# What a published table shows of a run's results.json; the record keeps these, per run.
RUN_FIELDS = (
    "recipe", "model_name_or_path", "problem_type", "eval_accuracy", "eval_f1", "eval_pearson",
    "eval_f1_micro", "eval_samples", "train_samples", "epochs", "train_steps", "train_runtime_s",
    "train_samples_per_s", "pad_ratio", "params_total", "params_trainable", "optimizer_state_bytes",
    "peak_memory_gib", "peak_memory_source", "precision", "device", "config",
)  # fmt: skip


def run_figures(run_dir: Path) -> dict:
    results_file = run_dir / "results.json"
    if not results_file.is_file():
        raise SystemExit(
            f"error: {results_file} does not exist: run the demo first (its run writes results.json)."
        )
    from recipes_lib.results import read_results  # the one reader of results.json

    results = read_results(run_dir)
    figures = {key: results.value(key) for key in RUN_FIELDS}
    figures["run_dir"] = str(run_dir)
    export = export_figures(run_dir)
    if export is not None:
        figures["export"] = export
    return figures


# What a record keeps of a `recipes-lib export` (OUTPUT_DIR/export/export_report.json, or export.failed/'s
# when the gate refused it), per model; and of its int8 recipe and its batch-1 latency.
EXPORT_FIELDS = ("rows", "agreement", "metric", "pytorch", "onnx", "metric_drop_points",
                 "max_abs_logit_difference", "file", "size_bytes")  # fmt: skip
INT8_FIELDS = ("weights", "made_from", "fused_operators", "nodes_kept_fp32")


def export_figures(run_dir: Path) -> dict | None:
    report_file = next(
        (
            path
            for path in (run_dir / d / "export_report.json" for d in ("export", "export.failed"))
            if path.is_file()
        ),
        None,
    )
    if report_file is None:
        return None
    report = json.loads(report_file.read_text())

    def model_figures(model: dict) -> dict:
        return {key: model[key] for key in EXPORT_FIELDS if key in model}

    figures = {
        "exporter": report.get("exporter"),
        "int8_weights": report.get("int8_weights"),
        "rows_from": report.get("rows_from"),
        "passed": report.get("passed"),
        "reason": report.get("reason"),
        "models": {name: model_figures(model) for name, model in report["models"].items()},
    }
    int8 = report.get("int8")
    if int8:
        figures["int8"] = {key: int8[key] for key in INT8_FIELDS if key in int8}
        if int8.get("every_node_int8"):  # the sensitivity pass ran: the figures before it kept any node
            figures["int8"]["every_node_int8"] = model_figures(int8["every_node_int8"])
    if report.get("latency"):
        figures["latency"] = report["latency"]
    return figures


def write_record(
    name: str,
    sources: list[Path],
    command: str,
    wall_s: float | None,
    out_dir: Path,
    commit: str | None = None,
    git: dict | None = None,
) -> Path:
    """`commit`: the commit the runs ran from, where it is not the checkout's now (a record written later);
    `git`: the checkout's state when the runs started (`read_start`)."""
    git = {"commit": commit, "dirty": False, "given": True} if commit else (git or git_commit())
    record = {"name": name, "command": command, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": machine(), "git": git, "wall_s": wall_s}  # fmt: skip
    sweep_files = [
        source / "sweep_results.json" for source in sources if (source / "sweep_results.json").is_file()
    ]
    if sweep_files:
        record["sweep"] = json.loads(sweep_files[0].read_text())
    else:
        record["runs"] = [run_figures(source) for source in sources]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}-{datetime.now(timezone.utc).strftime('%Y-%m-%dT%H%M%SZ')}.json"
    temporary = path.with_suffix(".json.tmp")  # never a half-written record under the final name
    temporary.write_text(json.dumps(record, indent=1) + "\n")
    temporary.replace(path)
    return path


# --- tables ------------------------------------------------------------------------------------------


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MiB"


def _figure(value, fmt: str = "{:.4f}") -> str:
    return "-" if value is None else fmt.format(value)


def machine_line(record: dict, record_path: str, link: str) -> str:
    cpu, versions = record["machine"]["cpu"], record["machine"]["versions"]
    flags = cpu.get("flags") or {}
    isa = (
        "AVX-512 BF16"
        if flags.get("avx512_bf16")
        else ("AVX-512" if flags.get("avx512f") else ("AVX2" if flags.get("avx2") else "no AVX2"))
    )
    if flags.get("amx_bf16"):  # bf16 matmuls on AMX tiles: another speed, and other roundings, than AVX-512's
        isa += ", AMX BF16"
    gpu = ", GPU " + ", ".join(record["machine"]["gpu"]) if record["machine"].get("gpu") else ", no GPU"
    wall = f"; {record['wall_s'] / 60:.1f} min in all" if record.get("wall_s") else ""
    load = record["machine"].get("load_average")
    wall += (
        f", load average {load[1]:.1f} over the 5 min before it was recorded ({cpu['cores']} cores)"
        if load
        else ""
    )
    commit = record["git"].get("commit") or "unknown"
    return (
        f"`{record['command']}` on {(record.get('date') or record['created_at'])[:10]}: {cpu['model']} ({cpu['cores']} cores, {isa}){gpu}; "
        f"torch {versions.get('torch')}, transformers {versions.get('transformers')}, peft {versions.get('peft')}, "
        f"bitsandbytes {versions.get('bitsandbytes')}; commit {commit}{' (modified)' if record['git'].get('dirty') else ''}"
        f"{wall}. Record: [{record_path}]({link})."
    )


def demo_table(record: dict) -> list[str]:
    lines = [
        "| recipe | precision | accuracy | macro-F1 | trainable parameters | optimizer state | peak memory (process RSS) | samples/s | train s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in record["runs"]:
        lines.append(
            f"| {run['recipe']} | {run.get('precision') or '-'} | {_figure(run.get('eval_accuracy'))} | {_figure(run.get('eval_f1'))} | "
            f"{run['params_trainable']:,} | {_mib(run.get('optimizer_state_bytes'))} | "
            f"{_figure(run.get('peak_memory_gib'), '{:.2f} GiB')} | {_figure(run.get('train_samples_per_s'), '{:.1f}')} | "
            f"{_figure(run.get('train_runtime_s'), '{:.1f}')} |"
        )
    return lines


def task_table(record: dict) -> list[str]:
    lines = ["| task | recipe | validation figures | train s | peak RSS |", "|---|---|---|---|---|"]
    for run in record["runs"]:
        if run.get("problem_type") == "regression":
            figures = f"Pearson {_figure(run.get('eval_pearson'), '{:.3f}')}"
        elif run.get("problem_type") == "multi_label_classification":  # accuracy: the whole set of classes
            figures = (f"exact match {_figure(run.get('eval_accuracy'), '{:.3f}')}, micro-F1 "
                       f"{_figure(run.get('eval_f1_micro'), '{:.3f}')}, macro-F1 {_figure(run.get('eval_f1'), '{:.3f}')}")  # fmt: skip
        else:
            figures = f"accuracy {_figure(run.get('eval_accuracy'), '{:.3f}')}, macro-F1 {_figure(run.get('eval_f1'), '{:.3f}')}"
        lines.append(f"| {run.get('problem_type')} | {run['recipe']} | {figures} | {_figure(run.get('train_runtime_s'), '{:.1f}')} | "
                     f"{_figure(run.get('peak_memory_gib'), '{:.2f} GiB')} |")  # fmt: skip
    return lines


def long_text_table(record: dict) -> list[str]:
    lines = ["| --long_text | accuracy | macro-F1 | train steps | train s |", "|---|---|---|---|---|"]
    for run in record["runs"]:
        mode = (run.get("config") or {}).get("long_text", "?")
        lines.append(f"| {mode} | {_figure(run.get('eval_accuracy'))} | {_figure(run.get('eval_f1'))} | "
                     f"{run.get('train_steps')} | {_figure(run.get('train_runtime_s'), '{:.1f}')} |")  # fmt: skip
    return lines


def sweep_table(record: dict) -> list[str]:
    lines = ["| recipe | chosen learning rate | final mean ± std | seeds |", "|---|---|---|---|"]
    sweep = record["sweep"]
    for recipe in sweep["recipes"]:
        spread = recipe.get("test") or recipe.get("validation") or {}
        mean_std = f"{spread['mean']:.4f} ± {spread['std']:.4f}" if spread.get("mean") is not None else "-"
        values = " ".join(f"{v:.4f}" for v in spread.get("values") or [])
        lines.append(f"| {recipe['recipe']} | {recipe['chosen_learning_rate']} | {mean_std} | {values} |")
    for pair in sweep.get("pairs") or []:
        lines.append("")
        lines.append(
            f"{pair['a']} vs {pair['b']} ({pair['test']}): p = {_figure(pair.get('p_value'), '{:.3f}')}; {pair.get('verdict')}."
        )
    return lines


def _mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f} (one run)"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def distill_table(record: dict) -> list[str]:
    """make distill-demo: each kind of run (the teacher, the taught students, the students alone) over its
    seeds, validation accuracy as mean ± sample std; then the gate figures of the exported student."""
    runs = record["runs"]
    teachers = {
        str((run.get("config") or {}).get("teacher")) for run in runs if run.get("recipe") == "distill"
    }
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        config = run.get("config") or {}
        key = (
            run["recipe"],
            config.get("train_file"),
            config.get("transfer_file"),
            run["run_dir"] in teachers,
        )
        groups.setdefault(key, []).append(run)
    lines = [
        "| run | training rows | validation accuracy, mean ± std | seeds: accuracy |",
        "|---|---|---|---|",
    ]
    for (recipe, train_file, transfer_file, is_teacher), members in groups.items():
        name = "teacher" if is_teacher else ("student, taught" if recipe == "distill" else "student, alone")
        rows = f"{members[0].get('train_samples', 0):,}: `{Path(train_file or '-').name}`"
        if transfer_file:
            rows += f" + `{Path(transfer_file).name}` labelled by the teacher"
        seeds = ", ".join(
            f"{(run.get('config') or {}).get('seed')}: {run['eval_accuracy']:.4f}" for run in members
        )
        accuracy = _mean_std([run["eval_accuracy"] for run in members])
        lines.append(f"| {name} ({recipe}) | {rows} | {accuracy} | {seeds} |")
    for run in runs:
        export = run.get("export")
        if export is None:
            continue
        lines.append("")
        lines.append(
            f"`recipes-lib export {run['run_dir']}` ({export['exporter']} exporter"
            + (f", int8 weights {export['int8_weights']}" if export.get("int8_weights") else "")
            + f"), gate on {export['rows_from']}:"
        )
        lines.append("")
        lines.append(
            "| model | size | agreement with PyTorch | accuracy, ONNX (PyTorch) | drop, points | largest logit difference |"
        )
        lines.append("|---|---|---|---|---|---|")
        for name, model in export["models"].items():
            metric = model["metric"]
            lines.append(
                f"| {name} | {_mib(model['size_bytes'])} | {100 * model['agreement']:.2f}% of {model['rows']} | "
                f"{model['onnx'][metric]:.4f} ({model['pytorch'][metric]:.4f}) | {model['metric_drop_points']:.2f} | "
                f"{model['max_abs_logit_difference']:.1e} |"
            )
    return lines


def export_table(record: dict) -> list[str]:
    """Runs exported with `recipes-lib export RUN --quantize int8`: each exported model's gate figures
    (int8 also with every node quantized, where the sensitivity pass kept some in fp32) and its batch-1
    latency as a ratio to PyTorch eager, measured side by side; then what each gate decided."""
    lines = [
        "| run | model | size | agreement with PyTorch | accuracy, ONNX (PyTorch) | drop, points | nodes kept in fp32 | batch-1 speed vs PyTorch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for run in record["runs"]:
        export = run.get("export")
        if export is None:
            continue
        config = run.get("config") or {}
        name = f"{run['recipe']}, {run.get('train_samples', 0):,} rows of `{Path(config.get('train_file') or '-').name}`"
        int8 = export.get("int8") or {}
        medians = (export.get("latency") or {}).get("median_ms") or {}
        models = list(export["models"].items())
        if int8.get("every_node_int8"):
            models.insert(1, ("int8, every node", int8["every_node_int8"]))
        for model_name, model in models:
            metric = model["metric"]
            kept = "-" if not model_name.startswith("int8") else "none"
            if model_name == "int8" and int8.get("nodes_kept_fp32"):
                kept = f"{len(int8['nodes_kept_fp32'])}: " + ", ".join(
                    f"`{node}`" for node in int8["nodes_kept_fp32"]
                )
            speed = f"{medians['pytorch'] / medians[model_name]:.1f}x" if model_name in medians else "-"
            lines.append(
                f"| {name} | {model_name} | {_mib(model['size_bytes'])} | {100 * model['agreement']:.2f}% of {model['rows']} | "
                f"{100 * model['onnx'][metric]:.2f} ({100 * model['pytorch'][metric]:.2f}) | {model['metric_drop_points']:.2f} | "
                f"{kept} | {speed} |"
            )
        verdicts.append(
            f"- {name}: gate on {export['rows_from']}, "
            + ("passed" if export.get("passed") else f"refused ({export.get('reason')})")
            + (f"; int8: {int8['weights']}, made from the {int8.get('made_from')}" if int8 else "")
            + (
                f"; batch-1 latency at {export['latency']['threads']} thread, median of {export['latency']['rows']} rows taken in turn"
                if export.get("latency")
                else ""
            )  # fmt: skip
            + "."
        )
    onnxruntime = record["machine"]["versions"].get("onnxruntime")
    return [
        *lines,
        "",
        f"ONNX Runtime {onnxruntime or 'not recorded'}; what each gate decided:",
        "",
        *verdicts,
    ]


def _by_name(summary: list[dict]) -> dict[str, dict]:
    return {row["name"]: row for row in summary}


def sizes_table(record: dict) -> list[str]:
    """A `benchmarks/throughput.py --sizes ... --baseline_src OLD/src` report: per training-set size,
    the pad ratio and real tokens/s of the usual way, the recipe before (OLD) and after."""
    lines = [
        "| train examples | pad ratio: usual (pad to 128) | before | after | real tokens/s: usual | before | after | after / before |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for size, summary in record["summary_by_size"].items():
        rows = _by_name(summary)
        # "before": an older library (--baseline_src) or, since --length_grouping, the stock grouping.
        before = rows["stock"] if "stock" in rows else rows["recipe@baseline"]
        usual, after = rows.get("usual"), rows["recipe"]
        ratio = after["real_tokens_per_s"] / before["real_tokens_per_s"]
        lines.append(
            f"| {int(size):,} | {_figure(usual and usual['pad_ratio'], '{:.3f}')} | {before['pad_ratio']:.3f} | "
            f"**{after['pad_ratio']:.3f}** | {_figure(usual and usual['real_tokens_per_s'], '{:.0f}')} | "
            f"{before['real_tokens_per_s']:.0f} | {after['real_tokens_per_s']:.0f} | {ratio:.2f}x |"
        )
    return lines


def seeds_table(record: dict) -> list[str]:
    """A `benchmarks/throughput.py --seeds ... --baseline_src OLD/src` report: accuracy by seed, before and after."""
    (summary,) = record["summary_by_size"].values()
    seeds = ", ".join(str(seed) for seed in summary[0]["seeds"])
    names = {"recipe@baseline": "before", "recipe": "after"}
    lines = [
        f"| run | accuracy by seed ({seeds}) | mean ± std | pad ratio | real tokens/s |",
        "|---|---|---|---|---|",
    ]
    for row in summary:
        by_seed = ", ".join(f"{value:.4f}" for value in row["eval_accuracy_by_seed"])
        spread = f" ± {row['eval_accuracy_std']:.4f}" if row.get("eval_accuracy_std") is not None else ""
        lines.append(
            f"| {names.get(row['name'], row['name'])} | {by_seed} | {row['eval_accuracy']:.4f}{spread} | "
            f"{row['pad_ratio']:.3f} | {row['real_tokens_per_s']:.0f} |"
        )
    return lines


def precision_table(record: dict) -> list[str]:
    """A `benchmarks/throughput.py --precisions fp32 bf16` report: per training-set size, accuracy by seed
    and real tokens/s of each precision, its fraction of the machine's matmul peak, and Welch's test."""
    lines = [
        "| train examples | precision | accuracy by seed | mean ± std | real tokens/s | tokens/s vs fp32 | fraction of peak |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, summary in record["summary_by_size"].items():
        for row in summary:
            by_seed = ", ".join(
                f"{seed}: {value:.4f}"
                for seed, value in zip(row["seeds"], row["eval_accuracy_by_seed"], strict=True)
            )
            spread = f" ± {row['eval_accuracy_std']:.4f}" if row.get("eval_accuracy_std") is not None else ""
            peak = "-" if row.get("fraction_of_peak") is None else f"{row['fraction_of_peak']:.1%}"
            lines.append(
                f"| {int(size):,} | {row['name']} | {by_seed} | {row['eval_accuracy']:.4f}{spread} | "
                f"{row['real_tokens_per_s']:.0f} | {row['real_tokens_per_s_ratio']:.2f}x | {peak} |"
            )
    for size, test in (record.get("accuracy_tests") or {}).items():
        if test:
            lines += [
                "",
                f"{int(size):,} examples, accuracy {test['a']} vs {test['b']} ({test['test']}): {test['verdict']}.",
            ]
    shape = record.get("model_shape")
    if shape:
        lines += ["", f"Training FLOPs: {record['flops_formula']}, N = {shape['non_embedding_parameters']:,} "
                  f"non-embedding parameters, L = {shape['layers']}, H = {shape['hidden']}; peak: the matmul probe "
                  "in the run's precision, just before each run (benchmarks/throughput.py)."]  # fmt: skip
    return lines


def compile_table(record: dict) -> list[str]:
    """A `benchmarks/compile_steady.py` report: the steady-state step, compiled against eager, after a warm-up."""
    ms, warmup = record["median_step_ms"], record["warmup_s"]
    lengths = record["padded_lengths"]
    payback = record["steps_to_pay_back_compiling"]
    return [
        "| precision | batches (padded lengths) | median step: eager | compiled | compiled / eager | warm-up: eager | compiled (graphs) | steps to pay back compiling |",
        "|---|---|---|---|---|---|---|---|",
        f"| {record['precision']} | {record['batches']} of {record['batch_size']} ({len(lengths)}: {lengths[0]}-{lengths[-1]}) | "
        f"{ms['eager']:.0f} ms | {ms['compiled']:.0f} ms | {record['compiled_over_eager']:.3f}x | {warmup['eager']:.0f} s | "
        f"{warmup['compiled']:.0f} s ({record['graphs_after_warmup']}; {record['graphs_made_in_timed_steps']} more when timed) | "
        f"{'never (no steady gain)' if payback is None else f'{payback:,}'} |",
    ]


def label_noise_table(record: dict) -> list[str]:
    """A `benchmarks/label_noise.py` record: the cross-validation of the noisy file, label-issues' flags
    against the flipped rows, and (with --retrain_seeds) the noisy and cleaned files' runs."""
    metric = next(key.removesuffix("_mean") for key in record if key.endswith("_mean"))
    folds = [
        fold[metric] for fold in record.get(f"{metric}_per_fold") or []
    ]  # crossval_results.json's per_fold
    each = f" (folds: {', '.join(f'{value:.4f}' for value in folds)})" if folds else ""
    lines = [
        "| what | figure |",
        "|---|---|",
        f"| cross-validation, {record['folds']} folds, each scored on its own held-out noisy rows | "
        f"{metric} {record[metric + '_mean']:.4f} ± {record[metric + '_std']:.4f}{each} |",
    ]
    test = record.get("test")
    if test:
        lines.append(f"| each fold's model on `{test['test_file']}` | {test['metric']} {test['mean']:.4f} ± {test['std']:.4f} "
                     f"(folds: {', '.join(f'{value:.4f}' for value in test['per_fold'])}) |")  # fmt: skip
        lines.append(f"| the folds' ensemble on the same rows | {test['metric']} {test['ensemble']:.4f} |")
    lines.append(
        f"| flagged by label-issues | {record['flagged']} rows, {record['flagged_and_flipped']} of them flipped "
        f"(of {record['flipped']}): precision {record['precision']:.3f}, recall {record['recall']:.3f} |"
    )
    retrained = record.get("retrained")
    if retrained:
        for name in ("noisy", "cleaned"):
            values = ", ".join(f"{value:.4f}" for value in retrained[name]["values"])
            lines.append(
                f"| retrained on the {name} file, {retrained['metric']} by seed {retrained['seeds']} | {values} |"
            )
        lines.append(f"| cleaned against noisy | {retrained['pair']['verdict']} |")
    return lines


TABLES = {
    "demo": demo_table,
    "distill-demo": distill_table,
    "export": export_table,
    "task-demo": task_table,
    "long-text-demo": long_text_table,
    "sweep-demo": sweep_table,
    # benchmarks/throughput.py's reports (their machine is one line of text)
    "sizes": sizes_table,
    "seeds": seeds_table,
    "precision": precision_table,
    "compile": compile_table,
    "label-noise": label_noise_table,
}


def render(table: str, record_path: str, published_in: str = "README.md") -> str:
    """The block for `record_path`, its link relative to the file it is published in (a repository path)."""
    if table not in TABLES:
        raise SystemExit(f"error: no table kind '{table}'; use one of {', '.join(TABLES)}.")
    path = REPO_ROOT / record_path
    if not path.is_file():
        raise SystemExit(
            f"error: the record {record_path} does not exist; write it with `benchmarks/publish.py record`."
        )
    record = json.loads(path.read_text())
    link = os.path.relpath(path, (REPO_ROOT / published_in).parent)
    if isinstance(record["machine"], str):  # a benchmarks/throughput.py report: its machine in words
        git = record.get("git")  # read when the run started (older reports have none)
        commit = f"; commit {git['commit']}{' (modified)' if git.get('dirty') else ''}" if git else ""
        line = f"`{record['command']}`, {record['created_at']}: {record['machine']}{commit}. Record: [{record_path}]({link})."
    else:
        line = machine_line(record, record_path, link)
    return "\n".join([*TABLES[table](record), "", line]) + "\n"


def regenerate(text: str, published_in: str = "README.md") -> str:
    return BLOCK.sub(lambda m: m["start"] + render(m["table"], m["record"], published_in) + m["end"], text)


def published_blocks(text: str) -> list[tuple[str, str, str]]:
    """(table, record, body) of each marked block."""
    return [(m["table"], m["record"], m["body"]) for m in BLOCK.finditer(text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="action", required=True)
    record = commands.add_parser("record", help="write a record of a demo's runs (or a sweep's output dir)")
    record.add_argument(
        "name",
        help="the record's name: demo, task-demo, long-text-demo, sweep-demo, distill-demo, int8-export",
    )
    record.add_argument(
        "sources", nargs="+", type=Path, help="run directories (results.json) or a sweep's output dir"
    )
    record.add_argument("--command", required=True, help="the command that produced the runs, as published")
    record.add_argument("--wall_s", type=float, default=None, help="the command's wall time in seconds")
    record.add_argument("--out_dir", type=Path, default=RESULTS_DIR)
    record.add_argument(
        "--git_commit", default=None, help="the commit the runs ran from (default: the checkout's)"
    )
    record.add_argument(
        "--started",
        type=Path,
        default=None,
        help="the file `publish.py start` wrote when the runs started: their commit, and the wall time when --wall_s is not given",
    )
    start = commands.add_parser("start", help="write the start time and the commit, for record --started")
    start.add_argument("path", type=Path)
    tables = commands.add_parser("tables", help="regenerate every marked table from its record")
    tables.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a table differs from its record"
    )
    args = parser.parse_args(argv)
    if args.action == "start":
        write_start(args.path)
        return 0
    if args.action == "record":
        wall_s, git = read_start(args.started) if args.started else (args.wall_s, None)
        wall_s = args.wall_s if args.wall_s is not None else wall_s
        path = write_record(args.name, args.sources, args.command, wall_s, args.out_dir, args.git_commit, git)
        print(f"record: {path}")
        return 0
    stale = []
    for name in PUBLISHED_FILES:
        path = REPO_ROOT / name
        if not path.is_file():
            continue
        text = path.read_text()
        fresh = regenerate(text, name)
        if fresh != text:
            stale.append(name)
            if not args.check:
                path.write_text(fresh)
    if args.check and stale:
        print(
            f"error: tables differ from their records in {', '.join(stale)}: run benchmarks/publish.py tables.",
            file=sys.stderr,
        )
        return 1
    print(("stale: " if args.check else "updated: ") + (", ".join(stale) or "nothing"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
