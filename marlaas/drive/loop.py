"""``drive``: the only loop that runs a scheduler, in simulation and for real.

    decisions = scheduler.decide(now)      -> executor.start(decision, now), in order
    now, done = executor.wait(until)       -> scheduler.on_event(event, now) for each
    ... a decision round after every batch of completions, until every job is done

It wakes the scheduler for job arrivals, retries failed work (the scheduler re-queues it)
within a budget of consecutive failures per kind of work and job, stops a run that can make
no progress, tells observers (progress bars, tests) about every completion, and checks the
run's invariants before returning. The loop runs with the young generation of Python's
garbage collector collected less often (:mod:`marlaas.drive.collector`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence

from mypy_extensions import mypyc_attr

from marlaas.core.scheduler import Scheduler
from marlaas.core.work import Decision, WorkDone
from marlaas.drive.collector import fewer_collections
from marlaas.drive.executor import Executor
from marlaas.drive.invariants import check_invariants
from marlaas.drive.result import RunResult

Observer = Callable[[Decision, WorkDone, float], None]
"""Called after the scheduler took each completion: (decision, event, now [s])."""


@mypyc_attr(native_class=False)
class RunError(RuntimeError):
    """A run that cannot go on: work failed too often in a row, or nothing can progress."""


def drive(
    scheduler: Scheduler,
    executor: Executor,
    *,
    max_failures: int = 3,
    observers: Sequence[Observer] = (),
    check: bool = True,
) -> RunResult:
    """Run ``scheduler`` over ``executor`` until every job is done; see the module docstring.

    ``max_failures``: consecutive failures of one kind of work of one job before the run
    stops with :class:`RunError`. ``check``: verify the invariants of the finished run
    (marlaas.drive.invariants), raising InvariantError when one does not hold.
    """
    started = time.perf_counter()
    with fewer_collections():
        now, batches, failures = _loop(scheduler, executor, max_failures, observers)
    records = scheduler.finish(now)
    result = RunResult(
        records=records,
        makespan_s=now,
        job_finish_s={j.name: j.finish_s for j in scheduler.jobs},
        policy=scheduler.policy.name,
        settings=scheduler.mechanism.as_dict(),
        seed=executor.seed,
        wall_s=time.perf_counter() - started,
        events=batches,
        failures=failures,
    )
    if check:
        check_invariants(result, scheduler)
    return result


def _loop(
    scheduler: Scheduler,
    executor: Executor,
    max_failures: int,
    observers: Sequence[Observer],
) -> tuple[float, int, int]:
    """The loop of :func:`drive` until every job is done: (now [s], batches, failures).
    The work in flight is the scheduler's to track (instant decisions report nothing)."""
    streak: Counter[tuple[str, str]] = Counter()
    failures = batches = 0
    now = 0.0

    def decision_round() -> None:
        for decision in scheduler.decide(now):
            executor.start(decision, now)

    decision_round()
    while not scheduler.done:
        arrival = scheduler.next_arrival(now)
        if not scheduler.running and arrival is None:
            stuck = [j.name for j in scheduler.jobs if not j.done]
            raise RunError(f"the run stalled at t={now:.1f} s; unfinished: {stuck}")
        finished = executor.wait(arrival)
        if finished is None:
            if arrival is None:
                raise RunError(f"the executor reported nothing while {scheduler.running} ran")
            now = arrival if arrival > now else now  # max(now, arrival), without a call
            decision_round()
            continue
        at, events = finished
        now = at if at > now else now
        for event in events:
            decision = scheduler.on_event(event, now)
            if event.ok:
                if streak:
                    streak.pop((type(decision).__name__, decision.job), None)
            else:
                key = (type(decision).__name__, decision.job)
                failures += 1
                streak[key] += 1
                if streak[key] > max_failures:
                    raise RunError(
                        f"{key[0]} of job {decision.job!r} failed {streak[key]} times in a "
                        f"row: {event.error or 'no reason given'}"
                    )
            for observe in observers:
                observe(decision, event, now)
        batches += 1
        decision_round()
    return now, batches, failures
