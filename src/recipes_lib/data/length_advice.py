"""The warning when max_seq_length cuts more than CUT_WARNING_SHARE of a split's examples, with what keeps
more whole (a longer max_seq_length, another --long_text), naming only what the reading command accepts.
Loaded only then (data/long_text.py decides); --long_text's values as config/arguments.py spells them.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("recipes_lib")


def warn_cut(cut: dict[str, dict[str, Any]], data_args, read) -> None:
    """`cut`: the truncation reports of the splits cut that much, by the name the log gives each; `read`: a
    long_text.LengthsRead."""
    if read.pair:
        what = "cut: the tokenizer shortens the longer text of each pair first (truncation longest_first)"
    else:
        what = "cut at the end" if data_args.long_text == "truncate" else "cut in the middle (head_tail)"
    shares = ", ".join(f"{100 * report['longer_share']:.0f}% of the {split}" for split, report in cut.items())
    logger.warning(
        "%s %s are longer than max_seq_length %d and are %s: the model never sees those tokens. %s.",
        shares,
        "pairs" if read.pair else "examples",
        data_args.max_seq_length,
        what,
        _advice(cut, data_args, read),
    )


def _advice(cut: dict[str, dict[str, Any]], data_args, read) -> str:
    split, report = max(cut.items(), key=lambda item: item[1]["length_keeping_95pct"])
    p95, p99, limit = (
        report["length_keeping_95pct"],
        report["length_keeping_99pct"],
        report["model_max_length"],
    )
    fits = f"95% of the {split} fit in {p95} tokens, 99% in {p99}"
    if read.finished_run is not None:  # predict, export: the run's settings are fixed
        taken = f"; the model takes at most {limit}" if limit else ""
        return (
            f"They are read as {read.finished_run} was trained (max_seq_length {data_args.max_seq_length}, "
            f"--long_text {data_args.long_text}); {fits}{taken}"
        )
    if limit is None or p95 <= limit:
        longer = f"--max_seq_length {p95} keeps 95% of the {split} whole" + (
            f", {p99} keeps 99%"
            if limit is None or p99 <= limit
            else f" (99% need {p99}, more than the model's {limit})"
        )
    elif data_args.max_seq_length < limit:
        longer = (
            f"{fits}, more than the model takes: --max_seq_length {limit}, its limit, keeps "
            f"{100 * report['model_max_length_keeps_share']:.0f}% whole"
        )
    else:
        longer = f"{fits}; the model takes no more than {limit} tokens"
    if read.pair:  # head_tail and sliding_window cut one text: a pair refuses them
        return longer
    others = {
        "head_tail": "--long_text head_tail keeps their opening and end",
        "sliding_window": "--long_text sliding_window (with --stride) reads all of them",
    }
    return "; ".join([longer, *(text for mode, text in others.items() if mode != data_args.long_text)])
