"""What the driver loop needs of a world: start work, and say when some of it is done."""

from __future__ import annotations

from typing import Protocol

from marlaas.core.work import Decision, WorkDone

Completions = tuple[float, list[WorkDone]]
"""Work that finished at one time [s since the run's start], in the order to report it."""


class Executor(Protocol):
    """A world that enacts the scheduler's decisions, each exactly as decided.

    ``start`` begins a decision's work at ``now`` (instant decisions, see
    marlaas.core.work.INSTANT, are complete when it returns); ``wait`` blocks until some
    started work finishes and returns it with its finishing time, or returns None once the
    clock reaches ``until`` [s] with nothing finished (``until=None``: wait for work), or
    as soon as ``wake`` is called (from any thread: the driver's inbox calls it when a
    tenant submits or cancels). ``now`` is the executor's clock [s]; times never go
    backwards. ``seed`` is the seed of the executor's randomness.
    """

    seed: int

    def now(self) -> float:
        """The executor's clock [s since the run's start]."""

    def wake(self) -> None:
        """Make a ``wait`` in progress on a real clock return at once (or the next one, if
        none is); safe from any thread. A simulated clock waits for nothing real: the driver
        reads the inbox before each ``wait``, so its executor does nothing here."""

    def start(self, decision: Decision, now: float) -> None:
        """Begin the work of ``decision`` at ``now`` [s]."""

    def wait(self, until: float | None) -> Completions | None:
        """The next finished work, or None when ``until`` [s] comes first."""
