"""Reading a prompt dataset's rows from a local file: JSONL, Parquet, CSV, or a folder that
HF ``datasets`` wrote with ``save_to_disk``. Nothing is downloaded.

Every problem is one :class:`DatasetError` line naming the file, and the row and column where
there is one (data rows count from 1, the header not counted; a JSONL file's bad JSON is
named by its line).
"""

from __future__ import annotations

import csv
import math
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

from marlaas import strict_json
from marlaas.datasets.problems import Problem
from marlaas.file_kind import not_a_file
from marlaas.traces.csvrows import first_repeated

MAX_ROWS = 1_000_000
"""Most rows one dataset may have."""
MAX_FILE_BYTES = 2 * 1024**3
"""Largest dataset file read [bytes]."""
SUFFIXES = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".csv": "csv"}
"""File name endings -> formats (a folder is a ``save_to_disk`` dataset; a ``.json`` file is
JSON lines or one array of row objects)."""


_LINE_END = re.compile(r"\r\n?|\n")
"""What ends a line of JSON lines: not str.splitlines's U+2028, U+2029 or U+0085, which JSON
holds unescaped in a string (json.dumps(..., ensure_ascii=False) writes them so)."""


_EXTRA = object()
"""The key csv.DictReader files a row's cells beyond the header under."""


class DatasetError(ValueError):
    """A dataset file that is missing, unreadable or malformed (one line: file, row, column)."""


def read_problems(path: str | Path, prompt_column: str, answer_column: str) -> list[Problem]:
    """The rows of ``path`` as problems: ``prompt_column`` and ``answer_column`` as text (a
    number answer is written as Python prints it: ``42``, ``0.5``)."""
    path = Path(path)
    rows = _read_rows(path)
    if not rows:
        raise DatasetError(f"{path}: has no rows")
    if len(rows) > MAX_ROWS:
        raise DatasetError(f"{path}: {len(rows):,} rows; at most {MAX_ROWS:,}")
    columns = set(rows[0])
    for column in (prompt_column, answer_column):
        if column not in columns:
            raise DatasetError(
                f"{path}: no column {column!r} (it has {sorted(columns)}); set the dataset's "
                "prompt_column / answer_column"
            )
    problems = []
    for i, row in enumerate(rows, start=1):
        for column in (prompt_column, answer_column):
            if column not in row:  # a JSON row without it (a CSV row short of it has None)
                raise DatasetError(
                    f"{path}: row {i}: no column {column!r} (it has {sorted(row)[:20]})"
                )
        prompt = _text(row[prompt_column], path, i, prompt_column)
        answer = _text(row[answer_column], path, i, answer_column)
        problems.append(Problem(prompt, answer, f"{path}, row {i}"))
    return problems


def _text(value: Any, path: Path, row: int, column: str) -> str:
    """A cell as non-empty text: strings as they are, finite numbers printed."""
    if isinstance(value, bool) or value is None:
        what = "empty" if value is None else "a boolean"
        raise DatasetError(f"{path}: row {row}, column {column!r}: {what}, expected text")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):  # JSON's NaN, Infinity or 1e400, Parquet's NaN
            raise DatasetError(f"{path}: row {row}, column {column!r}: {value!r}, not a "
                               "finite number, expected text")  # fmt: skip
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, Decimal):  # a Parquet decimal column: 3.00 as 3, 2.50 as 2.5
        if not value.is_finite():
            raise DatasetError(f"{path}: row {row}, column {column!r}: empty, expected text")
        return format(value.normalize(), "f")
    if not isinstance(value, str):
        raise DatasetError(f"{path}: row {row}, column {column!r}: a {type(value).__name__}, "
                           "expected text")  # fmt: skip
    if not value.strip():
        raise DatasetError(f"{path}: row {row}, column {column!r}: empty, expected text")
    bad = strict_json.lone_surrogate(value)  # a JSON escape "\ud800": no tokenizer takes it
    if bad is not None:
        raise DatasetError(f"{path}: row {row}, column {column!r}: {bad}, not Unicode text")
    return value


