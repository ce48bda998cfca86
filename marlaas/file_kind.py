"""Why a path that should be a regular file is not one: a folder, a device or a pipe, or
nothing (one phrase for every file marlaas reads: workloads, cost profiles, traces, datasets)."""

from __future__ import annotations

from pathlib import Path


def not_a_file(path: Path, what: str) -> str:
    """Why ``path``, which is not a regular file, cannot be read as a ``what`` file."""
    if path.is_dir():
        return f"is a folder, not a {what} file"
    if path.exists():  # a device, a named pipe, a socket: reading may never end
        return f"not a regular file (a device or a pipe?); give a {what} file"
    return f"no such {what} file"


def file_problem(path: Path, what: str) -> str | None:
    """Why ``path`` cannot be read as a ``what`` file (:func:`not_a_file`), or None when it is
    a regular file. A path the file system refuses to look up (a name longer than it allows,
    a folder it may not enter) is such a reason too, not an OSError: pathlib's checks raise
    one for those."""
    try:
        return None if path.is_file() else not_a_file(path, what)
    except OSError as err:
        return f"cannot look it up ({err.strerror or type(err).__name__})"
