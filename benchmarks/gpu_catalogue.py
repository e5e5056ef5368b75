"""The catalogue check: every catalogue model the device can hold, each recipe trained a few steps in
this process, its measured peak against the memory planner's.

    bash benchmarks/gpu_check.sh --parts catalogue [--catalogue_models NAME ...]   # on a lent GPU
    python benchmarks/gpu_catalogue.py --cpu --tiny                                 # the same path on a CPU

For each model of the planner's catalogue (recipes_workbench/planner/catalogue.py: config.json values, no
weights), smallest first: its base model (no head, as a Hub checkpoint is published) is built with
random weights from the catalogue's config on the device and saved in --work_dir, so that each
recipe loads it with the recipes' own code (modeling.load_model; qlora with its quantization config
and device map, prepare_4bit_model and add_lora; lora with add_lora; adamw_8bit with
create_adamw_8bit; full_ft and the adapters with the Trainer's own optimizer class and weight-decay
groups). No download and no tokenizer: the batch is synthetic input_ids of batch x seq tokens with an
all-ones attention mask (and token_type_ids where the family's tokenizer gives them), as the planner
plans it with padded=False. A step is the Trainer's: forward under bf16 autocast on a GPU (fp32 on a
CPU, as the planner's --bf16 and --device cpu assume), backward, gradient clipping, the optimizer
step, gradients set to None.

The batch is --batch (32) where the plan fits the device (its total memory, or --budget_gib), else
the largest batch that fits by the plan; a recipe that does not fit even at batch 1 is skipped, and
its row says so. The first step creates the optimizer state; the peak is measured over the steps
after it, as the CPU planner checks measure it (tests/workbench/test_planner_families.py): on a GPU
torch.cuda.max_memory_allocated (the first step's peak is kept beside it), on a CPU the tensor
tracker's peak (memory.tensors.TensorMemoryTracker). Both are compared with the plan's peak of all
tensors (MemoryPlan.peak_tensors, without the CUDA context). ratio = planned / measured.

--max_minutes (8), or --deadline_unix (gpu_check.py passes its own deadline), bounds the run: a model
is not started when the time the models so far took, scaled by its parameters, would pass it; what
was not reached is listed. Every recipe of a model is planned before the model is built, and a model
none of whose recipes fits is never built. The JSON (--output) is rewritten, atomically, before each
row is measured (naming the row and when it started: gpu_check.py's watchdog cuts off a row that runs
past its limit and starts a new process with --skip_rows for the rows done) and after each row.
--tiny scales every config down (2 layers, hidden 64, 2 heads, a 1024-token vocabulary; the FFN
and embedding widths in proportion) and trains batch 8 x seq 32, so the CPU path takes about a minute.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "src"))

# The ways a row can train: the recipe and the options it runs with (qlora+int8: --base_bits 8).
RECIPES = {
    "full_ft": ("full_ft", []),
    "adamw_8bit": ("adamw_8bit", []),
    "lora": ("lora", []),
    "qlora": ("qlora", []),
    "qlora+int8": ("qlora", ["--base_bits", "8"]),
}
DEFAULT_RECIPES = ["full_ft", "adamw_8bit", "lora", "qlora"]
TOLERANCE = 0.10  # the planner's documented tolerance against a measured CPU peak
TINY = {"hidden": 64, "layers": 2, "heads": 2, "vocab": 1024}
# Each size under the names the families give it (DistilBERT: dim, n_layers, n_heads, hidden_dim).
SIZE_NAMES = {
    "hidden": ("hidden_size", "dim"),
    "layers": ("num_hidden_layers", "n_layers"),
    "heads": ("num_attention_heads", "n_heads"),
    "ffn": ("intermediate_size", "hidden_dim"),
}


# --- the models ------------------------------------------------------------------------------------


def tiny_values(values: dict) -> dict:
    """A catalogue entry's values scaled down to TINY: the FFN, embedding and pooler widths in
    proportion to the hidden size, DeBERTa-v2's head size to hidden / heads."""
    values = dict(values)
    names = {size: next(n for n in SIZE_NAMES[size] if n in values) for size in SIZE_NAMES}
    hidden = values[names["hidden"]]
    scale = TINY["hidden"] / hidden
    values[names["ffn"]] = max(16, round(values[names["ffn"]] * scale))
    for size in ("hidden", "layers", "heads"):
        values[names[size]] = TINY[size]
    for key in ("embedding_size", "pooler_hidden_size"):
        if key in values:
            values[key] = TINY["hidden"] if values[key] == hidden else max(16, round(values[key] * scale))
    if "attention_head_size" in values:
        values["attention_head_size"] = TINY["hidden"] // TINY["heads"]
    values["vocab_size"] = min(values["vocab_size"], TINY["vocab"])
    return values


