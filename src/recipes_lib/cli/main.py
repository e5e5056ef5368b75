"""`recipes-lib` console entry point: tools that work on finished runs, and the memory planner.

The commands, one source for the list docs/development.md repeats (tests/test_docs.py checks both
against the parser built here):

recipes-lib plan --model bert-base-uncased --recipe all --per_device_train_batch_size 32 --max_seq_length 128 --bf16
    peak training memory predicted from the model config alone (no weights, no GPU)
recipes-lib compare outputs/demo/full_ft outputs/demo/lora [--markdown] [--chart FILE.png] [--wandb]
    finished runs side by side: one table and a stacked-bar memory chart
recipes-lib show outputs/demo/full_ft [outputs/demo/lora ...]
    a shorter table of finished runs, no chart
recipes-lib families [--markdown]
    what each encoder family gets: LoRA targets, attention kernel, precision, FSDP unit
recipes-lib predict outputs/demo/lora --input texts.csv [--output predictions.jsonl] [--batch_size 32]
    predictions of a finished run for a file of texts, as JSON Lines
recipes-lib export outputs/demo/full_ft [--quantize int8] [--eval_file F] [--max_metric_drop 0.5]
    a finished run as ONNX (and int8) in OUTPUT_DIR/export/, gated against the PyTorch model on held-out rows
recipes-lib push outputs/demo/lora --repo_id NAME/MODEL [--private] [--token T]
    a finished run (model or adapter, merged model, model card, results) uploaded to the Hugging Face Hub
recipes-lib wandb-dashboard --project bert-recipes [--entity E] [--group G] [--report]
    a saved W&B view comparing the recipes of a group (the dashboard extra)
recipes-lib sweep recipes/sweeps/sweep_demo.yaml [--memory_budget GIB] [--dry_run] [--wandb_sweep FILE]
    a fair recipe comparison: a learning-rate search per recipe, the best repeated over seeds, a report (resumable)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from recipes_lib.cli.export import add_export_parser, export_command
from recipes_lib.cli.push import add_push_parser, push_command
from recipes_lib.cli.sweep import add_sweep_parser
from recipes_lib.results import RESULTS_FILE, read_results
from recipes_lib.tracking.names import TASK_METRIC_COLUMNS
from recipes_lib.units import format_table

# (results.json key, column title, format)
SHOW_COLUMNS = (
    ("recipe", "recipe", "{}"),
    ("model_name_or_path", "model", "{}"),
    ("eval_accuracy", "accuracy", "{:.4f}"),
    ("eval_f1", "macro-F1", "{:.4f}"),
    ("params_trainable", "trainable params", "{:,}"),
    ("peak_memory_gib", "peak GiB", "{:.2f}"),
    ("train_samples_per_s", "samples/s", "{:.1f}"),
    ("train_tokens_per_s", "tokens/s", "{:.0f}"),
    ("pad_ratio", "pad ratio", "{:.2f}"),
    ("train_runtime_s", "train s", "{:.1f}"),
    ("device", "device", "{}"),
)


def _cell(results: dict, key: str, fmt: str) -> str:
    value = results.get(key)
    return "-" if value is None else fmt.format(value)


def show(run_dirs: list[str]) -> int:
    rows, runs = [], []
    for run_dir in run_dirs:
        path = Path(run_dir)
        if not (path / RESULTS_FILE).is_file() and not path.is_file():
            print(
                f"error: no {RESULTS_FILE} in '{run_dir}'; pass the output_dir of a finished run.",
                file=sys.stderr,
            )
            return 2
        runs.append(read_results(path))
        memory_note = runs[-1].get("peak_memory_source")
    # Multi-label and regression runs add their metrics (micro-F1; MSE, Pearson, Spearman) after macro-F1.
    extra = [
        (key, title, "{:.4f}")
        for key, title in TASK_METRIC_COLUMNS
        if any(run.get(key) is not None for run in runs)
    ]
    columns = [*SHOW_COLUMNS[:4], *extra, *SHOW_COLUMNS[4:]]
    rows = [[_cell(results, key, fmt) for key, _, fmt in columns] for results in runs]
    print(format_table([title for _, title, _ in columns], rows))
    if memory_note:
        print(f"peak GiB: {memory_note}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="recipes-lib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    show_parser = commands.add_parser("show", help="Print the results of finished runs as a table.")
    show_parser.add_argument("run_dirs", nargs="+", help="output directories holding results.json")
    add_compare_parser(commands)
    add_dashboard_parser(commands)
    add_export_parser(commands)
    add_plan_parser(commands)
    add_predict_parser(commands)
    add_push_parser(commands)
    add_sweep_parser(commands)
    families_parser = commands.add_parser(
        "families",
        help="What each encoder family gets: LoRA targets, attention kernel, precision, FSDP unit.",
    )
    families_parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args(argv)
    if args.command == "families":
        from recipes_lib.modeling.families import describe_families

        print(format_table(*describe_families(), markdown=args.markdown))
        return 0
    if args.command == "show":
        return show(args.run_dirs)
    if args.command == "compare":
        from recipes_lib.cli.compare import compare

        code = compare(args.run_dirs, chart=args.chart, markdown=args.markdown, draw=not args.no_chart)
        if code == 0 and args.wandb:
            from recipes_lib.cli.dashboard import log_comparison

            code = log_comparison(
                args.run_dirs,
                chart=args.chart,
                draw=not args.no_chart,
                project=args.wandb_project,
                group=args.experiment,
            )
        return code
    if args.command == "wandb-dashboard":
        from recipes_lib.cli.dashboard import wandb_dashboard

        return wandb_dashboard(
            args.project,
            entity=args.entity,
            group=args.group,
            report=args.report,
            spec_file=args.spec_file,
            sweep_metric=args.sweep_metric,
        )
    if args.command == "export":
        return export_command(args)
    if args.command == "plan":
        return plan(args)
    if args.command == "predict":
        return predict_command(args)
    if args.command == "push":
        return push_command(args)
    if args.command == "sweep":
        from recipes_lib.cli.sweep_study import sweep_command

        return sweep_command(args)
    return 2


def add_compare_parser(commands) -> None:
    compare_parser = commands.add_parser(
        "compare",
        help="Compare finished runs: one table (memory, speed, accuracy) and a stacked-bar memory chart.",
    )
    compare_parser.add_argument("run_dirs", nargs="+", help="output directories holding results.json")
    compare_parser.add_argument(
        "--chart", help="where to write the PNG chart (default: memory_comparison.png next to the runs)"
    )
    compare_parser.add_argument("--no_chart", action="store_true", help="print the table only")
    compare_parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    compare_parser.add_argument(
        "--wandb",
        action="store_true",
        help="also log the table and chart into the runs' W&B group as one comparison run (offline "
        "without an API key; docs/wandb.md)",
    )
    compare_parser.add_argument(
        "--wandb_project", help="with --wandb: the W&B project (default: the runs' own)"
    )
    compare_parser.add_argument("--experiment", help="with --wandb: the W&B group (default: the runs' own)")


def add_dashboard_parser(commands) -> None:
    dashboard_parser = commands.add_parser(
        "wandb-dashboard",
        help="Save a W&B workspace view comparing the recipes of a group (needs the 'dashboard' extra).",
        description="Build a saved W&B workspace view of a recipe comparison (runs grouped by recipe, a runs "
        "table, bar charts and a scatter of memory against accuracy, the training curves), check it offline, "
        "save it and print its URL. Needs `pip install -e '.[dashboard]'`, and an API key and the network to "
        "save. Runs logged offline: `wandb sync` them first (docs/wandb.md).",
    )
    dashboard_parser.add_argument("--project", required=True, help="the W&B project of the runs")
    dashboard_parser.add_argument("--entity", help="the W&B user or team (default: your default entity)")
    dashboard_parser.add_argument(
        "--group", help="the runs' group (their --experiment, by default '<model>_<dataset>'); default: all"
    )
    dashboard_parser.add_argument(
        "--report", action="store_true", help="also save a W&B Report of the comparison, for sharing"
    )
    dashboard_parser.add_argument(
        "--spec_file", help="also write the view as W&B stores it (JSON) to this file, to read it offline"
    )
    dashboard_parser.add_argument(
        "--sweep_metric",
        default="eval_accuracy",
        help="the metric of the sweep section (a `recipes-lib sweep` group: its `metric`; default eval_accuracy)",
    )


def add_plan_parser(commands) -> None:
    from recipes_lib.memory.planner.plan import DEFAULT_CUDA_OVERHEAD_GIB, SHARDED_PARTS

    plan_parser = commands.add_parser(
        "plan",
        help="Predict peak training memory from the model config alone (no weights, no GPU).",
        description="Predict peak training memory from the model config alone (no weights, no GPU). "
        "See src/recipes_lib/memory/planner/arithmetic.py for the arithmetic.",
    )
    plan_parser.add_argument(
        "--model",
        nargs="+",
        help="Hub id, local model directory or config.json (several: one table); with --fits, catalogue "
        "models to list (default: all of them)",
    )
    plan_parser.add_argument(
        "--fits",
        action="store_true",
        help="what trains in the budget: every catalogue model x every recipe, without and with activation "
        "checkpointing: the largest batch, and the cheapest recipe that fits --per_device_train_batch_size",
    )
    plan_parser.add_argument(
        "--recipe",
        default="all",
        help="a recipe of recipes/ (its SPEC's name: full_ft, lora, ...) or all (default): the training "
        "shape it declares with its default options",
    )
    plan_parser.add_argument("--per_device_train_batch_size", type=int, default=32)
    plan_parser.add_argument("--max_seq_length", type=int, default=128)
    plan_parser.add_argument("--num_labels", type=int, default=2, help="classes of the task (sizes the head)")
    plan_parser.add_argument("--bf16", action="store_true", help="bf16 mixed precision (autocast)")
    plan_parser.add_argument(
        "--gradient_checkpointing",
        "--activation_checkpointing",
        action="store_true",
        dest="gradient_checkpointing",
    )
    plan_parser.add_argument(
        "--budget_gib", "--budget", type=float, default=24.0, help="memory of the GPU in GiB (default 24)"
    )
    plan_parser.add_argument(
        "--device", choices=["cuda", "cpu"], default="cuda", help="where it trains: kernels and masks differ"
    )
    plan_parser.add_argument("--attn_implementation", choices=["sdpa", "eager"], default="sdpa")
    # These change the shapes of the recipes that have them (default: each recipe's own).
    plan_parser.add_argument("--lora_r", type=int, help="LoRA rank, for the recipes with adapters")
    plan_parser.add_argument(
        "--lora_target_modules", nargs="+", help="layers that get adapters, or all-linear"
    )
    plan_parser.add_argument("--lora_dropout", type=float, help="dropout on the adapters' input")
    plan_parser.add_argument(
        "--embedding_optimizer_bits",
        type=int,
        choices=[8, 32],
        help="AdamW state bits of nn.Embedding weights, for the recipes with 8-bit optimizer state",
    )
    add_plan_technique_options(plan_parser)
    plan_parser.add_argument(
        "--cuda_overhead_gib",
        type=float,
        default=DEFAULT_CUDA_OVERHEAD_GIB,
        help="CUDA context + cuBLAS workspace, outside PyTorch's allocator (an assumption; measure yours)",
    )
    plan_parser.add_argument(
        "--num_processes", type=int, default=1, help="processes (GPUs) training together (default 1)"
    )
    plan_parser.add_argument(
        "--sharding",
        choices=list(SHARDED_PARTS),
        default="none",
        help="what the processes shard: none (DDP), zero1, zero2, zero3 (DeepSpeed), fsdp_shard_grad_op, "
        "fsdp_full_shard; each process then holds 1/num_processes of those parts (memory/planner/plan.py lists them)",
    )
    plan_parser.add_argument(
        "--no_family", action="store_true", help="skip the largest-BERT-family-configuration answer"
    )
    plan_parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")


def add_plan_technique_options(plan_parser) -> None:
    """The memory techniques of the largest encoders, as plan options (memory/planner/plan.py)."""
    plan_parser.add_argument(
        "--paged_optimizer",
        action="store_true",
        help="paged 8-bit AdamW (adamw_8bit --paged_optimizer true): its state may page out to CPU memory while "
        "the activations need the room (GPU only; memory/planner/plan.py says what is assumed)",
    )
    plan_parser.add_argument(
        "--base_bits",
        type=int,
        choices=[4, 8],
        help="bits of the quantized base, for the recipes with one (qlora): 4 (NF4, default) or 8 (LLM.int8)",
    )
    plan_parser.add_argument(
        "--optimizer_offload",
        action="store_true",
        help="DeepSpeed ZeRO-Offload (accelerate_configs/deepspeed_zero2_offload.yaml): optimizer state, fp32 "
        "master weights and gradients in CPU memory (GPU only)",
    )


def add_predict_parser(commands) -> None:
    predict_parser = commands.add_parser(
        "predict",
        help="Predictions from a finished run (any recipe) for a file of texts, as JSON Lines: label names and "
        "probabilities (multi-label: the classes at or over their thresholds; regression: the score).",
        description="Predict with the model a run saved: a full model, a LoRA or QLoRA adapter (QLoRA on its "
        "4-bit base), or output_dir/merged. The text columns, max_seq_length and tokenizer come from the "
        "run; one JSON object per input row, in input order.",
    )
    predict_parser.add_argument(
        "run_dir", help="the output_dir of a finished run (or its merged/ subdirectory)"
    )
    predict_parser.add_argument(
        "--input", required=True, help="texts to predict: a .csv, .tsv, .json, .jsonl or .parquet file"
    )
    predict_parser.add_argument("--output", help="where to write the JSON Lines (default: standard output)")
    predict_parser.add_argument("--batch_size", type=int, default=32, help="examples per batch (default 32)")
    predict_parser.add_argument(
        "--csv_quoting",
        choices=["auto", "quoted", "none"],
        default="auto",
        help="how a .csv/.tsv input is quoted (as the recipes' --csv_quoting; default auto)",
    )


def predict_command(args) -> int:
    import json
    import logging

    from recipes_lib.cli.predict import predict
    from recipes_lib.data.files import write_jsonl
    from recipes_lib.errors import RecipeError

    # Progress and notes on stderr: stdout carries only the predictions.
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    output = Path(args.output) if args.output else None
    if output is not None and not output.parent.is_dir():
        print(
            f"error: the directory of --output '{output}' does not exist. Create it, or write elsewhere.",
            file=sys.stderr,
        )
        return 2
    try:
        rows = predict(args.run_dir, args.input, batch_size=args.batch_size, csv_quoting=args.csv_quoting)
    except RecipeError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    if output is None:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
    else:
        write_jsonl(output, rows)
        print(f"Wrote {len(rows)} predictions to {output}", file=sys.stderr)
    return 0


def recipe_shapes(recipe: str, args) -> dict:
    """{name: TrainingShape} of the recipes to plan, from the recipe registry (config/registry.py), with the command
    line's LoRA and optimizer overrides applied; a recipe whose shape cannot be made maps to the error."""
    from dataclasses import replace

    from recipes_lib.config.registry import recipe_specs
    from recipes_lib.errors import ConfigError
    from recipes_lib.memory.planner.report import PLANNING_ERRORS

    specs = recipe_specs()
    if recipe != "all" and recipe not in specs:
        raise ConfigError(
            f"--recipe {recipe} is not a recipe of recipes/; use one of {', '.join(specs)}, or all."
        )
    lora_changes = {
        field: value
        for field, value in (
            ("r", args.lora_r),
            ("target_modules", _target_modules(args.lora_target_modules)),
            ("dropout", args.lora_dropout),
        )
        if value is not None
    }
    shapes = {}
    for name, spec in specs.items():
        if recipe not in ("all", name):
            continue
        try:
            shape = spec.default_shape()
        except PLANNING_ERRORS as error:
            shapes[name] = error
            continue
        if shape.adapters is not None and lora_changes:
            shape = replace(shape, adapters=replace(shape.adapters, **lora_changes))
        if shape.optimizer_bits == 8 and args.embedding_optimizer_bits is not None:
            shape = replace(shape, embedding_optimizer_bits=args.embedding_optimizer_bits)
        if shape.optimizer_bits == 8 and args.paged_optimizer:
            shape = replace(shape, paged_optimizer=True)
        if shape.quantized_base and args.base_bits is not None:
            shape = replace(shape, base_bits=args.base_bits)
        shapes[name] = shape
    return shapes


