"""`recipes-lib` console entry point: tools that work on finished runs, and the memory planner.

The commands, one source for the list docs/development.md repeats (tests/workbench/test_docs.py checks both
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
recipes-lib push outputs/demo/lora --repo_id NAME/MODEL [--private]
    a finished run (model or adapter, merged model, model card, results) uploaded to the Hugging Face Hub
recipes-lib wandb-dashboard --project bert-recipes [--entity E] [--group G] [--report]
    a saved W&B view comparing the recipes of a group (the dashboard extra)
recipes-lib sweep recipes/sweeps/sweep_demo.yaml [--memory_budget GIB] [--dry_run] [--wandb_sweep FILE]
    a fair recipe comparison: a learning-rate search per recipe, the best repeated over seeds, a report (resumable)
recipes-lib crossval full_ft --folds 5 --output_dir outputs/cv [--group_column C] [--seed S] --config recipes/configs/demo.yaml
    K-fold cross-validation: every training row's out-of-fold prediction, the metric per fold and mean ± std (resumable)
recipes-lib label-issues outputs/cv [--top 10] [--drop_label_issues [FILE]]
    the training rows most likely mislabelled, by cleanlab from the out-of-fold probabilities (data-quality extra)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import sys

from recipes_lib.config.bitsandbytes_import import (
    KERNELS_HUB_LOGGER,
    KERNELS_LOGGER,
    PACKAGE,
    deferred_bitsandbytes,
    kernels_line_dropped,
)
from recipes_lib.credentials import redact, refuse_secret_options
from recipes_lib.errors import RecipeError
from recipes_workbench.cli import options_of
from recipes_workbench.cli.crossval import add_crossval_parser, add_label_issues_parser
from recipes_workbench.cli.export import add_export_parser, export_command
from recipes_workbench.cli.plan import add_plan_parser
from recipes_workbench.cli.sweep import add_sweep_parser
from recipes_workbench.shared import format_table, print_error


@contextlib.contextmanager
def quiet_bitsandbytes():
    """bitsandbytes' warnings silenced for a command that never uses it but may load it on the way
    (wandb's import does: pydantic reads the source of every loaded module, the lazy stub included)."""
    loggers = [logging.getLogger(name) for name in (PACKAGE, KERNELS_LOGGER, KERNELS_HUB_LOGGER)]
    levels = [bnb_logger.level for bnb_logger in loggers]
    for bnb_logger in loggers:
        bnb_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for bnb_logger, level in zip(loggers, levels, strict=True):
            bnb_logger.setLevel(level)


class RedactingArgumentParser(argparse.ArgumentParser):
    """argparse's own errors echo what was typed ("unrecognized arguments: ...", "invalid int value: '...'"):
    redacted like every other message. Subparsers are of the same class (argparse's parser_class default)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, redact(f"{self.prog}: error: {message}") + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The `recipes-lib` parser with every command's subparser (tests/workbench/test_docs.py checks the docs' commands on it)."""
    parser = RedactingArgumentParser(prog="recipes-lib", description=__doc__.splitlines()[0])
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
    add_crossval_parser(commands)
    add_label_issues_parser(commands)
    families_parser = commands.add_parser(
        "families",
        help="What each encoder family gets: LoRA targets, attention kernel, precision, FSDP unit.",
    )
    families_parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:  # before argparse, whose errors would echo the value ("unrecognized arguments: --token hf_...")
        refuse_secret_options(argv)
    except RecipeError as error:
        print_error(error)
        return error.exit_code
    parser = build_parser()
    # crossval passes the options it does not know to the recipe; every other command knows all of its own.
    args, recipe_tokens = parser.parse_known_args(argv)
    if recipe_tokens and args.command != "crossval":
        parser.error(f"unrecognized arguments: {' '.join(recipe_tokens)}")
    # show, compare and label-issues read finished runs' files and never load transformers: not for them
    # the check, whose import of transformers takes seconds.
    if args.command not in ("show", "compare", "label-issues") or getattr(args, "wandb", False):
        from recipes_lib.config.versions import check_supported_versions

        check_supported_versions()
    # transformers' Trainer imports peft, which imports bitsandbytes: run only by a command that uses it
    # (or reads every loaded module: wandb's import, for compare --wandb), without its kernels line.
    with deferred_bitsandbytes(), kernels_line_dropped():
        try:
            return dispatch(args, recipe_tokens)
        except RecipeError as error:  # every command's bad input: one paragraph, the error's exit code
            print_error(error)
            return error.exit_code


def describe_families(families=None) -> tuple[list[str], list[list[str]]]:
    """(header, rows): each family's profile as `recipes-lib families` prints it (from the default config
    of its own model_type)."""
    from transformers import AutoConfig

    from recipes_lib.config.family_registry import FAMILIES
    from recipes_lib.errors import ModelError
    from recipes_lib.modeling.families import check_transformers_knows, profile_for
    from recipes_workbench.export import DEFAULT_ONNX_EXPORTER, ONNX_EXPORT_FAILURES, ONNX_EXPORTERS

    header = [
        "family",
        "model_type",
        "LoRA targets (auto)",
        "attention",
        "GPU without bf16",
        "max length",
        "FSDP unit",
        "ONNX export",
    ]
    rows = []
    for family in families or FAMILIES:
        try:
            check_transformers_knows(family.model_type)
        except ModelError:  # a family newer than this transformers: say which release it needs
            needs = f"needs transformers {family.transformers_since}"
            rows.append([family.name, family.model_type, *[needs] * (len(header) - 2)])
            continue
        profile = profile_for(AutoConfig.for_model(family.model_type))
        failure = ONNX_EXPORT_FAILURES.get(family.model_type)
        exporter = ONNX_EXPORTERS.get(family.model_type, DEFAULT_ONNX_EXPORTER)
        rows.append(
            [
                profile.family,
                family.model_type,
                f"{' '.join(profile.lora_targets)} ({profile.lora_targets_source})",
                " > ".join(profile.attention_implementations),
                "fp32 (fp16 overflows)" if family.fp16_overflows else "fp16",
                "positions - (pad id + 1)" if family.positions_after_padding else "positions",
                ", ".join(profile.layer_classes),
                f"fails: {failure}" if failure else f"passes the gate ({exporter})",
            ]
        )
    return header, rows


def dispatch(args: argparse.Namespace, recipe_tokens: list[str]) -> int:
    """Run the parsed command. Each command's module is imported only when that command runs, so that
    `--help` and a light command (plan, show) do not import torch, transformers, wandb or Optuna."""
    if args.command == "crossval":
        from recipes_workbench.cli.crossval import crossval_command

        return crossval_command(args, recipe_tokens)
    if args.command == "families":
        print(format_table(*describe_families(), markdown=args.markdown))
        return 0
    if args.command == "show":
        from recipes_workbench.tools.show import show

        return show(args.run_dirs)
    if args.command == "compare":
        from recipes_workbench.tools.compare import compare

        code = compare(args.run_dirs, chart=args.chart, markdown=args.markdown, draw=not args.no_chart)
        if code == 0 and args.wandb:
            from recipes_workbench.tools.compare_wandb import log_comparison

            code = log_comparison(
                args.run_dirs,
                chart=args.chart,
                draw=not args.no_chart,
                project=args.wandb_project,
                group=args.experiment,
            )
        return code
    if args.command == "wandb-dashboard":
        # Loading it is not this command's output: wandb's import loads bitsandbytes (whose CPU backend
        # may warn), and transformers' integrations print "[INFO] Running in WANDB offline mode".
        with quiet_bitsandbytes():
            with contextlib.redirect_stdout(io.StringIO()):
                import transformers.integrations.integration_utils  # noqa: F401

                from recipes_workbench.dashboard import wandb_dashboard

            dashboard_options = options_of(args, "entity", "group", "report", "spec_file", "sweep_metric")
            return wandb_dashboard(args.project, **dashboard_options)
    if args.command == "export":
        return export_command(args)
    if args.command == "plan":
        from recipes_workbench.tools.plan import plan

        return plan(args)
    if args.command == "predict":
        from recipes_workbench.tools.predict import write_predictions

        options = {
            key: value
            for key, value in vars(args).items()
            if key not in ("command", "run_dir", "input", "output")
        }
        return write_predictions(args.run_dir, args.input, args.output, **options)
    if args.command == "push":
        from recipes_workbench.tools.push import push

        return push(args.run_dir, args.repo_id, private=args.private)
    if args.command == "sweep":
        from recipes_workbench.cli.sweep import sweep_command

        return sweep_command(args)
    if args.command == "label-issues":
        from recipes_workbench.cli.crossval import label_issues_command

        return label_issues_command(args)
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


def add_push_parser(commands) -> None:
    push_parser = commands.add_parser(
        "push",
        help="Upload a finished run (model or adapter, merged model, model card, results.json) to the Hub.",
        description="Push the output_dir of a finished run to a Hub model repository, made if missing. "
        "The model card is written again, naming the repository; checkpoints stay local. The token: HF_TOKEN "
        "or the one `hf auth login` saved (never on the command line).",
    )
    push_parser.add_argument("run_dir", help="the output_dir of a finished run (holding results.json)")
    push_parser.add_argument("--repo_id", required=True, help="the model repository, e.g. my-name/my-model")
    push_parser.add_argument(
        "--private", action="store_true", help="make the repository private if it is created"
    )


def add_predict_parser(commands) -> None:
    predict_parser = commands.add_parser(
        "predict",
        help="Predictions from a finished run (any recipe) for a file of texts, as JSON Lines: label names and "
        "probabilities (multi-label: the classes at or over their thresholds; regression: the score).",
        description="Predict with the model a run saved: a full model, a LoRA or QLoRA adapter (QLoRA on its "
        "4-bit base), output_dir/merged, or an export of `recipes-lib export` (output_dir/export or one of its "
        ".onnx files, run in ONNX Runtime on the CPU). The text columns, max_seq_length and tokenizer come from "
        "the run; one JSON object per input row, in input order, starting with its id.",
    )
    predict_parser.add_argument(
        "run_dir",
        help="the output_dir of a finished run, its merged/ subdirectory, its export/ directory, or an .onnx "
        "file in it (e.g. export/model.int8.onnx)",
    )
    predict_parser.add_argument(
        "--input", required=True, help="texts to predict: a .csv, .tsv, .txt, .json, .jsonl or .parquet file"
    )
    predict_parser.add_argument("--output", help="where to write the JSON Lines (default: standard output)")
    predict_parser.add_argument("--batch_size", type=int, default=32, help="examples per batch (default 32)")
    predict_parser.add_argument(
        "--csv_quoting",
        choices=["auto", "quoted", "none"],
        help="how a .csv/.tsv/.txt input is quoted (as the recipes' --csv_quoting; default: the run's, auto "
        "unless it was given one)",
    )
    predict_parser.add_argument(
        "--delimiter",
        help="what separates a .csv/.tsv/.txt input's fields (as the recipes' --delimiter; default: the run's, "
        "auto unless it was given one: from the input's first lines)",
    )
    predict_parser.add_argument(
        "--column_names",
        help="the names of a header-less .csv/.tsv/.txt input's fields, comma-separated (as the recipes' "
        "--column_names; default: the run's, so a header-less file is read as training read it; an input "
        "whose first line is exactly those names is read with that line as its header)",
    )
    predict_parser.add_argument(
        "--text_column_names",
        help="the input's text column, or two comma-separated for sentence pairs, in the run's order (as the "
        "recipes' option; default: the columns the run trained on)",
    )
    predict_parser.add_argument(
        "--max_text_chars",
        type=int,
        help="refuse an input text field longer than this many characters before tokenizing (the tokenizer needs "
        "about 80 bytes of memory a character; default: the run's --max_text_chars, 1,000,000 unless it was given one)",
    )
    predict_parser.add_argument(
        "--id_column",
        help='an input column copied into each output row as its "id" (default: the row\'s number, 0 for the '
        "first data row)",
    )


if __name__ == "__main__":
    sys.exit(main())
