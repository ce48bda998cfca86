"""marlaas.bounded_wait.within and its users keep a cancellation that comes as the awaited work
ends: Python 3.11's asyncio.wait_for returned the work's value and lost it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from marlaas.bounded_wait import within

WAIT_S = 30.0
"""The bound of every wait of these tests [s]: none is reached unless a test fails."""


async def cancelled_as_it_ends(caller, made: asyncio.Future, value) -> str:
    """Run ``caller`` (a coroutine awaiting ``made``) until it waits, then end ``made`` and
    cancel it in the same turn of the loop; how it ended."""
    task = asyncio.ensure_future(caller)
    while not made._callbacks and not task.done():  # it waits for ``made`` (or it failed)
        await asyncio.sleep(0)
    made.set_result(value)
    task.cancel()
    try:
        await asyncio.wait_for(task, WAIT_S)  # (the test's own bound: task ended or not)
    except asyncio.CancelledError:
        return "cancelled"
    return "returned"


def test_a_cancellation_as_the_work_ends_is_raised():
    async def scenario() -> str:
        made = asyncio.get_running_loop().create_future()
        return await cancelled_as_it_ends(within(made, WAIT_S), made, "value")

    assert asyncio.run(scenario()) == "cancelled"


def test_its_value_within_its_bound_and_the_work_cancelled_past_it():
    async def scenario() -> tuple:
        value = await within(asyncio.sleep(0, "value"), WAIT_S)
        late = asyncio.ensure_future(asyncio.sleep(WAIT_S))
        with pytest.raises(asyncio.TimeoutError):
            await within(late, 0.01)
        await asyncio.sleep(0)
        return value, late.cancelled()

    assert asyncio.run(scenario()) == ("value", True)


def test_a_closer_of_a_making_given_up_is_cancelled_as_the_making_ends():
    """env_instances._close_when_made waited for the making with asyncio.wait_for: cancelled
    (the run stops) as the making ended, it went on to close what was made, its cancellation
    lost."""
    from marlaas.executors.env_instances import _close_when_made

    spec = SimpleNamespace(name="j", env=SimpleNamespace(name="e", timeout_s=WAIT_S, args={}))

    async def scenario() -> str:
        made = asyncio.get_running_loop().create_future()
        return await cancelled_as_it_ends(_close_when_made(made, spec, None, None), made, [])

    assert asyncio.run(scenario()) == "cancelled"
