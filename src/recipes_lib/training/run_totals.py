"""A resumed run's record equals an uninterrupted run's: its figures come from what survives a resume.

After a resume, the Trainer's `train_loss` is this process's summed loss over this process's steps, and
a callback's counters start at zero. What a checkpoint keeps is its trainer_state.json: the log history
and each `ExportableState` callback's state. So the run logs its training loss at every checkpoint and
at its last step (`LogAtCheckpoints`: the log history then covers every step before each checkpoint),
`whole_run_loss` averages the logged losses weighted by the steps each covers, and the TokenCounter
keeps its counts in the checkpoint's state (training/callbacks.py).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback


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
