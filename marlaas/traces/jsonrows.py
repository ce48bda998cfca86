"""Reading JSON Lines trace files (one JSON object per line) row by row with line numbers.

Blank lines are skipped, and so is a byte order mark at the start (Windows tools write one),
as in CSV files. Each requested field must be present with a number (or a string holding
one), which is passed on as text, as the CSV reader does, for the same checks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from marlaas import strict_json
from marlaas.traces.csvrows import check_required, checked_file, counted
from marlaas.traces.errors import TraceError


def read_json_rows(
    path: str | Path, required: tuple[str, ...]
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line number, {field: text})`` for each object of a JSONL file.

    Raises :class:`TraceError` when the file is missing or too big, a line is not a JSON
    object, lacks one of the ``required`` fields, or holds something other than a number there.
    """
    path = checked_file(path)
    try:
        yield from _rows(path, required)
    except UnicodeDecodeError as err:
        raise TraceError(path, f"not a UTF-8 text file ({err.reason})") from None
    except OSError as err:
        raise TraceError(path, f"cannot read it ({err.strerror})") from None


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    rows = 0
    with path.open(encoding="utf-8-sig", errors="strict") as handle:  # a BOM: as CSV
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                row = strict_json.loads(text)
            except strict_json.DuplicateKeyError as err:
                raise TraceError(path, f"a JSON object with a {err}", number) from None
            except ValueError:
                row = None
            if not isinstance(row, dict):
                raise TraceError(
                    path, f"not a JSON object; expected one per line with {list(required)}", number
                )
            check_required(path, number, "field", required, list(row))
            rows = counted(path, rows)
            yield number, {c: _text(path, number, c, row[c]) for c in required}


def _text(path: Path, line: int, field: str, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        shown = json.dumps(value)[:40]
        raise TraceError(path, f"{field}: {shown} is not a number", line)
    return str(value)
