"""Checkpoints that are either complete or ignored (the choice of the one to resume from: resume.py).

A run killed while saving leaves a checkpoint-N missing files, and the Trainer's "last checkpoint" is
simply the highest N. So RecipeTrainer ends every save with COMPLETE_MARKER, listing each file with its
size and SHA-256, and resuming considers only checkpoints whose files still match it: a changed file is
named before anything is loaded (docs/troubleshooting.md, "Killed or crashed", with what the hash costs).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
from pathlib import Path

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from recipes_lib.whole_files import fsync_path, write_text_whole

logger = logging.getLogger(__name__)

COMPLETE_MARKER = "checkpoint_complete.json"
_CHECKPOINT_NAME = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


def _files_in(directory: Path) -> list[Path]:
    return sorted(path for path in directory.rglob("*") if path.is_file() and path.name != COMPLETE_MARKER)


def file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def mark_complete(checkpoint_dir: str | Path, global_step: int) -> Path:
    """Flush every file of the checkpoint to disk, then record them, their sizes and SHA-256 in the marker
    (atomically). The fsyncs make the marker mean "on disk", not just "in the page cache": a machine that
    loses power (or a preempted VM) cannot keep the marker but lose the weights."""
    checkpoint_dir = Path(checkpoint_dir)
    files = _files_in(checkpoint_dir)
    for path in files:
        fsync_path(path)
    record = {
        "global_step": global_step,
        "files": {
            str(path.relative_to(checkpoint_dir)): {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
            for path in files
        },
    }
    # A reader sees no marker or the whole marker.
    return write_text_whole(checkpoint_dir / COMPLETE_MARKER, json.dumps(record, indent=1))


def checkpoints_in(output_dir: str | Path) -> list[Path]:
    """The checkpoint-N directories of a run, oldest (smallest N) first."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [path for path in output_dir.iterdir() if path.is_dir() and _CHECKPOINT_NAME.match(path.name)]
    return sorted(found, key=lambda path: int(_CHECKPOINT_NAME.match(path.name).group(1)))


# A finished run's weights: its model, adapter or merged model (what `recipes-lib crossval` deletes from a
# fold once the fold has scored its rows).
RUN_WEIGHTS = ("adapter_model.safetensors", "model*.safetensors", "merged")
# Files and folders a finished run writes besides results.json and checkpoints (run/record.py, modeling/adapters.py).
RUN_ARTIFACTS = (
    *RUN_WEIGHTS,
    "adapter_config.json",
    "base_quantization_config.json",
    "eval_predictions.jsonl",
    "test_predictions.jsonl",
    "confusion_matrix.png",
    "label_thresholds.json",
    # An old binary threshold would decide a new run's predictions (predict reads it beside the model).
    "decision_threshold.json",
    "README.md",  # the old run's model card
    # The old model's ONNX export: the new card would show its gate figures (tracking/card_export.py).
    "export",
    "export.failed",
)


def clear_previous_run(output_dir: str | Path, results_file: str) -> None:
    """With --overwrite_output_dir, just before training: drop the old run's checkpoints, results and
    RUN_ARTIFACTS. Left in place, `--resume_from_checkpoint last` after an interruption would pick the
    old run's higher-numbered checkpoint, or refuse because the old results.json says the run finished."""
    output_dir = Path(output_dir)
    stale = checkpoints_in(output_dir)
    for checkpoint in stale:
        shutil.rmtree(checkpoint)
    (output_dir / results_file).unlink(missing_ok=True)
    # What another recipe's run leaves that this one may not write again: an old adapter would be
    # loaded instead of a new full model (load_trained_model looks for adapter_config.json first).
    for name in RUN_ARTIFACTS:
        for path in output_dir.glob(name):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    if stale:
        logger.info("--overwrite_output_dir: removed %d checkpoint(s) of the previous run.", len(stale))
