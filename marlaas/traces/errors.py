"""The error every trace reader raises: it names the file and, for a bad row, its line."""

from __future__ import annotations

from pathlib import Path


class TraceError(ValueError):
    """A trace file that is missing, has the wrong columns, or holds a bad row."""

    def __init__(self, path: str | Path, message: str, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        where = f"{self.path}: line {line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")

    def __reduce__(self):
        """Pickled as its arguments (a sweep's worker sends it to the parent)."""
        return (type(self), (self.path, self.message, self.line))
