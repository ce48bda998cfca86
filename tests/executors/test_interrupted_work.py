"""A work task that the run's interrupt ends is not reported again when it is collected."""

from __future__ import annotations

import asyncio
import gc

import pytest

from marlaas.executors.real import read_interrupt


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