def catalogue_config(name: str, tiny: bool, num_labels: int = 2):
    """The transformers config of catalogue model `name` (scaled down with `tiny`); token ids past a
    scaled-down vocabulary are moved to the first ids."""
    from transformers import AutoConfig

    from recipes_workbench.planner.catalogue import catalogue_entry

    entry = catalogue_entry(name)
    if not tiny:
        return entry.config(num_labels)
    values = tiny_values(entry.values)
    config = AutoConfig.for_model(values.pop("model_type"), **values, num_labels=num_labels)
    config._name_or_path = entry.hub_id
    token_ids = sorted(key for key, value in config.to_dict().items() if key.endswith("_token_id"))
    for index, key in enumerate(token_ids):
        value = getattr(config, key)
        if isinstance(value, int) and value >= config.vocab_size:
            setattr(config, key, index)
    return config


def models_by_size(names: list[str], tiny: bool) -> list[tuple[str, object, int]]:
    """(Hub id, config, its parameters) of each model (each named once), in the order of the
    published models' sizes, fewest parameters first (with --tiny too, so both runs go alike)."""
    from recipes_lib.config.recipe_spec import TrainingShape
    from recipes_workbench.planner import count_parameters_on_meta
    from recipes_workbench.planner.catalogue import catalogue_entry

    def parameters(config) -> int:
        return count_parameters_on_meta(config, TrainingShape()).total

    models = []
    for hub_id in dict.fromkeys(catalogue_entry(name).hub_id for name in names):
        published = catalogue_config(hub_id, tiny=False)
        config = catalogue_config(hub_id, tiny) if tiny else published
        models.append((parameters(published), hub_id, config, parameters(config)))
    return [(hub_id, config, count) for _, hub_id, config, count in sorted(models, key=lambda m: m[0])]


def build_base_model(config, directory: Path, device) -> Path:
    """The family's base model with random weights, made on `device` and saved as a checkpoint (fp32)."""
    import torch
    from transformers import AutoModel

    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModel.from_config(copy.deepcopy(config))
    model.save_pretrained(directory)
    del model
    free_memory(device)
    return directory


def release_optimizer_overrides() -> None:
    """bitsandbytes' GlobalOptimManager keeps the modules create_adamw_8bit registered (the
    embeddings): forget them, so the row's model is freed before the next row is measured."""
    if "bitsandbytes" not in sys.modules:  # nothing registered: no 8-bit optimizer was made
        return
    sys.modules["bitsandbytes"].optim.GlobalOptimManager.get_instance().initialize()


def free_memory(device) -> None:
    """Collect the last row's model and optimizer before the next row's peak is measured (on a GPU;
    on a CPU the tracker counts only what the steps allocate, and a collection takes half a second)."""
    import torch

    if torch.device(device).type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


# --- one recipe ------------------------------------------------------------------------------------


def recipe_arguments(way: str, model_dir: Path, work: Path, on_gpu: bool, seq: int):
    """(parsed arguments, recipe options, TrainingShape) as the recipe would parse them for this run."""
    from recipes_lib.config.parsing import parse_arguments
    from recipes_workbench.recipes import RECIPES as RECIPE_SPECS

    recipe, extra = RECIPES[way]
    spec = RECIPE_SPECS[recipe]
    argv = ["--model_name_or_path", str(model_dir), "--output_dir", str(work / "runs" / way)]
    argv += ["--max_seq_length", str(seq), "--bf16", str(on_gpu).lower(), "--report_to", "none"]
    if not on_gpu:
        argv += ["--use_cpu", "true"]
    args = parse_arguments(spec, argv + extra)
    options = args.options(spec.options) if spec.options is not None else None
    return args, options, spec.shape(options)


def planned_batch(config, setup, budget_bytes: int) -> tuple[int, str]:
    """The asked batch if its plan fits the budget, else the largest that does (0: none); and why."""
    from dataclasses import replace

    from recipes_lib.units import GIB
    from recipes_workbench.planner import plan_memory
    from recipes_workbench.planner.plan import largest_batch

    if plan_memory(config, setup).total <= budget_bytes:
        return setup.batch_size, ""
    batch = largest_batch(config, setup, budget_bytes, limit=setup.batch_size)
    budget = f"{budget_bytes / GIB:.3g} GiB"
    if batch == 0:
        needs = plan_memory(config, replace(setup, batch_size=1)).total / GIB
        return 0, f"the plan needs {needs:.3g} GiB at batch 1, over the {budget}"
    return batch, f"batch {setup.batch_size} does not fit the {budget} by the plan"


