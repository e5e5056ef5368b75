"""GPU check, one command under one deadline: the recipes on bert-base, their step profile, then the
planner's catalogue with the time left.

    bash benchmarks/gpu_check.sh --budget_s 480           # on the lent H200 (carry [".whl"]), < 10 minutes
    bash benchmarks/gpu_check.sh --cpu --tiny              # the same code path on a CPU (make gpu-rehearsal)

This process only schedules: every piece of work is a child process with its own timeout, the smaller
of the piece's cap and the time left before the deadline (--budget_s from the start). A child that
fails or runs out of time is killed with everything it started, its row says why (the end of its
output), and the next row starts. The report (--output, by default $OUT, else benchmarks/results/)
is rewritten, atomically, after every row, so a run stopped at any point keeps every row so far.

1. preflight (gpu_preflight.py check): every package imported and its version printed; anything
   missing stops the check here with one line that says how to carry it. It also times a bf16
   matrix product (8192 cube after warm-up), the rate MFU is measured against.
2. recipes: each recipe on bert-base as the user runs it (`accelerate launch recipes/<recipe>.py`,
   bf16, batch 32, seq 128, --steps): measured peak memory against `recipes-lib plan`'s, and the
   end-to-end samples/s (start-up included: not a throughput figure, the step profile gives that).
3. step profile (step_profile.py) of the recipes on bert-base: forward, backward and optimizer step
   (median of the timed steps after --warmup_steps), and the steady-state step time: the timed steps
   again back to back, one synchronisation at each end, memory tracking off. MFU comes from that:
   tokens per step x FLOPs per token / step time, against the measured matmul rate and the datasheet's.
4. catalogue (gpu_catalogue.py): every catalogue model the device holds, smallest first, until the
   deadline; a row that hangs is cut off at --catalogue_row_timeout_s and the rest go on.

No downloads: each model is a randomly initialised BERT built from its configuration with a WordPiece
vocabulary of placeholder words, and the data are synthetic sentences exactly `seq` tokens long, so
every step is batch x seq real tokens. Random weights change nothing about speed or memory.

FLOPs per token = 6 x (non-embedding parameters) + 12 x layers x hidden x seq (attention scores and
weighted values, forward and backward), the usual transformer estimate. LoRA does not compute weight
gradients of frozen matrices, so the same formula overstates its work by up to 1/3: its MFU is
"useful model FLOPs", comparable across recipes, not hardware utilisation.

GPU_CHECK_HANG (a comma-separated list of row names: `bert-base/lora`, `step_profile`,
`catalogue/<hub id>/<recipe>`) makes those rows sleep instead of working: it shows a hung row being
cut off with the others kept (tests/workbench/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO_ROOT / "benchmarks"

MODEL_SHAPES = {
    # name: (hidden, layers, heads, intermediate)
    "bert-base": (768, 12, 12, 3072),
    "bert-large": (1024, 24, 16, 4096),
    "bert-tiny": (64, 2, 2, 256),
}
VOCAB_SIZE = 30522  # bert-base-uncased's, so embedding sizes match the real models
RECIPES = ["full_ft", "adamw_8bit", "lora", "qlora"]
RESERVE_S = 5.0  # kept at the end for the last report
MIN_ROW_S = 15.0  # a row is not started with less than this left
HANG_ENV = "GPU_CHECK_HANG"
# Issue 47's parts that are catalogue rows with their own models, recipes and gpu_catalogue.py options:
# name -> (models, recipes, options, what the rows decide). Each is a list of its own in the report.
README_24GB_ROWS = [  # README's "What trains in 24 GB", the rows planned as plain full_ft
    "google-bert/bert-base-uncased", "FacebookAI/roberta-large", "FacebookAI/xlm-roberta-large",
    "microsoft/deberta-v3-large", "answerdotai/ModernBERT-large", "google/electra-large-discriminator",
]  # fmt: skip
CATALOGUE_PARTS = {
    "history": (
        ["google-bert/bert-base-uncased", "albert/albert-base-v2"], ["qlora", "full_ft"], ["--steps", "2"],
        "the allocator's record of one step (memory_history/*.pickle; pytorch.org/memory_viz), and the ratio "
        "after issue 47's ALBERT term and #41's QLoRA output cast",
    ),
    "deberta": (
        ["microsoft/deberta-v3-small", "microsoft/deberta-v3-base"], ["qlora"], [],
        "DeBERTa-v3 QLoRA on a bf16 GPU (failed before #41's autocast-dtype hook)",
    ),
    "fill24": (
        ["google-bert/bert-base-uncased"], ["full_ft", "adamw_8bit", "lora", "qlora"],
        ["--budget_gib", "24", "--memory_cap_gib", "24", "--batch", "1024", "--steps", "4"],
        "each recipe at the largest batch its plan fits in 24 GiB (x 128 tokens): step ms, whether the "
        "host-bound order at 32 x 128 (LoRA and 8-bit AdamW slower than full_ft) holds there",
    ),
    "fits24": (
        README_24GB_ROWS, ["full_ft"], ["--budget_gib", "24", "--memory_cap_gib", "24", "--steps", "4"],
        "README's 24 GB rows under a 24 GiB allocator cap, at the planned batch: fits or OutOfMemoryError",
    ),
}  # fmt: skip


# --- models and data (the `prepare` child runs these) ------------------------------------------------


def build_random_bert(directory: Path, shape: str, vocab_size: int) -> Path:
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    hidden, layers, heads, intermediate = MODEL_SHAPES[shape]
    directory.mkdir(parents=True, exist_ok=True)
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {
        token: i for i, token in enumerate(special + [f"w{i}" for i in range(vocab_size - len(special))])
    }
    BertTokenizerFast(vocab=vocab, do_lower_case=True, model_max_length=512).save_pretrained(directory)
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
    )
    BertForSequenceClassification(config).save_pretrained(directory)
    return directory


def predicted_peak_gib(model_dir: Path, recipe: str, batch: int, seq: int, bf16: bool) -> float:
    """The planner's predicted peak of all tensors, in GiB, for this run (the recipe with its default
    options, padded to `seq`, bf16 on CUDA, fp32 on the CPU). The run reports
    torch.cuda.max_memory_allocated (CPU: the tracker's peak), which never includes the CUDA
    context, so neither does this figure."""
    sys.path.insert(0, str(REPO_ROOT / "src"))
    from recipes_lib.units import GIB
    from recipes_workbench.planner import Setup, load_config, plan_memory
    from recipes_workbench.recipes import RECIPES as RECIPE_SPECS

    shape = RECIPE_SPECS[recipe].default_shape()
    device = "cuda" if bf16 else "cpu"
    setup = Setup(shape=shape, batch_size=batch, seq_length=seq, bf16=bf16, device=device, padded=False)
    return plan_memory(load_config(str(model_dir)), setup).peak_tensors / GIB


def prepare(argv) -> int:
    """Child process: build the random model and write the plan's peak for each recipe."""
    parser = argparse.ArgumentParser()
    parser.add_argument("shape", choices=list(MODEL_SHAPES))
    parser.add_argument("directory", type=Path)
    parser.add_argument("--vocab_size", type=int, required=True)
    parser.add_argument("--recipes", nargs="+", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args(argv)
    build_random_bert(args.directory, args.shape, args.vocab_size)
    plans = {}
    for recipe in args.recipes:
        try:
            plans[recipe] = round(
                predicted_peak_gib(args.directory, recipe, args.batch, args.seq, not args.cpu), 4
            )
        except Exception as error:  # no plan is a missing figure, not a reason to skip the run
            print(f"{recipe}: no plan: {type(error).__name__}: {error}", flush=True)
            plans[recipe] = None
    (args.directory / "plans.json").write_text(json.dumps(plans) + "\n")
    return 0


def write_synthetic_data(directory: Path, rows: int, words: int, vocab_size: int, seed: int = 0) -> dict:
    """Sentences of `words` placeholder words: with [CLS] and [SEP], seq = words + 2 tokens each."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, count in (("train", rows), ("validation", 64)):
        path = directory / f"{split}.csv"
        lines = ["text,label"]
        for _ in range(count):
            lines.append(
                " ".join(f"w{rng.randrange(vocab_size - 5)}" for _ in range(words)) + f",{rng.randrange(2)}"
            )
        path.write_text("\n".join(lines) + "\n")
        paths[split] = path
    return paths


def flops_per_token(shape: str, seq: int) -> float:
    hidden, layers, _, intermediate = MODEL_SHAPES[shape]
    # Per layer: Q, K, V, output projections (4 h^2) and the FFN (2 h i), weights plus biases.
    non_embedding = layers * (4 * hidden * hidden + 2 * hidden * intermediate + 9 * hidden + intermediate)
    return 6 * non_embedding + 12 * layers * hidden * seq


# --- children with deadlines --------------------------------------------------------------------------


class Deadline:
    def __init__(self, budget_s: float):
        self.budget_s = budget_s
        self.started = time.monotonic()
        self.end = self.started + budget_s

    def left(self) -> float:
        """Seconds a new piece of work may take: the time to the deadline less the reserve."""
        return self.end - time.monotonic() - RESERVE_S

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def output_tail(log_path: Path, characters: int = 1200) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-characters:].strip()


def kill_group(process: subprocess.Popen) -> None:
    """The child and everything it started (accelerate launch starts the recipe as a grandchild)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def hang_requested(name: str) -> bool:
    return name in {item.strip() for item in os.environ.get(HANG_ENV, "").split(",") if item.strip()}


def with_hang(command: list[str], name: str) -> list[str]:
    """The command, or, if GPU_CHECK_HANG names this row, a process that sleeps instead of running it."""
    if not hang_requested(name):
        return command
    return [
        sys.executable,
        "-c",
        f"import time; print('{HANG_ENV}: {name} sleeps', flush=True); time.sleep(1e6)",
    ]


def run_child(command: list[str], timeout_s: float, log_path: Path, env: dict | None = None) -> dict:
    """Run `command` in a process group of its own, its output to `log_path`; kill the group at `timeout_s`.

    Returns status ("ok", "failed" or "timed out"), seconds, and for a failure the reason: the end
    of the output. The output goes to a file, not a pipe, so a grandchild that outlives its parent
    cannot keep this process waiting. A process group, not a session: whatever ends this process's
    session (the device's end of a call) ends the children too."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_path.open("w") as log:
        process = start_child(command, log, env)
        try:
            returncode = process.wait(timeout=max(timeout_s, 1.0))
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            stop_child(process)
    seconds = round(time.monotonic() - started, 1)
    if returncode is None:
        return {
            "status": "timed out",
            "seconds": seconds,
            "reason": f"killed after {seconds:.0f} s (its limit: {timeout_s:.0f} s); last output: "
            + (output_tail(log_path, 600) or "(none)"),
        }
    if returncode != 0:
        return {
            "status": "failed",
            "seconds": seconds,
            "reason": f"exit {returncode}: {output_tail(log_path) or '(no output)'}",
        }
    return {"status": "ok", "seconds": seconds}


RUNNING: set[subprocess.Popen] = set()  # the children to kill if this process is told to stop


def start_child(command: list[str], log, env: dict | None = None) -> subprocess.Popen:
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env, process_group=0
    )
    RUNNING.add(process)
    return process


def stop_child(process: subprocess.Popen) -> None:
    """Kill the child's group (a finished child's leftovers too) and forget it."""
    kill_group(process)
    RUNNING.discard(process)


def stop_on_signal(signum, frame) -> None:
    """SIGTERM, SIGINT, SIGHUP: kill every child group before going, so that none keeps the GPU."""
    for process in list(RUNNING):
        kill_group(process)
    print(f"gpu_check: stopped by signal {signum}; the report holds the rows so far", flush=True)
    os._exit(128 + signum)


class Report:
    """The check's JSON and text table, rewritten atomically after every change."""

    def __init__(self, out_dir: Path, stem: str, head: dict):
        self.json_path, self.text_path = out_dir / f"{stem}.json", out_dir / f"{stem}.txt"
        out_dir.mkdir(parents=True, exist_ok=True)
        self.data = {**head, "preflight": None, "recipes": [], "step_profile": [], "catalogue": [],
                     "catalogue_not_reached": [], "status": "running"}  # fmt: skip

    def save(self, deadline: Deadline) -> None:
        self.data["elapsed_s"] = round(deadline.elapsed(), 1)
        for path, text in (
            (self.json_path, json.dumps(self.data, indent=2) + "\n"),
            (self.text_path, table(self.data)),
        ):
            temporary = path.with_name(path.name + ".tmp")
            temporary.write_text(text)
            os.replace(temporary, path)


# --- the parts ------------------------------------------------------------------------------------------


def run_preflight(args, report: Report, deadline: Deadline) -> bool:
    json_path = Path(args.work_dir) / "preflight.json"
    json_path.unlink(missing_ok=True)
    command = [sys.executable, str(BENCHMARKS / "gpu_preflight.py"), "check", "--json", str(json_path)]
    command += ["--matmul_size", str(args.matmul_size)] + (["--cpu"] if args.cpu else [])
    outcome = run_child(
        command, min(args.preflight_timeout_s, deadline.left()), Path(args.work_dir) / "preflight.log"
    )
    print(output_tail(Path(args.work_dir) / "preflight.log", 4000), flush=True)
    if outcome["status"] != "ok":
        report.data["preflight"] = outcome
        return False
    report.data["preflight"] = {**outcome, **json.loads(json_path.read_text())}
    return True


def recipe_command(recipe: str, model_dir: Path, data: dict, out: Path, args) -> list[str]:
    config = "cpu.yaml" if args.cpu else "single_gpu.yaml"
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO_ROOT / "accelerate_configs" / config),
        str(REPO_ROOT / "recipes" / f"{recipe}.py"),
        "--model_name_or_path", str(model_dir),
        "--train_file", str(data["train"]), "--validation_file", str(data["validation"]),
        "--max_seq_length", str(args.seq), "--pad_to_max_length", "true",
        "--per_device_train_batch_size", str(args.batch), "--max_steps", str(args.steps),
        "--bf16", str(not args.cpu).lower(),
        "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none",
        "--logging_steps", str(max(args.steps // 2, 1)), "--disable_tqdm", "true",
        "--output_dir", str(out),
    ]  # fmt: skip


def recipe_row(shape: str, recipe: str, results: dict, plan: float | None) -> dict:
    return {
        "model": shape,
        "recipe": recipe,
        "status": "ok",
        # Start-up (imports, CUDA, the first step) included: the step profile has the steady state.
        "end_to_end_samples_per_s": results["train_samples_per_s"],
        # Training's peak of all tensors (CUDA: torch.cuda.max_memory_allocated; CPU: the tracker's),
        # what the plan predicts; peak_memory_gib is the run's headline figure (CPU: process RSS).
        "train_peak_allocated_gib": ((results.get("memory_phases") or {}).get("train") or {}).get(
            "max_allocated_gib"
        ),
        "peak_memory_gib": results["peak_memory_gib"],
        "peak_memory_source": results.get("peak_memory_source"),
        "peak_reserved_gib": results.get("peak_memory_reserved_gib"),
        "predicted_peak_gib": plan,
        "memory_breakdown_gib": results.get("memory_breakdown_gib"),
        "optimizer_state_bytes": results.get("optimizer_state_bytes"),
        "params_trainable": results["params_trainable"],
    }


def prepare_model(shape: str, args, report: Report, deadline: Deadline) -> tuple[Path, dict] | str:
    """The model directory and the plans, or why there are none."""
    model_dir = Path(args.work_dir) / shape
    command = [sys.executable, str(BENCHMARKS / "gpu_check.py"), "prepare", shape, str(model_dir)]
    command += ["--vocab_size", str(args.vocab_size), "--recipes", *args.recipes]
    command += ["--batch", str(args.batch), "--seq", str(args.seq)] + (["--cpu"] if args.cpu else [])
    outcome = run_child(
        command, min(args.row_timeout_s, deadline.left()), model_dir.parent / f"prepare-{shape}.log"
    )
    if outcome["status"] != "ok":
        return f"the model was not built ({outcome['status']}): {outcome['reason']}"
    return model_dir, json.loads((model_dir / "plans.json").read_text())


def run_recipes(args, data: dict, report: Report, deadline: Deadline) -> None:
    for shape in args.models:
        if deadline.left() < MIN_ROW_S:
            report.data["recipes"] += [
                {"model": shape, "recipe": recipe, "status": "not reached", "note": "time limit"}
                for recipe in args.recipes
            ]
            continue
        prepared = prepare_model(shape, args, report, deadline)
        for recipe in args.recipes:
            name = f"{shape}/{recipe}"
            if isinstance(prepared, str):
                row = {"model": shape, "recipe": recipe, "status": "failed", "note": prepared}
            elif deadline.left() < MIN_ROW_S:
                row = {"model": shape, "recipe": recipe, "status": "not reached", "note": "time limit"}
            else:
                model_dir, plans = prepared
                out = Path(args.work_dir) / "runs" / f"{shape}-{recipe}"
                command = with_hang(recipe_command(recipe, model_dir, data, out, args), name)
                outcome = run_child(
                    command, min(args.row_timeout_s, deadline.left()), out.with_suffix(".log")
                )
                if outcome["status"] == "ok":
                    row = recipe_row(
                        shape, recipe, json.loads((out / "results.json").read_text()), plans[recipe]
                    )
                else:
                    row = {
                        "model": shape,
                        "recipe": recipe,
                        "status": outcome["status"],
                        "note": outcome["reason"],
                    }
                row["seconds"] = outcome["seconds"]
            report.data["recipes"].append(row)
            report.save(deadline)
            print(
                f"{name}: {row['status']}" + (f": {row['note'][:300]}" if row.get("note") else ""), flush=True
            )


def run_step_profile(args, data: dict, report: Report, deadline: Deadline) -> None:
    shape = args.models[0]
    recipes = [recipe for recipe in args.recipes if recipe in RECIPES]
    if deadline.left() < MIN_ROW_S:
        report.data["step_profile"] = [
            {"recipe": r, "status": "not reached", "note": "time limit"} for r in recipes
        ]
        return
    profile_dir = Path(args.work_dir) / "profile"
    for old in profile_dir.glob("step_profile-*"):
        old.unlink()
    command = [
        sys.executable, str(BENCHMARKS / "step_profile.py"),
        "--model_name_or_path", str(Path(args.work_dir) / shape), "--recipes", *recipes,
        "--train_file", str(data["train"]), "--validation_file", str(data["validation"]),
        "--max_seq_length", str(args.seq), "--per_device_train_batch_size", str(args.batch),
        "--warmup_steps", str(args.warmup_steps), "--steps", str(args.timed_steps),
        "--profiled_steps", str(args.profiled_steps), "--report_dir", str(profile_dir),
    ]  # fmt: skip
    print(f"step profile on {shape}: {' '.join(recipes)} ...", flush=True)
    outcome = run_child(
        with_hang(command, "step_profile"),
        min(args.profile_timeout_s, deadline.left()),
        Path(args.work_dir) / "step_profile.log",
    )
    # step_profile.py rewrites its JSON after every recipe: what it finished is kept even if it timed out.
    written = sorted(profile_dir.glob("step_profile-*.json"))
    rows = json.loads(written[-1].read_text())["rows"] if written else []
    preflight = report.data["preflight"] or {}
    measured = (preflight.get("matmul") or {}).get("flops")
    datasheet = preflight.get("datasheet_bf16_flops")
    for row in rows:
        if row.get("status", "ok") != "ok":
            continue
        step_s = row["steady_step_ms"] / 1000
        tokens_per_s = row["mean_tokens_per_batch"] / step_s
        model_flops_per_s = tokens_per_s * flops_per_token(shape, args.seq)
        row.update(
            model=shape,
            status="ok",
            tokens_per_s=round(tokens_per_s),
            samples_per_s=round(args.batch / step_s, 1),
            mfu_measured_matmul=round(model_flops_per_s / measured, 4) if measured else None,
            mfu_datasheet=round(model_flops_per_s / datasheet, 4) if datasheet else None,
        )
    done = {row["recipe"] for row in rows}
    rows += [
        {"recipe": recipe, "model": shape, "status": outcome["status"], "note": outcome.get("reason", "")}
        for recipe in recipes
        if recipe not in done
    ]
    report.data["step_profile"] = rows
    report.save(deadline)
    for row in rows:
        note = f": {row['note'][:300]}" if row.get("note") else ""
        print(f"step profile {shape}/{row['recipe']}: {row['status']}{note}", flush=True)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run_padding_free(args, report: Report, deadline: Deadline) -> None:
    """benchmarks/padding_free.py on bert-base and ModernBERT-base (random weights from the catalogue's
    configs, the placeholder tokenizer of the check's BERT) over SST-2-like lengths: real tokens/s of
    packed against padded training steps, and the largest logit difference (bf16 autocast)."""
    shape = args.models[0]
    built = prepare_model(shape, args, report, deadline)
    report.data["padding_free"] = []
    models = ["google-bert/bert-base-uncased", "answerdotai/ModernBERT-base"]
    for name in models:
        if deadline.left() < MIN_ROW_S:
            report.data["padding_free"].append({"model": name, "status": "not reached", "note": "time limit"})
            continue
        if isinstance(built, str):
            report.data["padding_free"].append({"model": name, "status": "failed", "note": built})
            continue
        out = Path(args.work_dir) / "padding_free" / name.replace("/", "--")
        shutil.rmtree(out, ignore_errors=True)
        command = [
            sys.executable, str(BENCHMARKS / "padding_free.py"), "--model_name_or_path", str(built[0]),
            "--random_config", name, "--train_file", "sst2-lengths", "--steps", "4" if args.tiny else "20",
            "--report_dir", str(out), "--device", "cpu" if args.cpu else "cuda",
        ] + (["--tiny"] if args.tiny else [])  # fmt: skip
        outcome = run_child(
            with_hang(command, f"padding_free/{name}"), min(args.row_timeout_s, deadline.left()), out / "log"
        )
        written = sorted(out.glob("padding_free-*.json"))
        row = json.loads(written[-1].read_text()) if written else {}
        report.data["padding_free"].append(
            {**row, "model": name, "status": outcome["status"], "note": outcome.get("reason", "")}
        )
        report.save(deadline)


def run_catalogue(
    args, report: Report, deadline: Deadline, key: str = "catalogue", models=None, recipes=None, extra=()
) -> None:
    """gpu_catalogue.py in a child that writes its JSON after every row and names the row it is on;
    a row past --catalogue_row_timeout_s (or the deadline) gets the child killed, the row recorded as
    timed out, and a new child goes on with the rows not done. `key`: the report's list the rows go
    to (the catalogue part's, or one of CATALOGUE_PARTS', which pass their models, recipes and options)."""
    models = models or args.catalogue_models
    recipes = recipes or args.catalogue_recipes
    work = Path(args.work_dir) / key
    progress = work / "progress.json"
    done: list[dict] = []  # rows of the children before this one
    while True:
        if deadline.left() < MIN_ROW_S:
            report.data[f"{key}_not_reached"] = (
                ["(time limit before the catalogue started)"] if not done else []
            )
            break
        progress.unlink(missing_ok=True)
        shutil.rmtree(work / "models", ignore_errors=True)  # a killed child's saved model
        command = [sys.executable, str(BENCHMARKS / "gpu_catalogue.py"), "--output", str(progress)]
        # The child stops starting rows a little before this process's deadline, to write its report.
        command += ["--work_dir", str(work), "--deadline_unix", f"{time.time() + deadline.left() - 2:.1f}"]
        command += (["--cpu"] if args.cpu else []) + (["--tiny"] if args.tiny else [])
        command += ["--recipes", *recipes, *extra]
        if models:
            command += ["--models", *models]
        if done:
            command += ["--skip_rows", *[f"{row['model']}/{row['recipe']}" for row in done]]
        log = work / f"child-{len(done)}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as output:
            process = start_child(command, output)
        hung, seen, stopped = None, None, False
        while process.poll() is None:
            time.sleep(0.5)
            state = read_json(progress) or {"rows": [], "current": None}
            if state["rows"] != seen:
                seen = state["rows"]
                report.data[key] = done + seen
                report.save(deadline)
            current = state.get("current")
            if current and time.time() - current["started_unix"] > args.catalogue_row_timeout_s:
                hung = {**current, "why": f"over its {args.catalogue_row_timeout_s:.0f} s limit"}
                break
            if deadline.left() <= 0:
                if current:
                    hung = {**current, "why": "at the deadline"}
                else:  # between rows, told the same deadline: it is writing its last report
                    try:
                        process.wait(timeout=RESERVE_S / 2)
                    except subprocess.TimeoutExpired:
                        stopped = True
                break
        if hung is None and not stopped:
            process.wait()
        stop_child(process)
        state = read_json(progress) or {"rows": [], "not_reached": [], "models": []}
        done += state["rows"]
        finished = {row["model"] for row in done}
        report.data[f"{key}_not_reached"] = state.get("not_reached") or (
            [name for name in state.get("models", []) if name not in finished] if stopped else []
        )
        if hung is None:
            # 1 with a failed row: the row says why; any other exit is the process's own failure.
            row_failed = any(row["status"] == "failed" for row in state["rows"])
            if process.returncode != 0 and not stopped and not (process.returncode == 1 and row_failed):
                done.append({"model": f"({key})", "recipe": "-", "status": "failed",
                             "note": f"exit {process.returncode}: {output_tail(log, 600)}"})  # fmt: skip
            report.data[key] = done
            report.save(deadline)
            break
        row = {"model": hung["model"], "recipe": hung["recipe"], "status": "timed out",
               "note": f"killed: {hung['why']}; last output: {output_tail(log, 400)}"}  # fmt: skip
        done.append(row)
        report.data[key] = done
        report.save(deadline)
        print(f"{key} {row['model']}/{row['recipe']}: timed out ({hung['why']}); going on", flush=True)
        if hung["why"] == "at the deadline":
            report.data[f"{key}_not_reached"] = [
                name for name in state.get("models", []) if name not in {r["model"] for r in done}
            ]
            report.save(deadline)
            break


# --- the table -------------------------------------------------------------------------------------------


def fmt(value, spec: str, width: int) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-".rjust(width)


def table(data: dict) -> str:
    preflight = data.get("preflight") or {}
    matmul = (preflight.get("matmul") or {}).get("flops")
    lines = [
        f"gpu_check: {preflight.get('device_name', '?')}; python {preflight.get('python', '?')}; "
        + ", ".join(
            f"{k} {v}"
            for k, v in (preflight.get("versions") or {}).items()
            if k in ("torch", "transformers", "accelerate", "peft", "datasets", "bitsandbytes")
        ),  # fmt: skip
        f"bf16 matmul measured: {matmul / 1e12:.2f} TFLOP/s" if matmul else "bf16 matmul: not measured",
        f"status: {data.get('status')}; {data.get('elapsed_s', 0):.0f} s of {data.get('budget_s')} s",
        "",
        "recipes (accelerate launch; training's tensor peak against the plan; samples/s include start-up)",
        f"{'model':<11} {'recipe':<11} {'e2e sam/s':>9} {'alloc GiB':>9} {'plan GiB':>8}  status",
    ]
    for row in data.get("recipes", []):
        lines.append(
            f"{row['model']:<11} {row['recipe']:<11} {fmt(row.get('end_to_end_samples_per_s'), '>9.1f', 9)} "
            f"{fmt(row.get('train_peak_allocated_gib'), '>9.3f', 9)} {fmt(row.get('predicted_peak_gib'), '>8.3f', 8)}  "
            f"{row['status']}" + (f": {row['note'][:120]}" if row.get("note") else "")
        )
    lines += [
        "",
        "step profile (steady state: timed steps back to back after warm-up, memory tracking off)",
        f"{'recipe':<11} {'step ms':>8} {'fwd ms':>7} {'bwd ms':>7} {'opt ms':>7} {'tokens/s':>9} "
        f"{'MFU meas':>8} {'MFU sheet':>9}  status",
    ]
    for row in data.get("step_profile", []):
        ms = row.get("median_ms") or {}
        lines.append(
            f"{row['recipe']:<11} {fmt(row.get('steady_step_ms'), '>8.2f', 8)} {fmt(ms.get('forward'), '>7.2f', 7)} "
            f"{fmt(ms.get('backward'), '>7.2f', 7)} {fmt(ms.get('optimizer_step'), '>7.2f', 7)} "
            f"{fmt(row.get('tokens_per_s'), '>9d', 9)} {fmt(row.get('mfu_measured_matmul'), '>8.1%', 8)} "
            f"{fmt(row.get('mfu_datasheet'), '>9.1%', 9)}  {row.get('status', 'ok')}"
            + (f": {row['note'][:120]}" if row.get("note") else "")
        )
    lines += [
        "",
        "catalogue (planned / measured peak)",
        f"{'model':<40} {'recipe':<11} {'batch':>5} {'ratio':>6}  status",
    ]
    for key in ("catalogue", *CATALOGUE_PARTS):
        if key != "catalogue":
            if not data.get(key):
                continue
            lines += ["", f"{key}: {CATALOGUE_PARTS[key][3]}",
                      f"{'model':<40} {'recipe':<11} {'batch':>5} {'ratio':>6} {'peak GiB':>8} {'step ms':>8}  status"]  # fmt: skip
        for row in data.get(key, []):
            mfu = ""
            if (
                key == "fill24" and row.get("step_ms") and matmul and not data.get("args", {}).get("tiny")
            ):  # bert-base x 128
                rate = row["batch"] * 128 * flops_per_token("bert-base", 128) / (row["step_ms"] / 1000)
                mfu = f" MFU {rate / matmul:.1%}"
            lines.append(
                f"{row['model']:<40} {row['recipe']:<11} {fmt(row.get('batch'), '>5d', 5)} "
                f"{fmt(row.get('ratio'), '>6.3f', 6)}"
                + (
                    f" {fmt(row.get('measured_peak_gib'), '>8.2f', 8)} {fmt(row.get('step_ms'), '>8.1f', 8)}"
                    if key != "catalogue"
                    else ""
                )  # fmt: skip
                + f"{mfu}  {row['status']}"
                + (f": {row['note'][:120]}" if row.get("note") else "")
            )
        if data.get(f"{key}_not_reached"):
            lines.append(f"not reached: {', '.join(data[f'{key}_not_reached'])}")
    if data.get("padding_free"):
        lines += ["", "padding_free (benchmarks/padding_free.py: packed against padded, training steps)"]
        for row in data["padding_free"]:
            tokens = row.get("real_tokens_per_s") or {}
            lines.append(
                f"{row.get('model', '?'):<40} padded {fmt(tokens.get('padded'), '>10.0f', 10)} "
                f"packed {fmt(tokens.get('packed'), '>10.0f', 10)} real tokens/s "
                f"({fmt(row.get('packed_over_padded'), '.2f', 4)}x), largest logit difference "
                f"{fmt(row.get('max_logit_difference'), '.2e', 8)}  {row['status']}"
                + (f": {row['note'][:120]}" if row.get("note") else "")
            )
    return "\n".join(lines) + "\n"


# --- the run ---------------------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget_s", type=float, default=480, help="the whole check ends by then")
    parser.add_argument(
        "--cpu", action="store_true", help="run on the CPU (checks the code path, not the GPU)"
    )
    parser.add_argument(
        "--tiny", action="store_true", help="a 2-layer BERT, tiny catalogue configs, few steps"
    )
    parser.add_argument("--parts", nargs="+", default=["recipes", "profile", "catalogue"],
                        choices=["recipes", "profile", "catalogue", "padding_free", *CATALOGUE_PARTS])  # fmt: skip
    parser.add_argument(
        "--models", nargs="+", default=None, help="default: bert-base (bert-tiny with --tiny)"
    )
    parser.add_argument("--recipes", nargs="+", default=RECIPES)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps of each recipe run")
    parser.add_argument("--warmup_steps", type=int, default=5, help="step profile: steps not timed")
    parser.add_argument("--timed_steps", type=int, default=50, help="step profile: steps timed")
    parser.add_argument(
        "--profiled_steps", type=int, default=3, help="step profile: steps under torch.profiler"
    )
    parser.add_argument("--matmul_size", type=int, default=8192, help="the bf16 matmul's N (N x N x N)")
    parser.add_argument("--preflight_timeout_s", type=float, default=180)
    parser.add_argument("--row_timeout_s", type=float, default=180, help="cap of one recipe run")
    parser.add_argument("--profile_timeout_s", type=float, default=240, help="cap of the step profile")
    parser.add_argument("--catalogue_row_timeout_s", type=float, default=120, help="cap of one catalogue row")
    parser.add_argument("--catalogue_models", nargs="+", default=None, help="default: the whole catalogue")
    parser.add_argument("--catalogue_recipes", nargs="+", default=RECIPES)
    parser.add_argument("--work_dir", default="/tmp/gpu_check")
    parser.add_argument(
        "--output", default=None, help="the report's folder (default: $OUT, else benchmarks/results)"
    )
    args = parser.parse_args(argv)
    if args.tiny:
        args.batch, args.seq, args.steps = min(args.batch, 8), min(args.seq, 32), min(args.steps, 4)
        args.warmup_steps, args.timed_steps, args.profiled_steps = 1, 3, 1
        args.matmul_size = min(args.matmul_size, 512)
    args.models = args.models or (["bert-tiny"] if args.tiny else ["bert-base"])
    unknown = [name for name in args.models if name not in MODEL_SHAPES]
    if unknown:
        parser.error(
            f"--models {' '.join(unknown)}: not a shape this check builds; it builds {', '.join(MODEL_SHAPES)}"
        )
    args.vocab_size = 1000 if args.tiny else VOCAB_SIZE
    args.output = args.output or os.environ.get("OUT") or str(BENCHMARKS / "results")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["prepare"]:
        return prepare(argv[1:])
    args = parse_args(argv)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop_on_signal)
    deadline = Deadline(args.budget_s)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    stem = "gpu_check" + ("-cpu" if args.cpu else "") + ("-tiny" if args.tiny else "")
    head = {"command": "gpu_check.py " + " ".join(argv), "budget_s": args.budget_s, "args": vars(args)}
    report = Report(Path(args.output), stem, head)
    report.save(deadline)
    print(f"gpu_check: budget {args.budget_s:.0f} s; report {report.json_path}", flush=True)
    if not run_preflight(args, report, deadline):
        report.data["status"] = "stopped: preflight"
        report.save(deadline)
        return 3
    report.save(deadline)
    profile_steps = args.warmup_steps + args.timed_steps + args.profiled_steps
    data = write_synthetic_data(
        work / "data",
        rows=args.batch * max(args.steps, profile_steps),
        words=args.seq - 2,
        vocab_size=args.vocab_size,
    )
    # Issue 47's parts first, in the order given: each is a few rows, and the deadline cuts the last.
    for part in [part for part in args.parts if part in CATALOGUE_PARTS or part == "padding_free"]:
        if part == "padding_free":
            run_padding_free(args, report, deadline)
            continue
        models, recipes, options, _ = CATALOGUE_PARTS[part]
        if part == "history":
            options = [*options, "--memory_history_dir", str(Path(args.output) / "memory_history")]
        run_catalogue(args, report, deadline, part, models, recipes, options)
    if "recipes" in args.parts:
        run_recipes(args, data, report, deadline)
    elif "profile" in args.parts:  # the profile's model, which the recipes part would have built
        prepare_model(args.models[0], args, report, deadline)
    if "profile" in args.parts:
        run_step_profile(args, data, report, deadline)
    if "catalogue" in args.parts:
        run_catalogue(args, report, deadline)
    rows = [row for key in ("recipes", "step_profile", "catalogue", "padding_free", *CATALOGUE_PARTS)
            for row in report.data.get(key, [])]  # fmt: skip
    all_ok = all(row["status"] in ("ok", "skipped", "not planned") for row in rows)
    report.data["status"] = "done" if all_ok else "done, with rows that did not run: see their notes"
    report.save(deadline)
    print("\n" + table(report.data), end="")
    print(f"written: {report.json_path} and {report.text_path.name}", flush=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
