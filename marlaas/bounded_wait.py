"""A bounded wait that never loses its caller's cancellation: :func:`within`, in place of
``asyncio.wait_for``.

On Python 3.11, ``asyncio.wait_for(work, timeout)`` returns the value of a ``work`` that ended
at the moment its caller was cancelled, and the cancellation is lost: the caller goes on as
if no one had given it up (a sandbox's step its run stopped, a placement its Ctrl-C came
to). Environment calls have a bound of their own,
:func:`marlaas.executors.env_contract.bounded`, which also carries their interruptions and
names the late call.

This module imports only the standard library.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

_T = TypeVar("_T")


async def within(work: Awaitable[_T], timeout_s: float | None) -> _T:
    """The value of ``work`` within ``timeout_s`` [s] (None: unbounded), else
    asyncio.TimeoutError. ``work`` is cancelled when its bound passes and when this call is
    cancelled, and is not waited for then; a cancellation of this call is raised, even when
    ``work`` ended at the same moment (what it gave is dropped: its caller gave it up)."""
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except BaseException:  # this call cancelled, Ctrl-C
        _give_up(task)
        raise
    if not done:
        _give_up(task)
        raise asyncio.TimeoutError
    return task.result()


def _give_up(task: asyncio.Future) -> None:
    """Cancel ``task`` (nothing if it ended) and read its outcome once it ends: no one waits
    for it any more (no "exception was never retrieved")."""
    task.cancel()
    task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()
