"""Run a recipe whose disk fills up once its first checkpoint is complete.

    python tests/helpers/scripts/disk_full_after_first_checkpoint.py recipes/full_ft.py ARGS

tests/test_whole_files.py runs recipes through this script; it is a program, not a module to import. It
wraps the trainer's `mark_complete` (training/trainer.py) so that, right after the first checkpoint is
marked complete, the process's file-size limit (`ulimit -f`) drops to FILE_LIMIT bytes with SIGXFSZ
ignored: from then on a write past that size fails with EFBIG, as writes fail on a full disk, without
mounting anything. Then it runs the recipe exactly as `python recipes/X.py ARGS` would.
"""

from __future__ import annotations

import resource
import runpy
import signal
import sys

from recipes_lib.training import trainer

FILE_LIMIT = 1024  # bytes: a checkpoint's config.json fits, its weights do not
_mark_complete = trainer.mark_complete


def mark_complete_then_fill_the_disk(checkpoint_dir, global_step):
    marker = _mark_complete(checkpoint_dir, global_step)
    signal.signal(
        signal.SIGXFSZ, signal.SIG_IGN
    )  # else the kernel kills the process instead of failing the write
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, hard))
    trainer.mark_complete = _mark_complete  # once
    return marker


if __name__ == "__main__":
    trainer.mark_complete = mark_complete_then_fill_the_disk
    recipe_script = sys.argv[1]
    sys.argv = sys.argv[1:]  # the recipe reads its arguments from sys.argv[1:], as when run directly
    runpy.run_path(recipe_script, run_name="__main__")
