"""Work records: what the scheduler core writes to the event log, one per piece of work."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, overload

from marlaas.core.record_fields import append_row

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
    """ok / failed / cancelled (work of a cancelled job, finished and discarded), or the idle
    cause for idle rows."""
    reward: float = math.nan
    prompt_tokens: int = -1
    """Generate: context tokens per sequence the turn started from (the prompt on the first
    turn; prompt, earlier turns and observations later). Train: the repeats of its groups'
    prompts the trainer did not read (0: every sample read whole). -1 for other kinds."""
    longest_tokens: int = -1
    """Generate: tokens of the group's longest sample (it decides when the group ends); -1
    for other kinds."""


class RecordLog(Sequence[WorkRecord]):
    """The records of a run in the order they were made, read as :class:`WorkRecord`.

    Stored by field: :attr:`fields` holds a list per WorkRecord field, and a record adds its
    values to them (:func:`marlaas.core.record_fields.append_row`). A record then adds no
    object that Python's garbage collector tracks, where a tuple per record stayed tracked
    until a collection of the young generation scanned it (about 1 µs per record in a run of
    a million records, whose tuples no cache holds by then); and the event log takes each
    field's list as it is."""

    def __init__(self) -> None:
        self.fields: list[list[Any]] = [[] for _ in WorkRecord._fields]
        """The records' values, a list per field in WorkRecord's field order."""

    def append(self, row: tuple) -> None:
        """Add a record (a WorkRecord, or a plain tuple of its fields in order)."""
        if len(row) != len(self.fields):
            raise ValueError(f"a record has {len(self.fields)} fields, not {len(row)}: {row!r}")
        append_row(self.fields, tuple(row))

    def columns(self) -> list[list[Any]]:
        """Every record's value of each field, in WorkRecord's field order (the lists this
        log writes to: read them, do not change them)."""
        return list(self.fields)

    def __len__(self) -> int:
        return len(self.fields[0])

    @overload
    def __getitem__(self, index: int) -> WorkRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[WorkRecord]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            rows = zip(*(field[index] for field in self.fields), strict=True)
            return [WorkRecord._make(row) for row in rows]
        return WorkRecord._make([field[index] for field in self.fields])

    def __iter__(self) -> Iterator[WorkRecord]:
        return map(WorkRecord._make, zip(*self.fields, strict=True))
