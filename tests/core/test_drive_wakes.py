"""A wake-up that explains itself is no executor fault: an inbox closed (or put into) while
work runs wakes the executor's ``wait``, which then answers None with the work still in
flight; the driver once took that, the inbox being closed, for an executor that reports
nothing and stopped the run with RunError. An executor that answers None without being woken
still stops the run."""

from __future__ import annotations

import pytest

from marlaas.core.workload import Workload
from marlaas.drive import FixedExecutor, RunError
from marlaas.drive.inbox import Inbox, Submit
from tests.core.fixed_driver import run_fixed
from tests.core.test_scheduler import workload


class Wakeable:
    """FixedExecutor with a real executor's ``wake``: the next ``wait`` answers None (as
    RealExecutor's and the service's RealTimeExecutor's do) instead of the next completion."""

    def __init__(self, inner: FixedExecutor, spurious: int = 0) -> None:
        self.inner, self.seed = inner, inner.seed
        self.woken = False
        self.spurious = spurious
        """Waits for work still to answer None unwoken (a faulty executor)."""

    def start(self, decision, now: float) -> None:
        self.inner.start(decision, now)

    def wait(self, until):
        if self.woken:
            self.woken = False
            return None
        if until is None and self.spurious:
            self.spurious -= 1
            return None
        return self.inner.wait(until)

    def now(self) -> float:
        return self.inner.now()

    def wake(self) -> None:
        self.woken = True


def open_inbox(work: Workload) -> Inbox:
    inbox = Inbox()
    for job in work.jobs:
        inbox.put(Submit(job), 0.0)
    return inbox


def test_closing_the_inbox_while_work_runs_lets_the_run_finish():
    work = workload(jobs=2, steps=2)
    inbox = open_inbox(work)
    executor = Wakeable(FixedExecutor())

    def close_once(decision, event, now) -> None:  # as a service's thread would, mid-run
        if not inbox.closed:
            inbox.close()

    run = run_fixed(work, "fifo", executor=executor, inbox=inbox, observers=[close_once])
    assert {o.state for o in run.result.jobs.values()} == {"finished"}


def test_an_executor_that_answers_none_unwoken_still_stops_the_run():
    work = workload(jobs=1, steps=2)
    inbox = open_inbox(work)
    inbox.close()
    executor = Wakeable(FixedExecutor(), spurious=1)
    with pytest.raises(RunError, match="the executor reported nothing while"):
        run_fixed(work, "fifo", executor=executor, inbox=inbox)