def load_for_recipe(way: str, args, options, config):
    """The model and optimizer the recipe trains, built by the recipes' own code."""
    import torch
    from transformers import Trainer

    from recipes_lib.config.precision import decide_precision
    from recipes_lib.modeling.adamw_8bit import create_adamw_8bit, decay_parameter_groups
    from recipes_lib.modeling.adapters import add_lora, base_quantization_config, prepare_4bit_model
    from recipes_lib.modeling.loading import check_model_support, load_model
    from recipes_lib.run.preparation import trainer_arguments

    recipe = RECIPES[way][0]
    training, device = args.training, args.training.device
    config = copy.deepcopy(config)  # from_pretrained writes the quantization config into it
    _, attention = check_model_support(args.model, config, args.data.max_seq_length)
    model_args = dataclasses.replace(args.model, attn_implementation=attention)
    training = trainer_arguments(training, **decide_precision(training, config.model_type)[1])  # as prepare
    torch.manual_seed(0)
    if recipe == "qlora":
        quantization = base_quantization_config(config, training.precision, options.base_bits)
        model = load_model(model_args, config, quantization_config=quantization, device_map={"": device})
        model = add_lora(prepare_4bit_model(model), options)
    else:
        model = load_model(model_args, config)
        if recipe == "lora":
            model = add_lora(model, options)
        model = model.to(device)  # where the Trainer puts it
    if recipe == "adamw_8bit":
        optimizer = create_adamw_8bit(
            model, training, options.embedding_optimizer_bits, paged=options.paged_optimizer
        )
    else:  # what Trainer.create_optimizer builds
        optimizer_class, optimizer_kwargs = Trainer.get_optimizer_cls_and_kwargs(training, model)
        optimizer = optimizer_class(decay_parameter_groups(model, training.weight_decay), **optimizer_kwargs)
    return model, optimizer


def synthetic_batch(config, rows: int, length: int, device, token_type_ids: bool) -> dict:
    import torch

    generator = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(5, config.vocab_size, (rows, length), generator=generator),
        "attention_mask": torch.ones(rows, length, dtype=torch.long),
        "labels": torch.randint(0, config.num_labels, (rows,), generator=generator),
    }
    if token_type_ids:
        batch["token_type_ids"] = torch.zeros(rows, length, dtype=torch.long)
    return {key: value.to(device) for key, value in batch.items()}


def measure_steps(
    model, optimizer, batch: dict, steps: int, bf16: bool, max_grad_norm: float, history: Path | None = None
) -> dict:
    """Peak bytes of the training steps after the first (which creates the optimizer state), and their
    mean time; on CUDA with `history`, the allocator's record of those steps dumped there."""
    import torch

    from recipes_lib.memory.tensors import TensorMemoryTracker

    device = batch["input_ids"].device
    trained = [p for p in model.parameters() if p.requires_grad]
    model.train()

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if device.type != "cuda":
        step()
        tracker = TensorMemoryTracker(model, optimizer, batch)
        with tracker:
            for _ in range(steps - 1):
                step()
        return {"peak": tracker.peak_total, "first_step_peak": None, "reserved": None}
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize(device)
    first = torch.cuda.max_memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    if history:
        torch.cuda.memory._record_memory_history(max_entries=200_000)
    started = time.perf_counter()
    for _ in range(steps - 1):
        step()
    torch.cuda.synchronize(device)
    step_ms = 1000 * (time.perf_counter() - started) / max(steps - 1, 1)
    if history:
        torch.cuda.memory._dump_snapshot(str(history))
        torch.cuda.memory._record_memory_history(enabled=None)
    return {
        "peak": torch.cuda.max_memory_allocated(device),
        "first_step_peak": first,
        "reserved": torch.cuda.max_memory_reserved(device),
        "step_ms": round(step_ms, 2),
    }


