"""--resume_from_checkpoint: the checkpoint it means (the newest complete one for "last"), checked before
anything loads, and the resume's false warning dropped (loaded only by a run that resumes, recipe_run.py,
or that stops, failures.py).

A resume made transformers warn that "arguments do not match ... logging_steps" with identical
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

from recipes_lib.errors import OutputDirError
from recipes_lib.training.checkpoints import COMPLETE_MARKER, checkpoints_in, file_sha256

logger = logging.getLogger("recipes_lib.training.checkpoints")  # one logger for every checkpoint line

TRAINER_STATE_FILE = "trainer_state.json"
# `--resume_from_checkpoint last` (or true, as the Trainer spells it) means the newest complete one.
RESUME_FROM_LAST = ("last", "true")
# transformers.trainer_utils.compare_trainer_and_checkpoint_args's line for one argument.
_MISMATCH = re.compile(r"\n\t(\w+_steps): (\S+) \(from args\) != (\S+) \(from trainer_state\.json\)")
_HEADING = "arguments do not match the ones in the `trainer_state.json`"


def incomplete_reason(checkpoint_dir: str | Path) -> str | None:
    """None when the checkpoint is complete and unchanged; otherwise what is wrong with it, in a few words."""
    checkpoint_dir = Path(checkpoint_dir)
    marker = checkpoint_dir / COMPLETE_MARKER
    if not marker.is_file():
        return "no completion marker: interrupted while saving"
    try:
        recorded = json.loads(marker.read_text())["files"]
        # A marker of an earlier version holds sizes alone.
        expected = {
            name: (entry, None) if isinstance(entry, int) else (entry["bytes"], entry["sha256"])
            for name, entry in recorded.items()
        }
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        return f"unreadable {COMPLETE_MARKER}"
    for name, (size, digest) in expected.items():
        path = checkpoint_dir / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, {size} were written"
        if digest is not None and file_sha256(path) != digest:
            return f"{name} has changed since it was written (its SHA-256 differs from the marker's)"
    return None


def last_complete_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest checkpoint that is complete; newer incomplete ones are skipped with a warning."""
    for checkpoint in reversed(checkpoints_in(output_dir)):
        reason = incomplete_reason(checkpoint)
        if reason is None:
            return checkpoint
        logger.warning("Skipping %s (%s).", checkpoint, reason)
    return None


def resolve_resume_checkpoint(value: str | None, output_dir: str, results_file: str) -> str | None:
    """The checkpoint directory `--resume_from_checkpoint VALUE` means ("last": the newest complete one
    in output_dir), checked before anything is loaded."""
    output = Path(output_dir)
    if (output / results_file).is_file():
        raise OutputDirError(
            f"--resume_from_checkpoint {value}: the run in '{output}' already finished ({results_file} is "
            "there), so there is nothing to resume. Use another --output_dir for a new run, or "
            "--overwrite_output_dir without --resume_from_checkpoint to train it again from the start."
        )
    if str(value).strip().lower() in RESUME_FROM_LAST:
        checkpoint = last_complete_checkpoint(output)
        if checkpoint is None:
            found = checkpoints_in(output)
            seen = (
                "its checkpoints are all incomplete: "
                + ", ".join(f"{path.name} ({incomplete_reason(path)})" for path in found)
                if found
                else "it holds no checkpoint"
                if output.is_dir()
                else "it does not exist"
            )
            raise OutputDirError(
                f"--resume_from_checkpoint {value}: there is no complete checkpoint to resume from in "
                f"'{output}' ({seen}). Start the run again without --resume_from_checkpoint (add "
                "--overwrite_output_dir if the directory holds files), or check --output_dir."
            )
        return str(checkpoint)
    checkpoint = Path(value)
    if not (checkpoint / TRAINER_STATE_FILE).is_file():
        raise OutputDirError(
            f"--resume_from_checkpoint '{value}' is not a checkpoint directory (no {TRAINER_STATE_FILE} in it). "
            f"Pass a checkpoint-N directory written by a run, or 'last' for the newest one in --output_dir."
        )
    reason = incomplete_reason(checkpoint)
    if not (checkpoint / COMPLETE_MARKER).is_file():
        # Named explicitly and without any marker: possibly written by a plain Trainer, so the user's
        # word is taken; a checkpoint cut short while saving then fails to load with the Trainer's error.
        logger.warning("%s has no %s; resuming from it as asked.", checkpoint, COMPLETE_MARKER)
    elif reason is not None:
        earlier = last_complete_checkpoint(checkpoint.parent)
        raise OutputDirError(
            f"--resume_from_checkpoint '{value}' is incomplete ({reason}); its files cannot be trusted. "
            + (f"Resume from '{earlier}' instead (or pass 'last')." if earlier else "Start the run again.")
        )
    return str(checkpoint)


class FractionStepsWarningFilter(logging.Filter):
    """Drops transformers' resume warning lines for a *_steps fraction that the checkpoint's state holds as
    the step count it came to; the warning goes when no other line is left."""

    LOGGER = "transformers.trainer_utils"  # compare_trainer_and_checkpoint_args warns through it

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
