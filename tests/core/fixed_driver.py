"""A minimal pure-Python driver for scheduler tests: every kind of work takes a fixed time."""

from __future__ import annotations

import heapq

from marlaas.core.scheduler import Scheduler
from marlaas.core.work import EnvStep, Generate, LoadAdapter, SwapIn, Sync, Train, WorkDone

DURATIONS_S = {Generate: 3.0, EnvStep: 1.0, LoadAdapter: 0.5, SwapIn: 0.5, Train: 2.0, Sync: 0.5}


def run_fixed(scheduler: Scheduler, tokens_per_seq: int = 10, on_decision=None) -> float:
    """Run ``scheduler`` to completion; returns the makespan [s]."""
    pending: list[tuple[float, int, object]] = []
    now = 0.0
    for _ in range(100_000):
        for decision in scheduler.decide(now):
            if on_decision is not None:
                on_decision(decision, now, scheduler)
            tokens = decision.seqs * tokens_per_seq if isinstance(decision, Generate) else 0
            done = WorkDone(decision.work_id, tokens=tokens)
            heapq.heappush(pending, (now + DURATIONS_S[type(decision)], decision.work_id, done))
        if scheduler.done:
            scheduler.finish(now)
            return now
        wake = scheduler.next_arrival(now)
        if pending and (wake is None or pending[0][0] <= wake):
            now, _, event = heapq.heappop(pending)
            scheduler.on_event(event, now)
        elif wake is not None:
            now = wake
        else:
            raise AssertionError("stalled: nothing running and nothing to start")
    raise AssertionError("did not finish")