def plan_row(way: str, model: tuple, model_dir: Path, budget_bytes: int, args):
    """(row so far, the Setup to measure with, or None when the row ends here: skipped or not planned)."""
    from dataclasses import replace

    from recipes_lib.units import GIB
    from recipes_workbench.planner import Setup, plan_memory

    name, config, _ = model
    on_gpu = not args.cpu
    parsed, options, shape = recipe_arguments(way, model_dir, Path(args.work_dir), on_gpu, args.seq)
    setup = Setup(
        shape=shape, label=way, batch_size=args.batch, seq_length=args.seq, bf16=on_gpu,
        device=parsed.training.device.type, padded=False,
    )  # fmt: skip
    row = {"model": name, "recipe": way, "seq": args.seq}
    try:
        batch, note = planned_batch(config, setup, budget_bytes)
    except Exception as error:  # the planner refuses it (a family without this recipe): say why
        return {**row, "status": "not planned", "note": f"{type(error).__name__}: {error}"}, None
    row.update(batch=batch, note=note)
    if batch == 0:
        return {**row, "status": "skipped"}, None
    setup = replace(setup, batch_size=batch)
    row["planned_peak_gib"] = round(plan_memory(config, setup).peak_tensors / GIB, 6)
    return row, setup


def hang_if_asked(name: str, way: str) -> None:
    """GPU_CHECK_HANG naming catalogue/<model>/<recipe>: this row sleeps, as a hung row would (gpu_check.py
    shows it being cut off)."""
    row = f"catalogue/{name}/{way}"
    if row in {item.strip() for item in os.environ.get("GPU_CHECK_HANG", "").split(",")}:
        print(f"GPU_CHECK_HANG: {row} sleeps", flush=True)
        time.sleep(1e6)


def measure_row(way: str, model: tuple, model_dir: Path, row: dict, setup, args) -> dict:
    """The measured peak of the recipe at the planned batch, next to the plan's."""
    import torch

    from recipes_lib.units import GIB
    from recipes_workbench.planner import Encoder, plan_memory

    name, config, _ = model
    on_gpu = not args.cpu
    parsed, options, _ = recipe_arguments(way, model_dir, Path(args.work_dir), on_gpu, args.seq)
    device = parsed.training.device
    plan = plan_memory(config, setup)
    free_memory(device)
    leftover = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    started = time.perf_counter()
    trained = optimizer = inputs = None
    try:
        hang_if_asked(name, way)
        trained, optimizer = load_for_recipe(way, parsed, options, config)
        inputs = synthetic_batch(
            config, setup.batch_size, args.seq, device, Encoder.from_config(config).family.token_type_ids
        )
        history = None
        if args.memory_history_dir:
            history = Path(args.memory_history_dir) / f"{name.replace('/', '--')}-{way}.pickle"
        measured = measure_steps(
            trained, optimizer, inputs, args.steps, on_gpu, parsed.training.max_grad_norm, history
        )
    except Exception as error:  # a failed measurement, not a reason to lose the other rows
        detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return {**row, "status": "failed", "note": f"{type(error).__name__}: {detail}"[:300]}
    finally:
        trained = optimizer = inputs = None
        release_optimizer_overrides()
        free_memory(device)
    peak = measured["peak"] - leftover
    return {
        **row,
        "status": "ok",
        "measured_peak_gib": round(peak / GIB, 6),
        "ratio": round(plan.peak_tensors / peak, 4),
        "first_step_peak_gib": _gib(measured["first_step_peak"], leftover),
        "max_reserved_gib": _gib(measured["reserved"], 0),
        "step_ms": measured.get("step_ms"),
        "params_trainable": plan.params_trainable,
        "seconds": round(time.perf_counter() - started, 1),
    }


def _gib(value: int | None, less: int) -> float | None:
    from recipes_lib.units import GIB

    return None if value is None else round((value - less) / GIB, 6)


# --- the run ---------------------------------------------------------------------------------------


def check_model(model: tuple, budget_bytes: int, args, deadline: float, progress) -> list[dict]:
    """Every asked recipe on one model (less --skip_rows): each planned first, and the base model built
    only if one of them fits by the plan. `progress.started(way)` before a row is measured,
    `progress.finished(row)` after each row."""
    name, config, params = model
    device = "cpu" if args.cpu else "cuda"
    ways = [way for way in args.recipes if f"{name}/{way}" not in args.skip_rows]
    if not ways:
        return []
    model_dir = Path(args.work_dir) / "models" / name.replace("/", "--")
    planned = {way: plan_row(way, model, model_dir, budget_bytes, args) for way in ways}
    fits = [way for way in ways if planned[way][1] is not None]
    free_disk = shutil.disk_usage(Path(args.work_dir)).free
    if fits and free_disk < 1.2 * 4 * params + 2**30:
        note = (
            f"{4 * params / 2**30:.0f} GiB of fp32 weights to save, {free_disk / 2**30:.0f} GiB of disk free"
        )
        planned.update({way: ({**planned[way][0], "status": "skipped", "note": note}, None) for way in fits})
    rows = []
    try:
        for way in ways:
            row, setup = planned[way]
            if setup is not None and time.monotonic() > deadline:
                row = {"model": name, "recipe": way, "status": "not reached", "note": "time limit"}
            elif setup is not None:
                progress.started(name, way)
                if not model_dir.is_dir():
                    build_base_model(config, model_dir, device)
                row = measure_row(way, model, model_dir, row, setup, args)
            rows.append({"params": params, **row})
            progress.finished(rows[-1])
            print(format_row(rows[-1], args.tiny), flush=True)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    return rows


