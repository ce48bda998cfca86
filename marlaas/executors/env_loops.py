"""Each job's environment calls on an asyncio event loop in a thread of its own.

A real run in process (:class:`marlaas.executors.local.LocalBackends`) has one event loop,
which drives every job's generation, training and environment calls (under the service, on its
driver thread, beside the HTTP API's). An environment is the user's code: a ``step`` that
blocks its thread (``time.sleep`` or a blocking socket read inside ``async def``) would block
that loop, so that no ``env.timeout_s`` could fire and every other tenant stopped with it. Here
each job's environments run on an :class:`EnvLoop` of their own (a daemon thread, built at the
job's first environment call: :class:`EnvLoops`); the run loop awaits each call across threads,
within the job's bound, and stays free meanwhile. A call given up on is cancelled on its loop
(an ``await`` sees it; a thread blocked in ``time.sleep`` or C does not, and runs on until its
call returns, holding its own job's later calls, never another job's). The thread is a daemon,
so that one stuck in a user's call never keeps the process from exiting.

One environment instance is always called from the same loop (its job's), so objects it binds
to a loop (a client session, a subprocess transport) stay valid across its calls. Under Ray
(:class:`marlaas.executors.ray_actors.EnvPool`) the calls run in actors and the run loop only
awaits them: no thread is needed there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Coroutine
from typing import Any

log = logging.getLogger("marlaas.real")

STOP_GRACE_S = 5.0
"""How long a stopping loop gives its cancelled calls to end (e.g. a sandbox killing its
processes) before the loop ends without them [s]."""


class EnvLoop:
    """An asyncio event loop run by a daemon thread (``name``), started at once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
        """Run ``coro`` on this loop, to its end (its caller's cancellation does not reach
        it): its outcome, a future of any thread."""
        if self._stopping:
            coro.close()
            raise RuntimeError(f"{self.name}: the environment loop was stopped")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """The value of ``coro``, run on this loop, awaited from the caller's loop. Cancelling
        the caller cancels ``coro`` on this loop; what ``coro`` raises is raised here."""
        if self._stopping:
            coro.close()
            raise RuntimeError(f"{self.name}: the environment loop was stopped")
        future = asyncio.run_coroutine_threadsafe(outcome(coro), self.loop)
        value, error = await asyncio.wrap_future(future)
        if error is not None:
            raise error
        return value

    def stop(self) -> None:
        """End the loop and its thread: what still runs on it is cancelled and given
        ``STOP_GRACE_S`` to end. Does not wait (a thread blocked in a user's call ends only
        once that call returns)."""
        if self._stopping:
            return
        self._stopping = True
        with contextlib.suppress(RuntimeError):  # closed already: its thread ended
            self.loop.call_soon_threadsafe(self.loop.create_task, self._drain())

    async def _drain(self) -> None:
        this = asyncio.current_task()
        tasks = [task for task in asyncio.all_tasks() if task is not this]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_GRACE_S)
        asyncio.get_running_loop().stop()

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait up to ``timeout_s`` [s] for the thread to end (after :meth:`stop`); whether it
        did."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


async def outcome(work: Awaitable[Any]) -> tuple[Any, BaseException | None]:
    """(value, None) or (None, what ``work`` raised), for its caller to raise in its own task
    (on its own loop): the error travels back as a value, so that a call given up on whose
    cancellation ends in an error is not logged on its loop as "exception was never
    retrieved", and a KeyboardInterrupt (Ctrl-C, SIGTERM) does not leave the event loop from
    the task that runs ``work`` before its caller sees it. Its cancellation is raised as it
    came."""
    try:
        return await work, None
    except asyncio.CancelledError:
        raise
    except BaseException as err:  # raised again by the caller
        return None, err


class EnvLoops:
    """The :class:`EnvLoop` of each job whose environments were used, built at first use."""

    def __init__(self) -> None:
        self._loops: dict[str, EnvLoop] = {}

    def of(self, job: str) -> EnvLoop:
        """``job``'s loop (started now if it has none)."""
        loop = self._loops.get(job)
        if loop is None:
            loop = self._loops[job] = EnvLoop(f"marlaas-env-{job}")
        return loop

    def running(self, job: str) -> EnvLoop | None:
        """``job``'s loop, if it has one (none is started)."""
        return self._loops.get(job)

    def detach(self, job: str) -> EnvLoop | None:
        """``job``'s loop, if it has one, no longer among these (its caller stops it once the
        job's environments are closed); a later :meth:`of` starts a new one."""
        return self._loops.pop(job, None)

    def release(self, job: str) -> None:
        """``job`` ended: stop its loop, if it has one (not waited for)."""
        loop = self._loops.pop(job, None)
        if loop is not None:
            loop.stop()

    def close(self, ended: str = "run", timeout_s: float = STOP_GRACE_S + 1.0) -> list[str]:
        """Stop every loop and wait up to ``timeout_s`` [s] in all for their threads; the
        names of those still running (a call blocking its thread: a daemon, left behind),
        named in a warning at the end of the ``ended`` (a run, an evaluation)."""
        loops, self._loops = list(self._loops.values()), {}
        for loop in loops:
            loop.stop()
        deadline = time.monotonic() + timeout_s
        left = [loop for loop in loops if not loop.join(max(0.0, deadline - time.monotonic()))]
        stuck = [loop.name for loop in left]
        if stuck:
            log.warning("environment threads still blocked in a call at the end of the %s, "
                        "left behind: %s", ended, ", ".join(stuck))  # fmt: skip
        return stuck
