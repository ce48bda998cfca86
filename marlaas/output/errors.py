"""The errors of an ``--out`` that cannot be written, and an OSError told in one line."""

from __future__ import annotations

import errno
import os
import re


class OutputError(RuntimeError):
    """An ``--out`` that cannot be written: someone else's folder or file, another command
    writing it, a dangling link, an unwritable parent (a user error: exit status 2)."""

    exit_status = 2


class WriteError(OutputError):
    """A write that failed on the machine (disk full, permissions, a file size limit): the old
    output is kept (exit status 1)."""

    exit_status = 1


def reason(err: OSError) -> str:
    """An OSError in a few words: the file, the system's message and the error's name."""
    code = errno.errorcode.get(err.errno or 0)
    where = f"{err.filename}: " if err.filename else ""
    return f"{where}{err.strerror or err}" + (f" [{code}]" if code else "")


DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
"""The errors of a disk, not of a command's work: full, over its quota, past the file size
limit (``ulimit -f``: EFBIG, Python ignores SIGXFSZ), failing."""
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")
"""How a Rust library (safetensors) tells an OSError in its own error's text."""


def disk_error(err: BaseException) -> OSError | None:
    """The OSError of a disk (:data:`DISK_ERRNOS`) that ``err`` is, was raised from or
    while handling (torch.save through a Python file raises a RuntimeError after it), or
    that its text tells (safetensors: "I/O error: No space left on device (os error 28)");
    None when it is none of these."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in DISK_ERRNOS:
            return err
        told = _RUST_OS_ERROR.search(str(err)) if not isinstance(err, OSError) else None
        number = int(told.group(1)) if told is not None else None
        if number in DISK_ERRNOS:
            return OSError(number, os.strerror(number))
        err = err.__cause__ or err.__context__
    return None
