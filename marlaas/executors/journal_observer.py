"""The observer that keeps a run's journal: records after every completion, and each
training step made durable once its Sync (adapter and optimizer state in the store) is done.

A real executor reports each step's reward point (``rewards``) and prunes old optimizer
states (``trainers``); a simulated one (a service's ``--simulate``) has neither, and a
step's point then carries its staleness and no reward."""

from __future__ import annotations

import math
import time

from marlaas.core.scheduler import Scheduler
from marlaas.core.work import Decision, Sync, WorkDone
from marlaas.executors.episode_runner import RewardPoint
from marlaas.executors.journal import Journal


class JournalObserver:
    """A drive() observer appending the run's progress to ``journal`` (see its module)."""

    def __init__(self, scheduler: Scheduler, executor, journal: Journal) -> None:
        self.scheduler, self.executor, self.journal = scheduler, executor, journal
        self._records = self._points = 0
        self._pending: dict[tuple[str, int], object] = {}
        self._started = time.perf_counter()
        self.batches = self.failures = 0

    def __call__(self, decision: Decision, event: WorkDone, now: float) -> None:
        self._flush_records()
        points = getattr(self.executor, "rewards", ())
        for point in points[self._points :]:
            self._pending[(point.job, point.step)] = point
        self._points = len(points)
        self.batches += 1
        self.failures += not event.ok
        if isinstance(decision, Sync) and event.ok:
            version = decision.version
            point = self._pending.pop((decision.job, version - 1), None)
            if point is None:  # simulated: no reward
                point = self._simulated_point(decision.job, version - 1, now)
            wall_s = time.perf_counter() - self._started
            self.journal.step(point, wall_s, self.batches, self.failures)
            trainers = getattr(self.executor, "trainers", None)
            if trainers is not None:
                trainers.prune_optimizers(decision.job, version)

    def finish(self, records) -> None:
        """Journal the records the run's end added (idle intervals closed at its end)."""
        self.journal.records(list(records[self._records :]))
        self._records = len(records)

    def _simulated_point(self, job: str, step: int, now: float) -> RewardPoint:
        """A simulated step's point: its training record's staleness, no reward."""
        state = self.scheduler.job(job)
        staleness = 0
        for record in reversed(self.scheduler.records):
            if record.kind == "train" and record.job == job:
                staleness = max(record.staleness, 0)
                break
        nan = math.nan
        return RewardPoint(job, state.tenant, step, nan, now, staleness, state.max_staleness,
                           nan, nan, nan, 0)  # fmt: skip

    def _flush_records(self) -> None:
        records = self.scheduler.records
        self.journal.records(records[self._records :])
        self._records = len(records)
