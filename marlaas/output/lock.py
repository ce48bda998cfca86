"""The lock of an output (``fcntl.flock`` on ``.NAME.lock`` beside it): one command writes an
``--out`` at a time; a second is refused at once."""

from __future__ import annotations

import fcntl
import os
from contextlib import suppress
from pathlib import Path

from marlaas.output.errors import OutputError, reason


def lock_path(out: Path) -> Path:
    """The lock file of ``out`` (beside it, hidden)."""
    return out.with_name(f".{out.name}.lock")


def lock_folder(out: Path, option: str = "--out") -> int:
    """Hold ``out``'s lock (beside it) for as long as the returned descriptor stays open;
    OutputError when another marlaas command holds it (naming ``option``, the one that
    gave ``out``)."""
    return lock_beside(Path(out), option)


def lock_beside(out: Path, option: str = "--out") -> int:
    """Take ``out``'s lock, creating its parent folder if needed; the descriptor holds it.
    OutputError when another command holds it (the error says to choose another ``option``)
    or the parent is not writable."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return _lock(out, option)
    except FileExistsError as err:  # a parent that is no folder: say what it is
        try:
            os.stat(err.filename)
            told = f"{err.filename}: not a folder"
        except OSError as stat_err:  # a symbolic link in a loop, or to nothing
            told = reason(stat_err)
        raise OutputError(f"{out}: cannot write there ({told})") from None
    except OSError as err:
        raise OutputError(f"{out}: cannot write there ({reason(err)})") from None


def _lock(out: Path, option: str) -> int:
    path = lock_path(out)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputError(
                f"{out}: another marlaas command is writing it (lock {path.name} held); wait "
                f"for it to finish or choose another {option}"
            ) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False  # its holder removed it as we opened it: take the new one
        if same:
            return fd
        os.close(fd)


def unlock(out: Path, fd: int) -> None:
    """Release ``out``'s lock taken by :func:`lock_beside` (its file removed first)."""
    with suppress(OSError):
        os.unlink(lock_path(out))  # while still holding it: a waiter then retries
    os.close(fd)
