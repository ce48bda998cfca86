"""Reading CSV trace files row by row with their line numbers.

Blank lines and lines starting with ``#`` (provenance notes in our sample files) are skipped.
Column names are matched exactly after stripping spaces; the first non-comment line is the
header.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from pathlib import Path

from marlaas.traces.errors import TraceError


def read_rows(path: str | Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line number, {column: text})`` for each data row of a CSV file.

    Raises :class:`TraceError` when the file is missing, has no header, lacks one of the
    ``required`` columns, or a row has a different number of fields than the header.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError(path, "no such trace file")
    with path.open(newline="", encoding="utf-8") as handle:
        numbered = (
            (n, text)
            for n, text in enumerate(handle, start=1)
            if text.strip() and not text.lstrip().startswith("#")
        )
        header: list[str] | None = None
        for number, text in numbered:
            fields = next(csv.reader([text]))
            if header is None:
                header = [f.strip() for f in fields]
                missing = [c for c in required if c not in header]
                if missing:
                    raise TraceError(
                        path,
                        f"missing column(s) {missing}; expected {list(required)}, got {header}",
                        number,
                    )
                continue
            if len(fields) != len(header):
                raise TraceError(
                    path, f"expected {len(header)} fields ({header}), got {len(fields)}", number
                )
            yield number, {k: v.strip() for k, v in zip(header, fields, strict=True)}
        if header is None:
            raise TraceError(path, "empty file: no header row")


def count(path: str | Path, line: int, column: str, text: str) -> int:
    """A non-negative integer token count, or a TraceError naming the line and column."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise TraceError(path, f"{column}: {text!r} is not a non-negative integer", line)
    return int(value)


def number(path: str | Path, line: int, column: str, text: str) -> float:
    """A finite non-negative number, or a TraceError naming the line and column."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise TraceError(path, f"{column}: {text!r} is not a non-negative number", line)
    return value
