"""Ctrl-C and SIGTERM carried as a value (marlaas.executors.env_loops.outcome) always reach
the run: an interruption that lands in an environment call given up on, whose caller has
moved on (its bound passed, or it was cancelled), was the result of a task no one read, and the
run went on (before the value, asyncio let it out of the event loop from that task). Counted in
loop iterations, not timed."""

from __future__ import annotations

import asyncio

import pytest

from marlaas.executors.env_contract import EnvTimeoutError, bounded
from marlaas.interrupts import Interrupted


async def interrupted_as_cancelled(started: asyncio.Event, ended: asyncio.Event, exc) -> None:
    """A call that runs until cancelled, and whose cleanup then meets the signal's exception
    (the handler raises it in whatever the main thread runs: here, this call's cleanup)."""
    started.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        ended.set()
        raise exc from None


async def a_few_turns() -> None:
    """Let the loop run the callbacks of what just ended (no time waited)."""
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), Interrupted(15)], ids=["SIGINT", "SIGTERM"])
def test_an_interruption_in_a_call_given_up_at_its_bound_ends_the_loop(exc):
    async def run() -> str:
        started, ended = asyncio.Event(), asyncio.Event()
        with pytest.raises(EnvTimeoutError):
            await bounded(interrupted_as_cancelled(started, ended, exc), 0.01, lambda: "step()")
        await ended.wait()
        await a_few_turns()
        return "the run went on"

    with pytest.raises(type(exc)):
        asyncio.run(run())


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), Interrupted(15)], ids=["SIGINT", "SIGTERM"])
def test_an_interruption_in_a_call_whose_caller_was_cancelled_ends_the_loop(exc):
    async def run() -> str:
        started, ended = asyncio.Event(), asyncio.Event()
        work = interrupted_as_cancelled(started, ended, exc)
        caller = asyncio.ensure_future(bounded(work, 3600, lambda: "step()"))
        await started.wait()
        caller.cancel()  # its group failed, or an AbortGeneration
        with pytest.raises(asyncio.CancelledError):
            await caller
        await ended.wait()
        await a_few_turns()
        return "the run went on"

    with pytest.raises(type(exc)):
        asyncio.run(run())
