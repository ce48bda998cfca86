"""Environment instances of a real run: made on their job's loop, and closed once, bounded.

A group's environments are made where their calls will run (:func:`new_envs`: the job's
thread of its own), within the job's ``env.timeout_s``.

An environment may hold what outlives its episode (a subprocess, a connection, a temporary
folder): :meth:`marlaas.envs.base.Environment.close` releases it. The episode runner closes an
instance once its episode is over (its group trained, given up on, or its job ended: finished,
cancelled or failed) and every instance left when the run stops (its end, Ctrl-C, SIGTERM, the
service's stop). A close is the user's code, called as the other calls are
(:func:`marlaas.executors.env_contract.env_call`: on the job's loop, checked, bounded), within the
job's ``env.timeout_s`` and at most :data:`CLOSE_TIMEOUT_S`; one that raises, or does not
return in time, is one warning naming the environment and the job, never the run's failure.
During the run the closes go on in the background (:class:`Closings`), so that a slow one
holds no tenant's work.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from marlaas.envs.base import Environment
from marlaas.executors.env_contract import EnvTimeoutError, bounded, env_call, env_name
from marlaas.executors.env_loops import EnvLoop

log = logging.getLogger("marlaas.real")

CLOSE_TIMEOUT_S = 10.0
"""The longest an environment's ``close()`` is waited for [s] (less when its job's
``env.timeout_s`` is less): a run that stops waits for its closes, and a close that hangs
must not hold it (as long as Ray's grace for a cancelled call, ENV_CANCEL_GRACE_S)."""


async def new_envs(
    make: Callable[[str, dict], Environment],
    spec: Any,
    n: int,
    loop: EnvLoop | None,
    closings: Closings | None = None,
) -> list[Environment]:
    """``n`` new environments of ``spec``'s job (a JobSpec), made by ``make``, on ``loop``
    (the job's, which runs their calls: what one binds to the running loop in its
    constructor, a client session, is bound to the loop that uses it; a slow constructor
    holds its job only) within the job's ``env.timeout_s`` as its calls are (behind a call
    that blocks the thread they would wait as long as it does); None: here, at once. When
    one cannot be made, those made before it are closed.

    A making given up (its bound passed, or this call cancelled: an AbortGeneration) is not
    interrupted on ``loop`` (a constructor cannot be): it makes no more after the one it is
    in, and those it made are closed once it ends (:func:`_close_when_made`), in the
    background of ``closings`` (a job's closes and its loop's stop come after it), else
    before this call raises."""
    if loop is None:  # made at once: nothing can give up on it midway
        return await _make(make, spec, n)
    given_up = threading.Event()
    made = asyncio.wrap_future(loop.submit(_make(make, spec, n, given_up)))
    late = f"environment {spec.env.name}: __init__() of job {spec.name!r}"
    try:
        return await bounded(asyncio.shield(made), spec.env.timeout_s, lambda: late)
    except BaseException:  # given up: what it makes is closed, not dropped with its value
        given_up.set()
        closing = _close_when_made(made, spec, loop)
        if closings is None:
            await closing
        else:
            closings.spawn(closing, spec.name)
        raise


async def _make(
    make: Callable[[str, dict], Environment],
    spec: Any,
    n: int,
    given_up: threading.Event | None = None,
) -> list[Environment]:
    """``n`` new environments of ``spec``'s job, made on the running loop (the job's); those
    made are closed there when the next cannot be made. Fewer once ``given_up`` is set (its
    caller's: those made go to :func:`_close_when_made`)."""
    made: list[Environment] = []
    try:
        for _ in range(n):
            if given_up is not None and given_up.is_set():
                break
            made.append(make(spec.env.name, spec.env.args))
    except BaseException:
        await close_envs(made, spec.name, spec.env.timeout_s, None)
        raise
    return made


async def _close_when_made(made: asyncio.Future, spec: Any, loop: EnvLoop) -> None:
    """Close the environments of a making its caller gave up on (``made``: its value), once it
    ends, on ``loop``; it is waited for within the close's bound (one still making then is a
    warning: what it makes is left unclosed)."""
    bound = close_bound(spec.env.timeout_s)
    try:
        envs = await asyncio.wait_for(asyncio.shield(made), bound)
    except asyncio.TimeoutError:
        log.warning("environment %s of job %r: __init__() still running %g s after its "
                    "making was given up; what it makes is not closed", spec.env.name,
                    spec.name, bound)  # fmt: skip
        made.add_done_callback(_retrieve)
        return
    except Exception:  # it failed: it closed those it made
        return
    await close_envs(envs, spec.name, spec.env.timeout_s, loop)


def _retrieve(future: asyncio.Future) -> None:
    """Read the outcome of a making no one waits for any more (no "exception was never
    retrieved")."""
    if not future.cancelled():
        future.exception()


def close_bound(timeout_s: float | None) -> float:
    """How long a close is waited for [s]: the job's ``env.timeout_s``, at most
    :data:`CLOSE_TIMEOUT_S`."""
    return CLOSE_TIMEOUT_S if timeout_s is None else min(timeout_s, CLOSE_TIMEOUT_S)


async def close_envs(
    envs: Sequence[Environment], job: str, timeout_s: float | None, loop: EnvLoop | None
) -> int:
    """Call ``close()`` of every one of ``envs`` (``job``'s), all at once, each on ``loop``
    (the job's thread of its own; None: this loop) within ``timeout_s`` [s] (the job's
    ``env.timeout_s``) and at most :data:`CLOSE_TIMEOUT_S`. A close that raises or does not
    return in time is a warning naming the environment and the job (one line for the
    instances that failed alike); returns how many failed. Ctrl-C, SIGTERM and the
    cancellation of this call go on as they came."""
    bound = close_bound(timeout_s)
    reasons = await asyncio.gather(*(_close(env, job, bound, loop) for env in envs))
    failed: dict[tuple[str, str], int] = {}
    for env, reason in zip(envs, reasons, strict=True):
        if reason is not None:
            key = (env_name(env), reason)
            failed[key] = failed.get(key, 0) + 1
    for (name, reason), count in failed.items():
        each = f" ({count} of {len(envs)} instances)" if len(envs) > 1 else ""
        log.warning("environment %s of job %r: close() %s%s; the run goes on", name, job,
                    reason, each)  # fmt: skip
    return sum(failed.values())


async def _close(env: Environment, job: str, bound: float, loop: EnvLoop | None) -> str | None:
    """Why ``env``'s close failed (``raised KeyError: 'x'``, ``did not return within 2 s``);
    None when it returned."""
    try:
        await env_call(env, "close", env.close, job, bound, loop)
    except EnvTimeoutError:
        return f"did not return within {bound:g} s"
    except Exception as err:  # whatever it raised, or the contract it broke: a warning
        text = " ".join(str(err).split()) or type(err).__name__
        text = text.removeprefix(f"environment {env_name(env)}: ")
        return text.removeprefix("close() ") if text.startswith("close() ") else f"failed: {text}"
    return None


class Closings:
    """The closes going on in the background, on the run's loop; :meth:`finish` waits for
    them (the run stops)."""

    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task, str] = {}
        """Each close in the background -> its job."""

    def start(
        self,
        envs: Sequence[Environment],
        job: str,
        timeout_s: float | None,
        loop: EnvLoop | None,
        then: Callable[[], None] | None = None,
    ) -> None:
        """Close ``envs`` (:func:`close_envs`) in a task of the running loop, then call
        ``then`` once the job's earlier closes ended too (e.g. stop the job's loop, which the
        closes run on). Call it on the run's loop."""
        if envs or then is not None:
            self.spawn(self._closed(envs, job, timeout_s, loop, then), job)

    def spawn(self, work: Coroutine[Any, Any, None], job: str) -> None:
        """Run ``work`` (closes of ``job``'s) in a task of the running loop, among these."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks[task] = job
        task.add_done_callback(lambda done: self._tasks.pop(done, None))

    async def _closed(
        self,
        envs: Sequence[Environment],
        job: str,
        timeout_s: float | None,
        loop: EnvLoop | None,
        then: Callable[[], None] | None,
    ) -> None:
        try:
            if envs:
                await close_envs(envs, job, timeout_s, loop)
        finally:
            if then is not None:
                this = asyncio.current_task()
                earlier = [t for t, of in self._tasks.items() if of == job and t is not this]
                if earlier:
                    await asyncio.wait(earlier)
                then()

    async def finish(self) -> None:
        """Wait for every close started (each is bounded)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
