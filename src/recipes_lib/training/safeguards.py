"""What keeps a long run from being lost: stop cleanly on SIGINT/SIGTERM (docs/troubleshooting.md), find
non-finite weights (the Trainer's `logging_nan_inf_filter` hides a NaN loss and trains on; RecipeTrainer
stops), and leave nothing partial where the disk refuses a save."""

from __future__ import annotations

import logging
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import TrainerCallback

from recipes_lib.errors import RecipeError

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopOnSignal(TrainerCallback):
    """On SIGINT or SIGTERM, ask the Trainer to save a checkpoint at the next `on_step_end` (no backward
    pass half done) and stop. Every process learns of a signal that reached any of them (one all-reduce
    of a single number per step): one that carried on would wait forever in its next gradient all-reduce.
    """

    def __init__(self):
        self.signal_number: int | None = None  # the signal that asked to stop, once agreed
        self._received: int | None = None  # the signal this process received, if any
        self.checkpoint_step: int | None = None  # the step at which the stop checkpoint was asked for

    @contextmanager
    def installed(self):
        """Handle SIGINT/SIGTERM in this process for the duration of the block (training)."""
        if threading.current_thread() is not threading.main_thread():
            yield self  # Python only delivers signals to the main thread
            return
        previous = {number: signal.signal(number, self._handle) for number in STOP_SIGNALS}
        try:
            yield self
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def _handle(self, number, frame):
        if self._received == signal.SIGINT and number == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now, without a checkpoint
        if self._received is not None:
            # Under `accelerate launch` one Ctrl-C brings the terminal's SIGINT and then the
            # launcher's SIGTERM: the first signal is the one that asked to stop, and a SIGTERM
            # following a Ctrl-C is not a second Ctrl-C.
            return
        self._received = number
        logger.warning(
            "Received %s: training stops after this step and saves a checkpoint "
            "(press Ctrl-C again to stop at once, without saving).",
            signal.Signals(number).name,
        )

    def agree(self, args) -> int | None:
        """The stop signal, if any process received one. A collective: every process must call it."""
        received = self._received or 0
        if args.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            flag = torch.tensor([received], device=args.device, dtype=torch.int32)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            received = int(flag.item())
        if received:
            self.signal_number = received
        return self.signal_number

    def on_step_end(self, args, state, control, **kwargs):
        if self.agree(args) is not None:
            control.should_save = True
            control.should_log = True  # the checkpoint's log history covers every step (run_totals.py)
            control.should_training_stop = True
            self.checkpoint_step = state.global_step
        return control

    def on_epoch_end(self, args, state, control, **kwargs):
        if self.checkpoint_step is not None and self.checkpoint_step == state.global_step:
            # Stopped mid-epoch with the checkpoint already written: skip the end-of-epoch
            # evaluation and a second save of the same step (time a SIGTERM grace period lacks).
            control.should_evaluate = False
            control.should_save = False
        return control


def first_non_finite_parameter(model) -> str | None:
    """The name of the first floating-point parameter holding NaN or inf (integer ones, bitsandbytes' packed
    4-bit weights, cannot), or None."""
    for name, parameter in model.named_parameters():
        if parameter.is_floating_point() and not bool(torch.isfinite(parameter).all()):
            return name
    return None


# The errors a write that the disk refuses raises through each writer: OSError (json, the Trainer's
# own files), torch.save's RuntimeError (its C++ stream gives no errno), safetensors' SafetensorError.
WRITE_FAILURES = (OSError, RuntimeError, SafetensorError)


@contextmanager
def complete_or_removed(checkpoint_dir: Path, run_dir: Path) -> Iterator[None]:
    """Around a checkpoint's save: a write that fails (a full disk) removes the partial checkpoint (it would
    never be resumed from, and it holds the space the disk lacks) and stops the run in one paragraph
    naming the last complete checkpoint, which is left as it was."""
    try:
        yield
    except RecipeError:
        raise  # the save's own refusals (weights holding NaN) say what they are
    except WRITE_FAILURES as error:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
        from recipes_lib.training.failures import checkpoint_not_saved

        raise checkpoint_not_saved(checkpoint_dir, run_dir, error) from error


def _files_as_they_are(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        path.name: (path.stat().st_mtime_ns, path.stat().st_size)
        for path in directory.iterdir()
        if path.is_file()
    }


@contextmanager
def final_save_or_removed(output_dir: Path) -> Iterator[None]:
    """Around the final model's save: a write that fails (a full disk) removes every file this save wrote or
    changed (a partial model.safetensors, a config.json without its weights), so no half-saved model is
    ever loaded, and stops the run in one paragraph saying what to do."""
    before = _files_as_they_are(output_dir) if output_dir.is_dir() else {}
    try:
        yield
    except RecipeError:
        raise
    except WRITE_FAILURES as error:
        written = [name for name, seen in _files_as_they_are(output_dir).items() if before.get(name) != seen]
        for name in written:
            (output_dir / name).unlink(missing_ok=True)
        from recipes_lib.training.failures import model_not_saved

        raise model_not_saved(output_dir, written, error) from error
