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
    make: Callable[[str, dict], Environment], spec: Any, n: int, loop: EnvLoop | None
) -> list[Environment]:
    """``n`` new environments of ``spec``'s job (a JobSpec), made by ``make``, on ``loop``
    (the job's, which runs their calls: what one binds to the running loop in its
    constructor, a client session, is bound to the loop that uses it; a slow constructor
    holds its job only) within the job's ``env.timeout_s`` as its calls are (behind a call
    that blocks the thread they would wait as long as it does); None: here, at once. When
    one cannot be made, those made before it are closed."""
    if loop is None:
        return await _make(make, spec, n)
    late = f"environment {spec.env.name}: __init__() of job {spec.name!r}"
    return await bounded(loop.call(_make(make, spec, n)), spec.env.timeout_s, lambda: late)


async def _make(make: Callable[[str, dict], Environment], spec: Any, n: int) -> list[Environment]:
    """``n`` new environments of ``spec``'s job, made on the running loop (the job's); those
    made are closed there when the next cannot be made."""
    made: list[Environment] = []
    try:
        for _ in range(n):
            made.append(make(spec.env.name, spec.env.args))
    except BaseException:
        await close_envs(made, spec.name, spec.env.timeout_s, None)
        raise
    return made


async def close_envs(
    envs: Sequence[Environment], job: str, timeout_s: float | None, loop: EnvLoop | None
) -> int:
    """Call ``close()`` of every one of ``envs`` (``job``'s), all at once, each on ``loop``
    (the job's thread of its own; None: this loop) within ``timeout_s`` [s] (the job's
    ``env.timeout_s``) and at most :data:`CLOSE_TIMEOUT_S`. A close that raises or does not
    return in time is a warning naming the environment and the job (one line for the
    instances that failed alike); returns how many failed. Ctrl-C, SIGTERM and the
    cancellation of this call go on as they came."""
    bound = CLOSE_TIMEOUT_S if timeout_s is None else min(timeout_s, CLOSE_TIMEOUT_S)
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
            self._spawn(self._closed(envs, job, timeout_s, loop, then), job)

    def _spawn(self, work: Coroutine[Any, Any, None], job: str) -> None:
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
