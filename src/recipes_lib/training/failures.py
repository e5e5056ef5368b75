"""The paragraph a run stops with when the disk refuses a save or training diverges (loaded only then:
safeguards.py, trainer.py), naming the run's last complete checkpoint if it has one."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from recipes_lib.errors import RecipeError, TrainingDiverged
from recipes_lib.training.resume import last_complete_checkpoint


class CheckpointNotSaved(RecipeError):
    """A checkpoint could not be written (a full disk, a quota, a file-size limit): the run stops there."""


class ModelNotSaved(RecipeError):
    """The final model could not be written (a full disk, a quota, a file-size limit): the run stops there."""


_OUT_OF_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _write_failure(error: BaseException) -> str:
    """What a refused write was, in words: the cause and the writer's own first line."""
    detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    out_of_space = getattr(error, "errno", None) in _OUT_OF_SPACE or any(
        os_error in str(error) for os_error in map(os.strerror, _OUT_OF_SPACE)
    )
    cause = (
        "the disk is full, or a quota or file-size limit was reached" if out_of_space else "a write failed"
    )
    return f"{cause} ({type(error).__name__}: {detail})"


def checkpoint_not_saved(checkpoint_dir: Path, run_dir: Path, error) -> CheckpointNotSaved:
    last = last_complete_checkpoint(run_dir)
    return CheckpointNotSaved(
        f"Saving the checkpoint {checkpoint_dir.name} in '{run_dir}' failed: {_write_failure(error)}. "
        "The partial checkpoint was removed; "
        + (
            f"the last complete checkpoint, {last.name}, is intact. Free space on that disk, then run the same "
            "command with --resume_from_checkpoint last to continue from it."
            if last is not None
            else "no earlier checkpoint is complete. Free space on that disk, then run the same command again."
        )
    )


def model_not_saved(output_dir: Path, written: list[str], error) -> ModelNotSaved:
    last = last_complete_checkpoint(output_dir)
    return ModelNotSaved(
        f"Saving the final model in '{output_dir}' failed: {_write_failure(error)}. The files it had written "
        f"({', '.join(sorted(written)) or 'none'}) were removed, so no partial model is left; no results.json "
        "was written. Free space on that disk, then run the same command "
        + (
            f"with --resume_from_checkpoint last: it continues from {last.name}, the last complete checkpoint."
            if last is not None
            else "again (the run saved no checkpoint to continue from)."
        )
    )


def diverged(what: str, args) -> TrainingDiverged:
    """`what` went wrong, then what usually brings a diverging run back, with the values this run used."""
    precision = (
        "--bf16 instead of --fp16 (bf16 has fp32's range; fp16 overflows above 65,504)"
        if args.fp16
        else "--bf16 rather than --fp16 if you train in mixed precision (fp16 overflows above 65,504)"
    )
    clipping = (
        f"stronger gradient clipping (this run: --max_grad_norm {args.max_grad_norm:g})"
        if args.max_grad_norm
        else "gradient clipping, which this run turned off: --max_grad_norm 1.0"
    )
    lower = f"--learning_rate {args.learning_rate / 10:.2g} (this run: {args.learning_rate:g})"
    last = last_complete_checkpoint(args.output_dir)
    note = f" The last complete checkpoint, from before the fault, is {last}." if last else ""
    return TrainingDiverged(f"{what} Try a lower rate, e.g. {lower}, {precision}, or {clipping}.{note}")
