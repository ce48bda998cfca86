"""The observer that keeps a real run's journal: records after every completion, and each
training step made durable once its Sync (adapter and optimizer state in the store) is done."""

from __future__ import annotations

import time

from marlaas.core.scheduler import Scheduler
from marlaas.core.work import Decision, Sync, WorkDone
from marlaas.executors.journal import Journal
from marlaas.executors.local import LocalExecutor


class JournalObserver:
    """A drive() observer appending the run's progress to ``journal`` (see its module)."""

    def __init__(self, scheduler: Scheduler, executor: LocalExecutor, journal: Journal) -> None:
        self.scheduler, self.executor, self.journal = scheduler, executor, journal
        self._records = self._points = 0
        self._pending: dict[tuple[str, int], object] = {}
        self._started = time.perf_counter()
        self.batches = self.failures = 0

    def __call__(self, decision: Decision, event: WorkDone, now: float) -> None:
        self._flush_records()
        points = self.executor.rewards
        for point in points[self._points :]:
            self._pending[(point.job, point.step)] = point
        self._points = len(points)
        self.batches += 1
        self.failures += not event.ok
        if isinstance(decision, Sync) and event.ok:
            version = decision.version
            point = self._pending.pop((decision.job, version - 1))
            wall_s = time.perf_counter() - self._started
            self.journal.step(point, wall_s, self.batches, self.failures)
            self.executor.trainers.prune_optimizers(decision.job, version)

    def finish(self, records) -> None:
        """Journal the records the run's end added (idle intervals closed at its end)."""
        self.journal.records(list(records[self._records :]))
        self._records = len(records)

    def _flush_records(self) -> None:
        records = self.scheduler.records
        self.journal.records(records[self._records :])
        self._records = len(records)
