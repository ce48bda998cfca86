"""Work records: what the scheduler core writes to the event log, one per piece of work."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import NamedTuple, overload

import numpy as np

NO_REWARD: object = math.nan
"""The reward field of every record without a reward: one shared object (a compiled module
that wrote ``math.nan`` into each record would make a float object per record)."""


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
    prompt_tokens: int = -1
    """Generate: context tokens per sequence the turn started from (the prompt on the first
    turn; prompt, earlier turns and observations later); -1 for other kinds."""
    longest_tokens: int = -1
    """Generate: tokens of the group's longest sample (it decides when the group ends); -1
    for other kinds."""


class RecordLog(Sequence[WorkRecord]):
    """The records of a run in the order they were made, read as :class:`WorkRecord`.

    Stored as plain tuples in WorkRecord's field order: Python's garbage collector stops
    tracking a plain tuple of strings and numbers but keeps tracking a NamedTuple, and a run
    of millions of records would otherwise make every full collection longer."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        """The records as plain tuples (WorkRecord's fields, in order)."""

    def append(self, row: tuple) -> None:
        """Add a record (a WorkRecord, or a plain tuple of its fields in order)."""
        self.rows.append(tuple(row) if isinstance(row, WorkRecord) else row)

    def columns(self) -> list:
        """Every record's value of each field, in WorkRecord's field order (a column each:
        an object array of the records' own values)."""
        if not self.rows:
            return [()] * len(WorkRecord._fields)
        # one pass over the rows (zip(*rows) takes one per field, each through every row)
        return list(np.array(self.rows, dtype=object).T)

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, index: int) -> WorkRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[WorkRecord]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [WorkRecord._make(row) for row in self.rows[index]]
        return WorkRecord._make(self.rows[index])

    def __iter__(self) -> Iterator[WorkRecord]:
        return map(WorkRecord._make, self.rows)
