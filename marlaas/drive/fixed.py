"""An executor where every kind of work takes a fixed time: for tests of the core."""

from __future__ import annotations

import heapq
from collections.abc import Callable

from marlaas.core.work import (
    INSTANT,
    AbortGeneration,
    Decision,
    EnvStep,
    Generate,
    LoadAdapter,
    SwapIn,
    Sync,
    Train,
    WorkDone,
)
from marlaas.drive.executor import Completions

DURATIONS_S = {Generate: 3.0, EnvStep: 1.0, LoadAdapter: 0.5, SwapIn: 0.5, Train: 2.0, Sync: 0.5}
"""Default duration of each kind of work [s]."""


class FixedExecutor:
    """Completes each decision after a fixed duration; Generate yields ``tokens_per_seq``
    tokens per sequence. ``outcome(decision) -> bool`` may fail work on purpose;
    ``alike(step) -> bool`` says which episodes' last environment steps end with every sample's
    reward alike (none by default)."""

    def __init__(
        self,
        durations_s: dict[type, float] | None = None,
        tokens_per_seq: int = 10,
        outcome: Callable[[Decision], bool] | None = None,
        seed: int = 0,
        alike: Callable[[EnvStep], bool] | None = None,
    ) -> None:
        self.durations_s = {**DURATIONS_S, **(durations_s or {})}
        self.tokens_per_seq = tokens_per_seq
        self.outcome = outcome
        self.alike = alike
        self.seed = seed
        self.started: list[tuple[float, Decision]] = []
        """Every decision started, with its start time [s]."""
        self._queue: list[tuple[float, int, WorkDone]] = []
        self._now = 0.0

    def now(self) -> float:
        """The clock [s]: the last completion's time, or the last ``until`` reached."""
        return self._now

    def wake(self) -> None:
        """Nothing waits for real here."""

    def start(self, decision: Decision, now: float) -> None:
        """Schedule the decision's completion (instant decisions complete now)."""
        self.started.append((now, decision))
        if isinstance(decision, AbortGeneration):
            self._abort(decision.generate, now)
            return
        if isinstance(decision, INSTANT):
            return
        ok = self.outcome(decision) if self.outcome is not None else True
        tokens = decision.seqs * self.tokens_per_seq if isinstance(decision, Generate) else 0
        alike = (
            self.alike is not None and isinstance(decision, EnvStep) and decision.last_turn
            and self.alike(decision)
        )  # fmt: skip
        done = WorkDone(decision.work_id, ok=ok, tokens=tokens if ok else 0, alike=alike)
        end = now + self.durations_s[type(decision)]
        heapq.heappush(self._queue, (end, decision.work_id, done))

    def _abort(self, work_id: int, now: float) -> None:
        """Generation ``work_id`` stops at ``now`` [s]: its completion comes back then, with
        no tokens (as every executor's: an aborted request's tokens are not returned)."""
        for i, (end, wid, done) in enumerate(self._queue):
            if wid == work_id and end > now:
                self._queue[i] = (now, wid, WorkDone(wid, done.ok, 0))
                heapq.heapify(self._queue)
                return

    def wait(self, until: float | None) -> Completions | None:
        """The earliest completion, or None when ``until`` comes first."""
        if not self._queue or (until is not None and self._queue[0][0] > until):
            if until is not None:
                self._now = max(self._now, until)
            return None
        end, _, done = heapq.heappop(self._queue)
        self._now = end
        return end, [done]
