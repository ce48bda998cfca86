"""Run a scheduler over the fixed-duration executor, optionally watching each decision."""

from __future__ import annotations

from marlaas.core.scheduler import Scheduler
from marlaas.drive import FixedExecutor, drive


def run_fixed(scheduler: Scheduler, tokens_per_seq: int = 10, on_decision=None) -> float:
    """Drive ``scheduler`` to completion with fixed durations (invariants checked); calls
    ``on_decision(decision, now, scheduler)`` for every decision started. Returns the
    makespan [s]."""
    executor = FixedExecutor(tokens_per_seq=tokens_per_seq)
    if on_decision is not None:
        start = executor.start

        def watched(decision, now):
            on_decision(decision, now, scheduler)
            start(decision, now)

        executor.start = watched
    return drive(scheduler, executor).makespan_s
