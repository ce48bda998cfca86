"""``drive``: the only loop that runs a scheduler, in simulation and for real.

    items     = inbox.take(now)            -> scheduler.submit(job, now) / cancel(name, now)
    decisions = scheduler.decide(now)      -> executor.start(decision, now), in order
    now, done = executor.wait(until)       -> scheduler.on_event(event, now) for each
    ... a decision round after every batch of completions or inbox items, until the inbox
    is closed and empty and every job has ended

It wakes the scheduler for the inbox's items (a batch workload's arrivals, a service's
requests), retries failed work (the scheduler re-queues it) within a budget of consecutive
failures per piece of work (its kind, job and, for a rollout's work, group: a job's groups
that fail together, e.g. on an engine that died, are several pieces, each retried), stops a
run that can make no progress, tells observers (progress bars, tests) about every completion,
and checks the run's invariants before returning. The loop runs with the young generation
of Python's garbage collector collected less often (:mod:`marlaas.drive.collector`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

from mypy_extensions import mypyc_attr

from marlaas.core.outcomes import FINISHED, Admission, JobOutcome
from marlaas.core.scheduler import Scheduler
from marlaas.core.work import Decision, WorkDone
from marlaas.drive.collector import fewer_collections
from marlaas.drive.executor import Executor
from marlaas.drive.inbox import Cancel, Inbox, Submit
from marlaas.drive.invariants import check_invariants
from marlaas.drive.result import RunResult

Observer = Callable[[Decision, WorkDone, float], None]
"""Called after the scheduler took each completion: (decision, event, now [s])."""

OnJobFailed = Callable[[str, str], None]
"""Called with (job, reason) when a job's work failed too often in a row (it is cancelled)."""

OnEnded = Callable[[JobOutcome], None]
"""Called as each job ends: finished, cancelled, or refused (at submission, or beyond a
queue bound)."""


@mypyc_attr(native_class=False)
class RunError(RuntimeError):
    """A run that cannot go on: work failed too often in a row, or nothing can progress."""


def drive(
    scheduler: Scheduler,
    executor: Executor,
    inbox: Inbox,
    *,
    max_failures: int = 3,
    observers: Sequence[Observer] = (),
    on_ended: OnEnded | None = None,
    on_job_failed: OnJobFailed | None = None,
    check: bool = True,
) -> RunResult:
    """Run ``scheduler`` over ``executor`` with the jobs of ``inbox`` until the inbox is
    closed and empty and every job has ended, or the inbox is stopped; see the module
    docstring.

    ``max_failures``: consecutive failures of one kind of work of one job before the run
    stops with :class:`RunError`; with ``on_job_failed`` (a service), that job is cancelled
    instead, ``on_job_failed`` hears why, and the run goes on. ``on_ended`` hears of each
    job as it ends (finished, cancelled, refused). ``check``: verify the invariants of the
    finished run (marlaas.drive.invariants), raising InvariantError when one does not hold
    (not checked for a stopped run: its work in flight was left).
    """
    started = time.perf_counter()
    ended: dict[str, JobOutcome] = {}
    wakes = _Wakes(executor.wake)
    inbox.set_waker(wakes.wake)
    try:
        with fewer_collections():
            now, batches, failures = _loop(
                scheduler, executor, inbox, wakes, max_failures, observers, on_ended,
                on_job_failed, ended,
            )  # fmt: skip
    finally:
        inbox.set_waker(None)
    records = scheduler.finish(now)
    ended = dict(sorted(ended.items(), key=lambda item: (item[1].arrival_s, item[1].index)))
    result = RunResult(
        records=records,
        makespan_s=now,
        job_finish_s={name: o.end_s if o.state == FINISHED else None for name, o in ended.items()},
        policy=scheduler.policy.name,
        settings=scheduler.mechanism.as_dict(),
        seed=executor.seed,
        wall_s=time.perf_counter() - started,
        events=batches,
        failures=failures,
        jobs=ended,
    )
    if check and not inbox.stopped:
        check_invariants(result, scheduler)
    return result