def parse_args(argv):
    from recipes_workbench.planner.catalogue import catalogue_names

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (checks the code path)")
    parser.add_argument("--tiny", action="store_true", help="every config scaled down to 2 layers x 64")
    parser.add_argument("--models", nargs="+", default=None, help="Hub ids or aliases (default: all)")
    parser.add_argument("--recipes", nargs="+", default=DEFAULT_RECIPES, choices=list(RECIPES))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per row (at least 2)")
    parser.add_argument("--budget_gib", type=float, default=None, help="default: the device's memory")
    parser.add_argument("--memory_cap_gib", type=float, default=None,
                        help="CUDA: cap this process's allocator there (set_per_process_memory_fraction); "
                        "a row past it fails with OutOfMemoryError")  # fmt: skip
    parser.add_argument("--memory_history_dir", default=None,
                        help="CUDA: the allocator's history of each row's measured steps, one snapshot "
                        "(torch.cuda.memory._dump_snapshot) per row, for pytorch.org/memory_viz")  # fmt: skip
    parser.add_argument("--max_minutes", type=float, default=8.0, help="start nothing that would end later")
    parser.add_argument(
        "--deadline_unix", type=float, default=None, help="instead of --max_minutes: the end, as time.time()"
    )
    parser.add_argument(
        "--skip_rows", nargs="*", default=[], help="MODEL/RECIPE rows already done (gpu_check.py's restarts)"
    )
    parser.add_argument("--work_dir", default="/tmp/gpu_catalogue_check", help="the saved random models")
    parser.add_argument(
        "--output",
        default=None,
        help="the JSON report (default: gpu_catalogue_check.json, -cpu-tiny with --cpu --tiny, in $OUT "
        "or else benchmarks/results/)",
    )
    args = parser.parse_args(argv)
    if args.tiny:
        args.batch, args.seq = min(args.batch, 8), min(args.seq, 32)
    args.steps = max(args.steps, 2)
    from recipes_workbench.planner.catalogue import catalogue_entry

    unknown = [name for name in args.models or () if catalogue_entry(name) is None]
    if unknown:
        parser.error(f"not in the catalogue: {', '.join(unknown)}; it lists {', '.join(catalogue_names())}")
    args.models = args.models or catalogue_names()
    if args.output is None:
        stem = "gpu_catalogue_check" + ("-cpu" if args.cpu else "") + ("-tiny" if args.tiny else "")
        args.output = str(Path(os.environ.get("OUT", REPO_ROOT / "benchmarks" / "results")) / f"{stem}.json")
    return args


def device_description(cpu: bool) -> tuple[str, int]:
    """The device in words, and its memory in bytes (the default budget)."""
    import torch

    if not cpu:
        if not torch.cuda.is_available():
            raise SystemExit("No CUDA device here: run with --cpu (and --tiny) to check the code path.")
        properties = torch.cuda.get_device_properties(0)
        return properties.name, properties.total_memory
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)", memory


def table_header(tiny: bool) -> str:
    unit = "MiB" if tiny else "GiB"
    return f"{'model':<40} {'recipe':<11} {'batch':>5} {'plan ' + unit:>9} {'meas ' + unit:>9} {'ratio':>6}  status"


def format_row(row: dict, tiny: bool) -> str:
    """One row of the table; the peaks in MiB for the tiny configs (GiB in the JSON either way)."""
    scale = 1024 if tiny else 1

    def cell(key, spec, factor=1):
        value = row.get(key)
        return format(value * factor, spec) if value is not None else format("-", spec[:2])

    return (
        f"{row['model']:<40} {row['recipe']:<11} {cell('batch', '>5')} "
        f"{cell('planned_peak_gib', '>9.3f', scale)} {cell('measured_peak_gib', '>9.3f', scale)} "
        f"{cell('ratio', '>6.3f')}  {row['status']}" + (f": {row['note']}" if row.get("note") else "")
    )


