"""Work records: what the scheduler core writes to the event log, one per piece of work."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import NamedTuple, overload

import numpy as np


class WorkRecord(NamedTuple):
    """One piece of work as it happened; the row type of the event log (see marlaas.eventlog)."""

    kind: str
    """generate, env, train, sync, adapter_load or idle."""
    tenant: str
    job: str
    device: str
    pool: str
    start_s: float
    """Start time [s]."""
    end_s: float
    """End time [s]."""
    step: int = -1
    group: int = -1
    turn: int = -1
    seqs: int = 0
    tokens: int = 0
    version: int = -1
    staleness: int = -1
    outcome: str = "ok"
    """ok / failed, or the idle cause for idle rows."""
    reward: float = math.nan


class RecordLog(Sequence[WorkRecord]):
    """The records of a run in the order they were made, read as :class:`WorkRecord`.

    The newest records are plain tuples in WorkRecord's field order; every ``CHUNK`` of them
    are packed into one array per field (numbers as numpy arrays, strings as lists of the
    shared name objects). A run of millions of records then holds no object per record:
    Python's allocator reuses the memory of the packed tuples, and the garbage collector has
    nothing per record to look at (it keeps looking at NamedTuples, and at tuples until it
    has seen them once)."""

    CHUNK = 4096
    """Records per packed chunk."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        """The newest records as plain tuples (WorkRecord's fields, in order)."""
        self._chunks: list[tuple] = []
        """Packed chunks of CHUNK records: one array or list per field."""

    def append(self, row: tuple) -> None:
        """Add a record (a WorkRecord, or a plain tuple of its 16 fields)."""
        self.rows.append(tuple(row) if isinstance(row, WorkRecord) else row)
        if len(self.rows) >= self.CHUNK:
            self._pack()

    def columns(self) -> list[list | np.ndarray]:
        """Every record's value of each field, in WorkRecord's field order."""
        rows = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(WorkRecord._fields)
        out = []
        for field, values in enumerate(rows):
            parts = [chunk[field] for chunk in self._chunks]
            if all(isinstance(part, np.ndarray) for part in parts) and parts:
                kinds = set(map(type, values))
                if not kinds or kinds == {type(parts[0][0].item())}:
                    tail = np.array(values, dtype=parts[0].dtype)
                    if all(part.dtype == tail.dtype for part in parts):
                        out.append(np.concatenate([*parts, tail]))
                        continue
            flat = [v for part in parts for v in _pythons(part)]
            out.append(flat + list(values))
        return out

    def __len__(self) -> int:
        return len(self._chunks) * self.CHUNK + len(self.rows)

    @overload
    def __getitem__(self, index: int) -> WorkRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[WorkRecord]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        packed = len(self._chunks) * self.CHUNK
        if not 0 <= index < packed + len(self.rows):
            raise IndexError("record index out of range")
        if index >= packed:
            return WorkRecord._make(self.rows[index - packed])
        chunk = self._chunks[index // self.CHUNK]
        at = index % self.CHUNK
        return WorkRecord._make(_python(column[at]) for column in chunk)

    def __iter__(self) -> Iterator[WorkRecord]:
        for chunk in self._chunks:
            yield from map(WorkRecord._make, zip(*map(_pythons, chunk), strict=True))
        yield from map(WorkRecord._make, self.rows)

    def _pack(self) -> None:
        chunk = []
        for values in zip(*self.rows, strict=True):
            kinds = set(map(type, values))
            if kinds == {int} or kinds == {float}:
                chunk.append(np.array(values, dtype=np.int64 if int in kinds else np.float64))
            else:  # strings, and anything else, as the objects they are
                chunk.append(list(values))
        self._chunks.append(tuple(chunk))
        self.rows = []


def _pythons(values: list | np.ndarray) -> list:
    """A packed field as the Python objects it was recorded as."""
    return values.tolist() if isinstance(values, np.ndarray) else values


def _python(value):
    """A packed value as the Python object it was recorded as (numbers from numpy)."""
    return value.item() if isinstance(value, np.generic) else value
