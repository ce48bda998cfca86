"""Run a workload over the fixed-duration executor, optionally watching each decision."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from marlaas.core.jobs import JobState
from marlaas.core.policies import Policy
from marlaas.core.scheduler import Scheduler
from marlaas.core.work import AdmitJob
from marlaas.core.workload import Workload
from marlaas.drive import FixedExecutor, RunResult, drive
from marlaas.drive.inbox import Inbox, workload_inbox


@dataclass
class Run:
    """A finished run: its result, its scheduler and executor, and each job's last state."""

    result: RunResult
    scheduler: Scheduler
    executor: FixedExecutor
    states: dict[str, JobState] = field(default_factory=dict)
    """Each admitted job's state object, kept here (the scheduler forgets ended jobs)."""

    @property
    def records(self):
        return self.scheduler.records


def rows(records) -> list[str]:
    """Records as comparable text (a NaN reward equals itself), in order."""
    return [repr(tuple(record)) for record in records]


class Watched:
    """An executor that tells ``on_start(decision, now)`` of every decision before starting
    it (compiled executors' methods cannot be replaced on the instance)."""

    def __init__(self, inner, on_start) -> None:
        self.inner, self.on_start, self.seed = inner, on_start, inner.seed

    def start(self, decision, now: float) -> None:
        self.on_start(decision, now)
        self.inner.start(decision, now)

    def wait(self, until):
        return self.inner.wait(until)

    def now(self) -> float:
        return self.inner.now()

    def wake(self) -> None:
        self.inner.wake()


def keep_states(scheduler: Scheduler, executor, states: dict[str, JobState]) -> None:
    """Make ``executor.start`` note each admitted job's state object in ``states``."""
    start = executor.start

    def start_and_keep(decision, now):
        if isinstance(decision, AdmitJob):
            states[decision.job] = scheduler.job(decision.job)
        start(decision, now)

    executor.start = start_and_keep


def run_fixed(
    workload: Workload,
    policy: Policy | str | None = None,
    *,
    tokens_per_seq: int = 10,
    on_decision=None,
    executor: FixedExecutor | None = None,
    inbox: Inbox | None = None,
    max_failures: int = 3,
    observers: Sequence = (),
    check: bool = True,
) -> Run:
    """Drive ``workload``'s jobs (``inbox``: others) to the end with fixed durations
    (invariants checked); calls ``on_decision(decision, now, scheduler)`` for every decision
    started."""
    scheduler = Scheduler.for_workload(workload, policy)
    executor = executor or FixedExecutor(tokens_per_seq=tokens_per_seq)
    if on_decision is not None:
        start = executor.start

        def watched(decision, now):
            on_decision(decision, now, scheduler)
            start(decision, now)

        executor.start = watched
    states: dict[str, JobState] = {}
    keep_states(scheduler, executor, states)
    result = drive(
        scheduler, executor, inbox or workload_inbox(workload), max_failures=max_failures,
        observers=observers, check=check,
    )  # fmt: skip
    return Run(result, scheduler, executor, states)
