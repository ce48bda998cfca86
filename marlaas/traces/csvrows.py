"""Reading CSV trace files row by row with their line numbers.

Blank lines and lines starting with ``#`` (provenance notes in our sample files) between
records are skipped. Fields are read by the csv module, so a quoted field may hold commas,
quotes (doubled) and line breaks; a quote left open is an error, as is a field over the csv
module's limit (131,072 characters). Column names are matched exactly after stripping spaces;
the first record is the header, and a header that names a column twice is refused (one of
the two would be dropped without a word).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from pathlib import Path

from marlaas.core.limits import MAX_ARRIVAL_S, MAX_TOKENS, MAX_VALUES
from marlaas.file_kind import file_problem
from marlaas.traces.errors import TraceError

MAX_ROWS = MAX_VALUES
"""Data rows read from one trace file; a longer file is refused (sample it first)."""
MAX_TRACE_BYTES = 256 * 1024 * 1024
"""Largest trace file read [bytes]."""


def read_rows(path: str | Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line number, {column: text})`` for each data row of a CSV file.

    Raises :class:`TraceError` when the file is missing, has no header, names a column
    twice, lacks one of the ``required`` columns, or a row has a different number of fields
    than the header.
    """
    path = checked_file(path)
    try:
        yield from _rows(path, required)
    except UnicodeDecodeError as err:
        raise TraceError(path, f"not a UTF-8 text file ({err.reason})") from None
    except csv.Error as err:
        raise TraceError(path, f"not a CSV file ({err})") from None
    except OSError as err:
        raise TraceError(path, f"cannot read it ({err.strerror})") from None


def checked_file(path: str | Path) -> Path:
    """``path`` when it is a file of at most MAX_TRACE_BYTES, else a TraceError."""
    path = Path(path)
    problem = file_problem(path, "trace")
    if problem:
        raise TraceError(path, problem)
    size = path.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise TraceError(path, f"{size:,} bytes; a trace file may have at most "
                         f"{MAX_TRACE_BYTES:,}")  # fmt: skip
    return path


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    with path.open(newline="", encoding="utf-8-sig", errors="strict") as handle:  # Excel: BOM
        lines = _RecordLines(handle)
        reader = csv.reader(lines, strict=True)
        header: list[str] | None = None
        rows = 0
        for fields in _records(reader, path, lines):
            number = lines.first
            if header is None:
                header = [f.strip() for f in fields]
                check_unique(path, number, header)
                check_required(path, number, "column", required, header)
            elif len(fields) != len(header):
                raise TraceError(
                    path, f"expected {len(header)} fields ({header[:8]}), got {len(fields)}", number
                )
            else:
                rows = counted(path, rows)
                yield number, {k: v.strip() for k, v in zip(header, fields, strict=True)}
            lines.between = True
        if header is None:
            raise TraceError(path, "empty file: no header row")


def _records(reader: Iterator[list[str]], path: Path, lines: _RecordLines):
    """The reader's records; a malformed one (a quote left open, text after a closing
    quote, a field over the limit) is a TraceError naming the line where it starts."""
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            raise TraceError(path, f"not a CSV file ({err})", lines.first) from None
        yield fields


class _RecordLines:
    """The lines of a CSV file for :func:`csv.reader`, without the blank and ``#`` lines
    between records (a quoted field's own lines are passed on as they are, blank or not);
    ``first`` is the line number where the record being read starts."""

    def __init__(self, handle: Iterator[str]) -> None:
        self.handle = handle
        self.number = 0
        self.first = 0
        self.between = True
        """Set by the caller once a record is read: the next line starts another."""

    def __iter__(self) -> _RecordLines:
        return self

    def __next__(self) -> str:
        while True:
            text = next(self.handle)
            self.number += 1
            if not self.between:
                return text
            if text.strip() and not text.lstrip().startswith("#"):
                self.between, self.first = False, self.number
                return text


def first_repeated(names: list[str]) -> str | None:
    """The first of ``names`` that appears again (a CSV header naming a column twice: a
    row's dict would keep only the last of its cells); None when each appears once."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def check_unique(path: Path, line: int, header: list[str]) -> None:
    """Raise a TraceError naming a column the ``header`` (names stripped) holds twice."""
    name = first_repeated(header)
    if name is not None:
        raise TraceError(path, f"the header names column {name[:80]!r} more than once", line)


def check_required(
    path: Path, line: int, noun: str, required: tuple[str, ...], present: list[str]
) -> None:
    """Raise a TraceError naming the ``required`` fields (``noun``: column or field) that
    ``present`` lacks."""
    missing = [c for c in required if c not in present]
    if missing:
        raise TraceError(
            path,
            f"missing {noun}(s) {missing}; expected {list(required)}, got {list(present)[:8]}",
            line,
        )


def counted(path: Path, rows: int) -> int:
    """``rows + 1``, or a TraceError when a trace has more than :data:`MAX_ROWS` rows."""
    if rows >= MAX_ROWS:
        raise TraceError(path, f"more than {MAX_ROWS:,} rows; sample the trace first")
    return rows + 1


def count(path: str | Path, line: int, column: str, text: str, high: int = MAX_TOKENS) -> int:
    """A non-negative integer count up to ``high`` (default: a token count), or a
    TraceError naming the line and column."""
    value = _float(text)
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise TraceError(
            path, f"{column}: {text[:40]!r} is not a non-negative integer (0 to {high:,})", line
        )
    if value > high:
        raise TraceError(path, f"{column}: {text[:40]!r} is more than {high:,}", line)
    return int(value)


def number(
    path: str | Path, line: int, column: str, text: str, high: float = MAX_ARRIVAL_S
) -> float:
    """A finite non-negative number up to ``high`` (default: a time [s]), or a TraceError
    naming the line and column."""
    value = _float(text)
    if not math.isfinite(value) or value < 0:
        raise TraceError(
            path, f"{column}: {text[:40]!r} is not a non-negative number (0 to {high:g})", line
        )
    if value > high:
        raise TraceError(path, f"{column}: {text[:40]!r} is more than {high:g}", line)
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except (ValueError, OverflowError):
        return math.nan
