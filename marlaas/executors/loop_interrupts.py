"""An interruption (Ctrl-C, SIGTERM) raised inside a task of the real executor's event loop,
reported once.

The signal handler raises KeyboardInterrupt (or SIGTERM's
:class:`~marlaas.interrupts.Interrupted`) in the main thread, which runs the executor's loop:
it may land inside a work task, which ends with it, and it reaches the caller through the loop.
asyncio would report it a second time, with a traceback, when the task is collected: these
keep it to the one line the caller prints.
"""

from __future__ import annotations

import asyncio


def read_interrupt(task: asyncio.Task) -> None:
    """Done callback of a work task: read the exception it ended with. ``_work`` turns every
    error into a failed WorkDone, so a work task ends with one only when the run is
    interrupted (the signal handler's KeyboardInterrupt or SystemExit, raised inside it),
    which has already reached the caller through the event loop: read here, asyncio does not
    print it again, with a traceback, as "Task exception was never retrieved" when the task
    is collected."""
    if not task.cancelled():
        task.exception()


def quiet_interrupts(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """The event loop's exception handler: an interruption (KeyboardInterrupt, SIGTERM's
    Interrupted: any exception that is not an Exception) has already reached the caller and
    been reported in one line, so it is not printed again with a traceback (a work task that
    ended with it and was collected before :func:`read_interrupt` read it); every other
    error goes to asyncio's default handler."""
    error = context.get("exception")
    if error is not None and not isinstance(error, Exception):
        return
    loop.default_exception_handler(context)
