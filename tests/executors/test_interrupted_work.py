"""A work task that the run's interrupt ends is not reported again when it is collected."""

from __future__ import annotations

import asyncio
import gc

import pytest

from marlaas.executors.loop_interrupts import quiet_interrupts, read_interrupt


def _reports_after_an_interrupted_task(callback) -> list[str]:
    """What asyncio's exception handler hears when a task that ended with the interrupt
    (raised inside it, as the signal handler does) is collected after the loop stopped."""
    loop = asyncio.new_event_loop()
    heard: list[str] = []
    loop.set_exception_handler(lambda _loop, context: heard.append(context["message"]))

    async def interrupted() -> None:
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    task = loop.create_task(interrupted())
    if callback is not None:
        task.add_done_callback(callback)
    with pytest.raises(KeyboardInterrupt):  # the interrupt reaches the caller of the loop
        loop.run_until_complete(asyncio.sleep(1.0))
    loop.run_until_complete(asyncio.sleep(0))  # as the executor's close runs the loop again
    del task
    gc.collect()
    loop.close()
    return heard


def test_an_interrupted_work_task_is_read_so_no_second_traceback_is_printed():
    assert _reports_after_an_interrupted_task(None) == ["Task exception was never retrieved"]
    assert _reports_after_an_interrupted_task(read_interrupt) == []


def test_an_interrupted_task_collected_before_its_callback_ran_is_not_printed_either():
    """If the loop never runs again before the task is collected, the callback cannot read
    it: the executor's exception handler drops the interruption, and passes real errors on."""
    loop = asyncio.new_event_loop()
    passed_on: list[str] = []
    loop.default_exception_handler = lambda context: passed_on.append(context["message"])
    heard: list[str] = []

    def handler(loop, context) -> None:
        heard.append(type(context.get("exception")).__name__)
        quiet_interrupts(loop, context)

    loop.set_exception_handler(handler)

    async def interrupted() -> None:
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    task = loop.create_task(interrupted())
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(asyncio.sleep(1.0))
    del task
    gc.collect()
    assert heard == ["KeyboardInterrupt"]  # asyncio reported it: "never retrieved"
    assert passed_on == []  # and the executor's handler dropped it
    loop.call_exception_handler({"message": "boom", "exception": ValueError("boom")})
    loop.call_exception_handler({"message": "no exception at all"})
    assert passed_on == ["boom", "no exception at all"]
    assert heard[1:] == ["ValueError", "NoneType"]
    loop.close()