def _read_rows(path: Path) -> list[dict[str, Any]]:
    try:
        folder = path.is_dir()
    except OSError as err:  # a name too long for the file system, a folder it may not enter
        raise DatasetError(f"{path}: cannot look it up ({err.strerror})") from None
    if folder:
        return _read_saved(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such dataset file or folder")
    if not path.is_file():  # a device or a pipe: reading may never end
        raise DatasetError(f"{path}: {not_a_file(path, 'dataset')}, or a save_to_disk folder")
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise DatasetError(f"{path}: unknown dataset format {path.suffix!r}; use "
                           f"{sorted(SUFFIXES)} or a save_to_disk folder")  # fmt: skip
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise DatasetError(f"{path}: {size:,} bytes; at most {MAX_FILE_BYTES:,}")
    return {"jsonl": _read_jsonl, "parquet": _read_parquet, "csv": _read_csv}[kind](path)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """JSON lines, or (a ``.json`` file that starts with ``[``) one JSON array of rows."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte order mark first is not a row
    except UnicodeDecodeError as err:
        raise DatasetError(f"{path}: not UTF-8 text ({err.reason})") from None
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        return _read_json_array(path, text)
    rows = []
    for number, line in enumerate(_LINE_END.split(text), start=1):
        if not line.strip():
            continue
        try:
            row = strict_json.loads(line)
        except ValueError as err:
            raise DatasetError(f"{path}: line {number}: not valid JSON ({err})") from None
        if not isinstance(row, dict):
            raise DatasetError(f"{path}: line {number}: a JSON {type(row).__name__}, "
                               "expected an object of columns")  # fmt: skip
        rows.append(row)
    return rows


def _read_json_array(path: Path, text: str) -> list[dict[str, Any]]:
    try:
        rows = strict_json.loads(text)
    except ValueError as err:
        raise DatasetError(f"{path}: not valid JSON ({err})") from None
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise DatasetError(f"{path}: row {number}: a JSON {type(row).__name__}, "
                               "expected an object of columns")  # fmt: skip
    return rows


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return _table_rows(pq.read_table(path))
    except (pa.ArrowException, OSError) as err:
        raise DatasetError(f"{path}: not a readable Parquet file ({_one_line(err)})") from None


def _table_rows(table: Any) -> list[dict[str, Any]]:
    """The rows of an Arrow table, a float32 or float16 column's values as the numbers they
    are written as (a float32 0.1 as 0.1, not as the float64 0.10000000149011612 it holds,
    which would be the answer's text)."""
    import numpy as np
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_float32(field.type) or pa.types.is_float16(field.type):
            kind = np.float32 if pa.types.is_float32(field.type) else np.float16
            values = [None if v is None else float(str(kind(v)))
                      for v in table.column(i).to_pylist()]  # fmt: skip
            table = table.set_column(i, field.name, pa.array(values, type=pa.float64()))
    return table.to_pylist()


def _read_csv(path: Path) -> list[dict[str, Any]]:
    """Every cell as text (an answer "007" or "1/2" stays as written); a row shorter than
    the header has None in its missing columns. A header with a name twice, or a row with
    more cells than the header (an unquoted comma in a prompt), is refused: either would
    drop cells without a word."""
    reader = None
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:  # a BOM is not a column
            reader = csv.DictReader(f, restkey=_EXTRA)
            header = reader.fieldnames or []
            repeated = first_repeated(header)
            if repeated is not None:
                raise DatasetError(f"{path}: the header names column {repeated[:80]!r} "
                                   "more than once")  # fmt: skip
            rows = []
            for number, row in enumerate(reader, start=1):
                if _EXTRA in row:
                    cells = len(header) + len(row[_EXTRA])
                    raise DatasetError(
                        f"{path}: row {number}: {cells} cells, the header has {len(header)} "
                        "(quote a cell that holds a comma)"
                    )
                rows.append(row)
            return rows
    except UnicodeDecodeError as err:
        raise DatasetError(f"{path}: not UTF-8 text ({err.reason})") from None
    except csv.Error as err:  # a cell past csv's field size limit, say: where it is
        line = reader.reader.line_num if reader is not None else 0  # the csv reader's own
        where = f"line {line}: " if line else ""
        raise DatasetError(f"{path}: {where}not a readable CSV file ({_one_line(err)})") from None


def _read_saved(path: Path) -> list[dict[str, Any]]:
    """A folder ``Dataset.save_to_disk`` wrote (a DatasetDict: its ``train`` split)."""
    try:
        import datasets
    except ImportError:
        raise DatasetError(f"{path}: a save_to_disk folder needs the `datasets` package "
                           "(pip install 'marlaas[verifiers]')") from None  # fmt: skip
    try:
        data = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError, OSError) as err:
        raise DatasetError(f"{path}: not a folder that datasets' save_to_disk wrote "
                           f"({_one_line(err)})") from None  # fmt: skip
    if isinstance(data, datasets.DatasetDict):
        if "train" not in data:
            raise DatasetError(f"{path}: a DatasetDict without a 'train' split "
                               f"(it has {sorted(data)}); save the split you want")  # fmt: skip
        data = data["train"]
    return _table_rows(data.with_format("arrow")[:])  # its rows as selected, in its order


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:300]
