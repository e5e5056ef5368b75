"""A resumed run's record equals an uninterrupted run's: its figures come from what survives a resume.

After a resume, the Trainer's `train_loss` is this process's summed loss over this process's steps, and
a callback's counters start at zero. What a checkpoint keeps is its trainer_state.json: the log history
and each `ExportableState` callback's state. So the run logs its training loss at every checkpoint and
at its last step (`LogAtCheckpoints`: the log history then covers every step before each checkpoint),
`whole_run_loss` averages the logged losses weighted by the steps each covers, and the TokenCounter
keeps its counts in the checkpoint's state (training/callbacks.py).

A resume also made transformers warn that "arguments do not match ... logging_steps" with identical
arguments: `--logging_steps 0.02` is a fraction of the steps, the checkpoint's state holds the step
count it came to (1 for 40 steps). `FractionStepsWarningFilter` drops such a line when the fraction,
over the checkpoint's own max_steps, comes to the same count; a real change is still said.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

# transformers.trainer_utils.compare_trainer_and_checkpoint_args's line for one argument.
_MISMATCH = re.compile(r"\n\t(\w+_steps): (\S+) \(from args\) != (\S+) \(from trainer_state\.json\)")
_HEADING = "arguments do not match the ones in the `trainer_state.json`"


class LogAtCheckpoints(TrainerCallback):
    """Logs the training loss at every checkpoint and at the last step (with the Trainer's other logs)."""

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_save or control.should_training_stop or state.global_step >= state.max_steps:
            control.should_log = True
        return control

    def on_epoch_end(self, args, state, control, **kwargs):
        if control.should_save:
            control.should_log = True
        return control


def whole_run_loss(log_history: list[dict[str, Any]]) -> float | None:
    """The mean training loss over the logged steps: each logged loss is the mean since the previous
    log, so it weighs as many steps as it covers. None when no training loss was logged."""
    covered, total = 0, 0.0
    for entry in log_history:
        if "loss" in entry and "step" in entry and entry["step"] > covered:
            total += float(entry["loss"]) * (entry["step"] - covered)
            covered = entry["step"]
    return total / covered if covered else None


class FractionStepsWarningFilter(logging.Filter):
    """Drops transformers' resume warning lines for a *_steps fraction that the checkpoint's state holds as
    the step count it came to; the warning goes when no other line is left."""

    def __init__(self, checkpoint: str | Path):
        super().__init__()
        try:
            state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
            self.max_steps = int(state.get("max_steps") or 0)
        except (OSError, ValueError, TypeError, AttributeError):
            self.max_steps = 0

    def _same(self, match: re.Match) -> bool:
        try:
            given, stored = float(match.group(2)), float(match.group(3))
        except ValueError:
            return False
        return 0 < given < 1 and math.ceil(self.max_steps * given) == stored

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _HEADING not in message:
            return True
        kept = _MISMATCH.sub(lambda match: "" if self._same(match) else match.group(0), message)
        if kept == message:
            return True
        if "\n\t" not in kept:
            return False
        record.msg, record.args = kept, ()
        return True


# The logger transformers warns through (transformers.trainer_utils.compare_trainer_and_checkpoint_args).
RESUME_WARNING_LOGGER = "transformers.trainer_utils"
