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
    clock reaches ``until`` [s] with nothing finished (``until=None``: wait for work). Times
    never go backwards. ``seed`` is the seed of the executor's randomness.
    """

    seed: int

    def start(self, decision: Decision, now: float) -> None:
        """Begin the work of ``decision`` at ``now`` [s]."""

    def wait(self, until: float | None) -> Completions | None:
        """The next finished work, or None when ``until`` [s] comes first."""