class Progress:
    """The report, rewritten (atomically) before each row is measured, naming it and when it started, and
    after each row: a watchdog (gpu_check.py) cuts off a row that runs past its limit and keeps the rest."""

    def __init__(self, args, device: str, budget: int, models: list[str]):
        self.args, self.device, self.budget, self.models = args, device, budget, models
        self.started_at = time.monotonic()
        self.rows: list[dict] = []
        self.not_reached: list[str] = []
        self.current: dict | None = None

    def started(self, model: str, way: str) -> None:
        self.current = {"model": model, "recipe": way, "started_unix": time.time()}
        self.write()

    def finished(self, row: dict) -> None:
        self.rows.append(row)
        self.current = None
        self.write()

    def write(self) -> dict:
        import torch
        import transformers

        report = {
            "device": self.device,
            "figures": f"measured on {self.device}" + (" (tiny configs)" if self.args.tiny else ""),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "budget_gib": round(self.budget / 2**30, 2),
            "args": vars(self.args),
            "tolerance": TOLERANCE,
            "elapsed_s": round(time.monotonic() - self.started_at, 1),
            "models": self.models,
            "rows": self.rows,
            "not_reached": self.not_reached,
            "current": self.current,
        }
        output = Path(self.args.output)
        output.parent.mkdir(parents=True, exist_ok=True)
        temporary = output.with_name(output.name + ".tmp")
        temporary.write_text(json.dumps(report, indent=2) + "\n")
        os.replace(temporary, output)
        return report


def main(argv=None) -> int:
    import torch
    from transformers.utils import logging as transformers_logging

    args = parse_args(argv)
    verbosity, threads = transformers_logging.get_verbosity(), torch.get_num_threads()
    transformers_logging.set_verbosity_error()  # each load's report of the new head, per row
    transformers_logging.disable_progress_bar()
    if args.cpu and args.tiny:
        torch.set_num_threads(1)  # tiny ops: OpenMP threads only compete (tests/conftest.py's one_thread)
    try:
        return run_check(args)
    finally:
        transformers_logging.set_verbosity(verbosity)
        transformers_logging.enable_progress_bar()
        torch.set_num_threads(threads)


def run_check(args) -> int:
    device, memory = device_description(args.cpu)
    budget = int(args.budget_gib * 2**30) if args.budget_gib else memory
    if args.memory_cap_gib and not args.cpu:
        import torch

        # A 24 GB card, on a larger one: the caching allocator refuses past the cap (the CUDA context
        # and other processes are outside it, as on the real card they share its memory).
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.memory_cap_gib * 2**30 / memory))
    if args.memory_history_dir:
        Path(args.memory_history_dir).mkdir(parents=True, exist_ok=True)
    Path(args.work_dir).mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if args.deadline_unix is not None:
        deadline = started + (args.deadline_unix - time.time())
        limit = f"by the deadline ({args.deadline_unix - time.time():.0f} s)"
    else:
        deadline = started + 60 * args.max_minutes
        limit = f"in {args.max_minutes:g} minutes"
    models = models_by_size(args.models, args.tiny)
    print(f"device: {device}; budget {budget / 2**30:.1f} GiB; batch {args.batch}, seq {args.seq}, "
          f"{args.steps} steps; {len(models)} models, smallest first", flush=True)  # fmt: skip
    header = table_header(args.tiny)
    print(header, flush=True)
    progress = Progress(args, device, budget, [name for name, _, _ in models])
    progress.write()
    last = None  # (seconds, parameters) of the last model that trained
    for index, model in enumerate(models):
        estimate = last[0] * model[2] / last[1] if last else 0.0
        if time.monotonic() + estimate > deadline:
            progress.not_reached = [name for name, _, _ in models[index:]]
            break
        model_started = time.monotonic()
        rows = check_model(model, budget, args, deadline, progress)
        if any("measured_peak_gib" in row for row in rows):
            last = (time.monotonic() - model_started, model[2])
    report = progress.write()
    print(f"\n{report['figures']}, {report['elapsed_s']:.0f} s; ratio = planned / measured peak\n{header}")
    print("\n".join(format_row(row, args.tiny) for row in progress.rows))
    if progress.not_reached:
        print(f"not reached {limit}: {', '.join(progress.not_reached)}")
    print(f"written to {args.output}")
    return 0 if all(row["status"] in ("ok", "skipped", "not planned") for row in progress.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