def _target_modules(names: list[str] | None) -> tuple[str, ...] | str | None:
    """--lora_target_modules as a LoraShape holds them: names (commas split too), or 'all-linear'."""
    if names is None:
        return None
    names = [name.strip() for item in names for name in item.split(",") if name.strip()]
    return "all-linear" if [name.lower() for name in names] == ["all-linear"] else tuple(names)


def plan(args) -> int:
    import logging
    import warnings

    from recipes_lib.errors import RecipeError
    from recipes_lib.memory.planner.plan import Setup
    from recipes_lib.memory.planner.report import (
        describe_setup,
        format_family,
        format_not_planned,
        format_plan,
        format_plan_table,
        format_sources,
        plan_models,
    )

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    warnings.filterwarnings("ignore", category=FutureWarning)  # peft/transformers deprecation notes
    for name, value in (("per_device_train_batch_size", args.per_device_train_batch_size),
                        ("max_seq_length", args.max_seq_length), ("num_processes", args.num_processes)):  # fmt: skip
        if value <= 0:
            print(f"error: --{name} is {value}; it must be a positive integer.", file=sys.stderr)
            return 2
    setup = Setup(
        batch_size=args.per_device_train_batch_size,
        seq_length=args.max_seq_length,
        bf16=args.bf16,
        gradient_checkpointing=args.gradient_checkpointing,
        device=args.device,
        attention=args.attn_implementation,
        cuda_overhead_gib=args.cuda_overhead_gib,
        num_processes=args.num_processes,
        sharding=args.sharding,
        optimizer_offload=args.optimizer_offload,
    )
    try:
        shapes = recipe_shapes(args.recipe, args)
    except RecipeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.fits:
        return plan_fits(args, shapes, setup)
    if not args.model:
        print("error: plan needs --model (or --fits, for every catalogue model).", file=sys.stderr)
        return 2
    rows = plan_models(args.model, shapes, setup, args.budget_gib, num_labels=args.num_labels)
    not_planned = format_not_planned(rows)
    if all(row.plan is None for row in rows):  # nothing to show: say why (naming the rows if they differ)
        reasons = {row.error for row in rows}
        for line in [rows[0].error] if len(reasons) == 1 else not_planned:
            print(f"error: {line}", file=sys.stderr)
        return 2
    if format_sources(rows):
        print(format_sources(rows))
    if len(rows) == 1:
        print(format_plan(rows[0].plan, rows[0].max_batch, args.budget_gib))
    else:
        print(f"Predicted peak training memory: {describe_setup(setup, args.budget_gib)}")
        print(format_plan_table(rows, args.budget_gib, markdown=args.markdown))
        for line in not_planned:
            print(f"{'- ' if args.markdown else ''}{line}")
    if not args.no_family:
        print()
        print(format_family(shapes, setup, args.budget_gib))
    return 2 if not_planned else 0


def plan_fits(args, shapes: dict, setup) -> int:
    """`plan --fits`: the catalogue models (or those of --model) against every recipe, as one table."""
    from recipes_lib.memory.planner.catalogue import catalogue_entry
    from recipes_lib.memory.planner.fits import catalogue_fits, format_fits

    models = []
    for name in args.model or ():
        entry = catalogue_entry(name)
        if entry is None:
            print(f"error: --fits lists catalogue models; '{name}' is not one (plan --fits shows them).",
                  file=sys.stderr)  # fmt: skip
            return 2
        models.append(entry.hub_id)
    rows = catalogue_fits(shapes, setup, args.budget_gib, models=models or None, num_labels=args.num_labels)
    print(format_fits(rows, list(shapes), setup, args.budget_gib, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
