"""One command at a time per output directory: an exclusive lock, held for the command's whole life.

A recipe run, a sweep, a crossval and `recipes-lib export` take DIR/.recipes-lib.lock (flock(2) through
filelock, which the kernel drops with its process) before they look at DIR, and keep it until they
end. The file says who holds it, for a refusal to name, and an ending command deletes it; so a file
whose lock nobody holds was left by a command that died, its work perhaps half done: it is taken over,
with a warning, only by a command that continues or replaces that work (`take_over_stale`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
import weakref
from pathlib import Path

from filelock import FileLock, Timeout

from recipes_lib.errors import OutputDirError

LOCK_FILE = ".recipes-lib.lock"
logger = logging.getLogger("recipes_lib")


class DirectoryLock:
    """The held lock of one directory; `release()` (or the end of a `with` block, or of the process)
    deletes its file and lets go."""

    def __init__(self, path: Path, lock: FileLock, created: bool):
        self.path = path
        # Also on garbage collection and at interpreter exit: a command that ends through an exception
        # raised before its `with` block began must not look like one that was killed.
        self._release = weakref.finalize(self, _let_go, path, lock, created)

    def release(self) -> None:
        self._release()  # once: later calls do nothing

    def __enter__(self) -> DirectoryLock:
        return self

    def __exit__(self, *exception) -> None:
        self.release()


def _let_go(path: Path, lock: FileLock, created: bool) -> None:
    # Deleted while still held: a command that opened this file meanwhile finds it unlinked once it
    # gets the lock, and filelock opens the path again.
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    if created:  # a command that stopped before writing anything leaves no empty directory behind
        with contextlib.suppress(OSError):
            path.parent.rmdir()
    lock.release()


def lock_directory(
    directory: str | Path, command: str, take_over_stale: bool = False, stale_advice: str = ""
) -> DirectoryLock:
    """Hold `directory` (created if missing; removed again if still empty) for `command` ("run", "sweep", ...) until release().

    Another command holding it: OutputDirError naming it; nothing in the directory changes. A lock left
    by a command that died: taken over with a warning when `take_over_stale`, else OutputDirError
    with `stale_advice` (how this command can continue or replace that work) and how to clear it.
    """
    directory = Path(directory)
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    lock = FileLock(path, blocking=False)
    try:
        lock.acquire()
    except Timeout:
        raise OutputDirError(
            f"'{directory}' is in use by {_holder(path)}. Nothing was changed. Wait for it to end, or give "
            f"this {command} another output directory."
        ) from None
    left = path.read_text(errors="replace").strip()
    if left:  # a record nobody holds: its command died without ending
        ended = (
            f"'{directory}' was locked by {_holder(path)}, which stopped without ending (killed, out of memory, "
            "or its machine went down), so what it was writing there may be incomplete."
        )
        if not take_over_stale:
            lock.release()
            raise OutputDirError(
                f"{ended} Nothing was changed. {stale_advice}If you know that command is no longer running, "
                f"you can also delete {path} and run this again."
            )
        logger.warning("%s This %s takes its lock over.", ended, command)
    record = {"command": command, "pid": os.getpid(), "host": socket.gethostname(),
              "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}  # fmt: skip
    path.write_text(json.dumps(record) + "\n")
    return DirectoryLock(path, lock, created)


def _holder(path: Path) -> str:
    """'a run (process 123 on host gpu-1, since 2026-12-06 05:10:03 UTC)', from the lock file's record."""
    try:
        record = json.loads(path.read_text())
        article = "an" if record["command"][:1] in "aeiou" else "a"
        return f"{article} {record['command']} (process {record['pid']} on host {record['host']}, since {record['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return f"another command (its lock file {path} does not say which)"
