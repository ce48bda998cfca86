"""The simulator on the wall clock, for ``marlaas serve --simulate``: a policy tried against
live traffic without a model.

:class:`RealTimeExecutor` wraps a :class:`~marlaas.sim.executor.SimPyExecutor`: simulated
work takes the time the cost model says, at ``speed`` simulated seconds per wall second, and
a tenant's submission (``wake``) is acted on when it comes. Only ``wait`` and ``now`` differ
from the simulator's (SimPy's own real-time variant differs in one method too).
"""

from __future__ import annotations

import math
import threading
import time

from marlaas.core.work import Decision
from marlaas.drive.executor import Completions
from marlaas.sim.executor import SimPyExecutor


class RealTimeExecutor:
    """``inner``'s simulated events, each when the wall clock reaches its time."""

    def __init__(self, inner: SimPyExecutor, speed: float = 1.0) -> None:
        if not (math.isfinite(speed) and speed > 0):
            raise ValueError(f"speed must be a finite number > 0, got {speed!r}")
        self.inner, self.speed, self.seed = inner, speed, inner.seed
        self._t0 = time.monotonic()
        self._woken = threading.Event()
        self._pending: list[Completions] = []
        """Completions the clock passed while catching up before a start, not yet reported."""
        self.lag_s = 0.0
        """How late the latest completion was reported [simulated s]: above a few seconds,
        this machine cannot simulate the cluster at ``speed`` (work then takes longer than
        the cost model says, and a replay of the traffic will differ)."""

    def now(self) -> float:
        """Simulated seconds since the start, at ``speed`` per wall second."""
        return (time.monotonic() - self._t0) * self.speed

    def wake(self) -> None:
        """Make a ``wait`` in progress return at once (from any thread)."""
        self._woken.set()

    def start(self, decision: Decision, now: float) -> None:
        """Start the decision's work at ``now`` [s], the simulation's clock brought there
        first (what it passed on the way is reported by the next ``wait``)."""
        while (caught := self.inner.wait(now)) is not None:
            self._pending.append(caught)
        self.inner.start(decision, now)

    def wait(self, until: float | None) -> Completions | None:
        """The next completion, once the wall clock reaches its time; None at ``until`` [s]
        or when woken."""
        while not self._pending:
            due = self.inner.next_at()
            target = due if until is None else (until if due is None else min(due, until))
            timeout = None if target is None else max(0.0, (target - self.now()) / self.speed)
            woken = self._woken.wait(timeout)
            self._woken.clear()
            now = self.now()
            caught = self.inner.wait(now if target is None else min(now, target))
            if caught is not None:
                self.lag_s = max(0.0, self.now() - caught[0])
                return caught
            if woken or (until is not None and now >= until):
                return None
        return self._pending.pop(0)
