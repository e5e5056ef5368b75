"""`recipes-lib` console entry point: tools that work on finished runs.

recipes-lib show outputs/demo/full_ft [outputs/demo/lora ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from recipes_lib.results import RESULTS_FILE, read_results

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


def format_table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True))
        for line in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _cell(results: dict, key: str, fmt: str) -> str:
    value = results.get(key)
    return "-" if value is None else fmt.format(value)


def show(run_dirs: list[str]) -> int:
    rows = []
    for run_dir in run_dirs:
        path = Path(run_dir)
        if not (path / RESULTS_FILE).is_file() and not path.is_file():
            print(
                f"error: no {RESULTS_FILE} in '{run_dir}'; pass the output_dir of a finished run.",
                file=sys.stderr,
            )
            return 2
        results = read_results(path)
        rows.append([_cell(results, key, fmt) for key, _, fmt in SHOW_COLUMNS])
        memory_note = results.get("peak_memory_source")
    print(format_table(rows, [title for _, title, _ in SHOW_COLUMNS]))
    if memory_note:
        print(f"peak GiB: {memory_note}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="recipes-lib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    show_parser = commands.add_parser("show", help="Print the results of finished runs as a table.")
    show_parser.add_argument("run_dirs", nargs="+", help="output directories holding results.json")
    args = parser.parse_args(argv)
    if args.command == "show":
        return show(args.run_dirs)
    return 2


if __name__ == "__main__":
    sys.exit(main())
