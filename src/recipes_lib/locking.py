"""One command at a time per output directory: every command that writes into one takes DIR/.recipes-lib.lock
(flock through filelock: the kernel drops it with its process) before it looks at DIR, until it ends; the file
names the holder (docs/troubleshooting.md). A file nobody locks was left by a command that died: taken over, with
a warning, only by one that continues or replaces that work (`take_over_stale`) or reruns it (`resumes_itself`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
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
    directory: str | Path,
    command: str,
    take_over_stale: bool = False,
    stale_advice: str = "",
    resumes_itself: bool = False,
) -> DirectoryLock:
    """Hold `directory` (created if missing; removed again if still empty) for `command` ("run", "sweep", ...)
    until release(), as the module's docstring says; `stale_advice`: how this command can continue or replace
    a dead command's work. Once held, the temporaries a dead writer left are deleted."""
    directory = Path(directory)
    try:
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / LOCK_FILE
        lock = FileLock(path, blocking=False)
        lock.acquire()
    except Timeout:
        raise OutputDirError(
            f"'{directory}' is in use by {_holder(path)}. Nothing was changed. Wait for it to end, or give "
            f"this {command} another output directory."
        ) from None
    except OSError as error:  # read-only file system, no permission, disk full, a file in the way
        raise _unwritable(directory, command, error) from None
    try:
        own = resumes_itself and _record(path).get("command") == command
        _check_stale(path, command, take_over_stale or own, stale_advice)
        remove_leftovers(directory)
        record = {"command": command, "pid": os.getpid(), "host": socket.gethostname(),
                  "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}  # fmt: skip
        path.write_text(json.dumps(record) + "\n")
    except OSError as error:  # a full disk or read-only mount: the empty lock file (and a new directory) go
        _let_go(path, lock, created)
        raise _unwritable(directory, command, error) from None
    except BaseException:  # a stale lock refused: its record stays for the next command to see
        lock.release()
        raise
    return DirectoryLock(path, lock, created)


def _check_stale(path: Path, command: str, take_over: bool, stale_advice: str) -> None:
    """A record nobody holds means its command died without ending: refused unless `take_over`."""
    if not path.read_text(errors="replace").strip():
        return
    ended = (
        f"'{path.parent}' was locked by {_holder(path)}, which stopped without ending (killed, out of memory, "
        "or its machine went down), so what it was writing there may be incomplete."
    )
    if not take_over:
        raise OutputDirError(
            f"{ended} Nothing was changed. {stale_advice}If you know that command is no longer running, "
            f"you can also delete {path} and run this again."
        )
    logger.warning("%s This %s takes its lock over.", ended, command)


def _unwritable(directory: Path, command: str, error: OSError) -> OutputDirError:
    reason = error.strerror or str(error) or type(error).__name__
    return OutputDirError(
        f"Cannot write in '{directory}' ({reason}), so this {command} cannot use it. Nothing was changed. Give "
        "a directory on a writable disk with free space (a read-only mount, another user's directory, or a "
        "full disk refuse it)."
    )


# What a writer killed mid-write leaves: whole_files.py's `.NAME.XXXXXXXX.tmp` beside the file it was
# writing, and tempfile's `.export-XXXXXXXX` (`.export-old-...`) staging directories. Only the lock's
# holder writes in the directory, so once it is held these belong to nobody.
LEFTOVER = re.compile(r"^\.(?:.+\.[0-9a-f]{8}\.tmp|export-(?:old-)?[a-z0-9_]{8})$")


def remove_leftovers(directory: Path) -> list[str]:
    """Delete the temporaries a dead writer left at the top of `directory`; their names."""
    removed = sorted(entry.name for entry in directory.iterdir() if LEFTOVER.match(entry.name))
    for name in removed:
        entry = directory / name
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    if removed:
        logger.warning(
            "Removed what a killed command left half-written in '%s': %s.", directory, ", ".join(removed)
        )
    return removed


def _record(path: Path) -> dict:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _holder(path: Path) -> str:
    """'a run (process 123 on host gpu-1, since 2026-12-06 05:10:03 UTC)', from the lock file's record."""
    try:
        record = _record(path)
        article = "an" if record["command"][:1] in "aeiou" else "a"
        return f"{article} {record['command']} (process {record['pid']} on host {record['host']}, since {record['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return f"another command (its lock file {path} does not say which)"
