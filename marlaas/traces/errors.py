"""The error every trace reader raises: it names the file and, for a bad row, its line."""

from __future__ import annotations

from pathlib import Path

SHOWN_PATH_CHARS = 300
"""Characters of a path an error line shows (a longer one: its start and end, "..." between)."""


def shown_path(path: str) -> str:
    """``path`` for an error line: whole up to SHOWN_PATH_CHARS characters, else its first
    and last characters with "..." between (a path in a workload may be thousands long)."""
    if len(path) <= SHOWN_PATH_CHARS:
        return path
    return f"{path[: SHOWN_PATH_CHARS // 2]}...{path[-SHOWN_PATH_CHARS // 3 :]}"


class TraceError(ValueError):
    """A trace file that is missing, has the wrong columns, or holds a bad row."""

    def __init__(self, path: str | Path, message: str, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        shown = shown_path(self.path)
        where = f"{shown}: line {line}" if line is not None else shown
        super().__init__(f"{where}: {message}")

    def __reduce__(self):
        """Pickled as its arguments (a sweep's worker sends it to the parent)."""
        return (type(self), (self.path, self.message, self.line))