@mypyc_attr(native_class=False)
class _Wakes:
    """The executor's wake-ups by the inbox (a put, a close, a stop), counted: from any
    thread, each counted before the executor hears it."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._lock = threading.Lock()
        self.count = 0

    def wake(self) -> None:
        with self._lock:
            self.count += 1
        self._wake()


def _loop(
    scheduler: Scheduler,
    executor: Executor,
    inbox: Inbox,
    wakes: _Wakes,
    max_failures: int,
    observers: Sequence[Observer],
    on_ended: OnEnded | None,
    on_job_failed: OnJobFailed | None,
    ended: dict[str, JobOutcome],
) -> tuple[float, int, int]:
    """The loop of :func:`drive`: (now [s], batches, failures). The work in flight is the
    scheduler's to track (instant decisions report nothing).

    A ``wait`` for work (no ``until``) answers None only when woken (Executor.wake), and a
    wake-up makes at most one wait answer None, though maybe a later one than the wait in
    progress when it came (a close between two waits) and maybe none (it came with a
    completion): so such answers never outnumber the inbox's wake-ups (``wakes``), and one
    more is an executor that reports nothing while work runs. (A closed inbox's wake-up was
    taken for that: closing the inbox from another thread while work ran stopped the run.)"""
    streak: Counter[tuple[str, str, int]] = Counter()
    failures = batches = 0
    unanswered = 0
    """Waits for work that answered None (each owed to a wake-up)."""
    now = 0.0
    heard: list[tuple[Callable[[Admission], None], str]] = []
    """(callback, job) of submissions whose submitter waits for the round after them."""

    def take_inbox() -> None:
        for item in inbox.take(now):
            if isinstance(item, Submit):
                scheduler.submit(item.job, now, item.version, item.index)
                if item.heard is not None:
                    heard.append((item.heard, item.job.name))
            elif isinstance(item, Cancel):
                scheduler.cancel(item.job, now)
            else:
                scheduler.set_quota(item.tenant, item.quota)

    def decision_round() -> None:
        for decision in scheduler.decide(now):
            executor.start(decision, now)
        for outcome in scheduler.take_ended():
            ended[outcome.name] = outcome
            if on_ended is not None:
                on_ended(outcome)
        if heard:
            for hear, name in heard:
                hear(_admission(scheduler, name, ended))
            heard.clear()

    take_inbox()
    decision_round()
    while (scheduler.live or not inbox.exhausted) and not inbox.stopped:
        due = inbox.next_at()
        if not scheduler.running and due is None:
            if inbox.closed and not inbox.stopped:
                stuck = sorted(j.name for j in scheduler.jobs.values())
                raise RunError(f"the run stalled at t={now:.1f} s; unfinished: {stuck}"
                               f"{_stall_hint(scheduler.policy)}")  # fmt: skip
            inbox.wait()  # nothing runs: the run waits for a tenant
            clock = executor.now()
            now = clock if clock > now else now
            take_inbox()
            decision_round()
            continue
        finished = executor.wait(None if due is None else (due if due > now else now))
        if finished is None:
            if inbox.stopped:  # woken by stop(): the run ends, its work left in flight
                break
            if due is None:
                unanswered += 1
                if unanswered > wakes.count and inbox.closed:
                    raise RunError(f"the executor reported nothing while {scheduler.running} ran")
            clock = executor.now()
            now = clock if clock > now else now  # max(now, clock), without a call
            take_inbox()
            decision_round()
            continue
        at, events = finished
        now = at if at > now else now
        take_inbox()
        for event in events:
            decision = scheduler.on_event(event, now)
            if event.ok:
                if streak:
                    streak.pop(_piece(decision), None)
            else:
                key = _piece(decision)
                failures += 1
                streak[key] += 1
                if streak[key] > max_failures:
                    reason = (
                        f"{key[0]} of job {decision.job!r} failed {streak[key]} times in a "
                        f"row: {event.error or 'no reason given'}"
                    )
                    if on_job_failed is None:
                        raise RunError(reason)
                    del streak[key]
                    if scheduler.cancel(decision.job, now) is not None:
                        on_job_failed(decision.job, reason)
            for observe in observers:
                observe(decision, event, now)
        batches += 1
        decision_round()
    return now, batches, failures


def _stall_hint(policy) -> str:
    """What a stalled run's error adds about its policy: one that ranks engines may refuse
    every engine a group fits (``engine_key`` None), and the group then waits for good (the
    error named only the unfinished jobs, not the policy that held them)."""
    if not getattr(policy, "ranks_engines", False):
        return ""
    return (f" (policy {policy.name!r} ranks engines: an engine_key of None for every engine "
            "a group fits leaves it unplaced)")  # fmt: skip


def _piece(decision) -> tuple[str, str, int]:
    """What a failure streak counts: (kind of work, job, group or -1)."""
    return type(decision).__name__, decision.job, getattr(decision, "group", -1)


def _admission(scheduler: Scheduler, name: str, ended: dict[str, JobOutcome]) -> Admission:
    """Job ``name``'s state after a decision round: live, or how it ended."""
    state = scheduler.status(name)
    if state is not None:
        return Admission(name, state)
    outcome = ended[name]
    return Admission(name, outcome.state, outcome.reason)
