"""The errors of an ``--out`` that cannot be written, and an OSError told in one line."""

from __future__ import annotations

import errno


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
