"""Files another command reads back are written whole or not at all (a hidden temporary beside NAME, flushed,
renamed over it: a file cut short in place by kill -9 or a full disk would keep its name), and read back
whole or refused in one paragraph naming them (`read_json`).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from recipes_lib.errors import RecipeError


class DamagedFileError(RecipeError):
    """A file a command reads back does not parse: cut short, or changed since it was written."""


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file's data, or a directory's entries (new names, renames), to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@contextmanager
def written_whole(path: str | os.PathLike, mode: str = "w", **open_options) -> Iterator[IO]:
    """A handle on a temporary file beside `path` ("w": UTF-8 unless `encoding` says; or "wb"), renamed over
    `path` when the block ends cleanly; fsynced before the rename, the directory after it (no power cut
    leaves the name pointing at data still in the page cache)."""
    path = Path(path)
    if mode not in ("w", "wb"):
        raise ValueError(f"written_whole writes a new file: mode 'w' or 'wb', not {mode!r}")
    if mode == "w":
        open_options.setdefault("encoding", "utf-8")
    descriptor, temporary = _create_beside(path)
    try:
        with open(descriptor, mode, **open_options) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def _create_beside(path: Path) -> tuple[int, str]:
    """A new hidden file in `path`'s directory, as a plain open() would create it (0666 less the umask,
    which the kernel applies; tempfile.mkstemp's 0600 would hide a results.json from a shared group)."""
    while True:
        temporary = str(path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp"))
        try:
            return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), temporary
        except FileExistsError:
            continue


def write_text_whole(path: str | os.PathLike, text: str, **open_options) -> Path:
    """`Path.write_text`, whole or not at all (written_whole)."""
    with written_whole(path, **open_options) as handle:
        handle.write(text)
    return Path(path)


def read_json(path: str | os.PathLike, what: str, remedy: str) -> Any:
    """The parsed contents of a JSON file, or a DamagedFileError naming it (`what` it is), the line and `remedy`.
    A missing file is the caller's to check: it means something else."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
        return json.loads(text)
    except UnicodeDecodeError as error:
        where, problem = f"byte {error.start}", "is not UTF-8 text"
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        # Nothing after the error, or a string still open at the end of the file: the file stops mid-record.
        # A cut inside a literal (`nu` of null, `0.` of a number) leaves a short tail on the last line.
        tail = text[error.pos :].strip()
        stops_early = "\n" not in tail and len(tail) < 16 or error.msg.startswith("Unterminated string")
        problem = "ends too early" if stops_early else f"is not valid JSON ({error.msg})"
    except RecursionError:
        where, problem = "its start", "nests deeper than a JSON reader follows"
    raise DamagedFileError(
        f"{path} ({what}) {problem} at {where}: it was cut short while being written, or changed since. "
        f"It is not read as whole. {remedy}"
    )
