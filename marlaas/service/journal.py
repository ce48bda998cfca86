"""A run's journal in the job store: what :class:`marlaas.executors.journal.Journal` writes
to a file, as rows. Event-log rows wait in memory until the next durable step (or the end)
writes them in the step's transaction: a step counts with every row before it."""

from __future__ import annotations

from dataclasses import asdict

from marlaas.core.records import WorkRecord
from marlaas.executors.episode_runner import RewardPoint
from marlaas.executors.journal import json_values
from marlaas.service.store import JobStore

FLUSH_ROWS = 5000
"""Rows kept in memory at most before they are written without a step."""


class StoreJournal:
    """Appends part ``part`` of the service's run (its clock ``offset_s`` [s] late) to
    ``store``; the interface of marlaas.executors.journal.Journal."""

    def __init__(self, store: JobStore, part: int, offset_s: float) -> None:
        self.store, self.part, self.offset_s = store, part, offset_s
        self._rows: list[dict] = []

    def records(self, records: list[WorkRecord]) -> None:
        """Keep work records (part-local times; shifted here) for the next step."""
        shift = self.offset_s
        for record in records:
            row = record._asdict()
            row["start_s"] += shift
            row["end_s"] += shift
            self._rows.append(row)
        if len(self._rows) >= FLUSH_ROWS:
            self._flush()

    def step(self, point: RewardPoint, wall_s: float, batches: int, failures: int) -> None:
        """A step is durable: its point (time shifted) with the rows so far, in one commit."""
        body = json_values(asdict(point))
        body["time_s"] = point.time_s + self.offset_s
        rows, self._rows = self._rows, []
        self.store.step_done(int(point.job[1:]), body, rows, self.part)

    def close(self) -> None:
        """Write the rows left."""
        self._flush()

    def _flush(self) -> None:
        rows, self._rows = self._rows, []
        if rows:
            self.store.add_records(rows, self.part)
