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

A stopping run's closes run at once, under one deadline: those of the instances left and those
still going on in the background end within :data:`CLOSE_TIMEOUT_S` of the stop
(:meth:`Closings.finish`), each of them run to its end or its bound even when another one is
interrupted (Ctrl-C, SIGTERM, its cancellation), which goes on once they all ended.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from marlaas.bounded_wait import within
from marlaas.envs.base import Environment
from marlaas.executors.env_contract import (
    EnvTimeoutError,
    bounded,
    cancelled_here,
    env_call,
    env_name,
)
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
        closing = _close_when_made(made, spec, loop, closings)
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
    except BaseException as err:
        try:
            await close_envs(made, spec.name, spec.env.timeout_s, None)
        except BaseException as closing:  # cancelled meanwhile: Ctrl-C that came first goes on
            if _signal(err) and not _signal(closing):
                raise err from None
            raise
        raise
    return made


async def _close_when_made(
    made: asyncio.Future, spec: Any, loop: EnvLoop, closings: Closings | None
) -> None:
    """Close the environments of a making its caller gave up on (``made``: its value), once it
    ends, on ``loop``; it is waited for within the close's bound (one still making then is a
    warning: what it makes is left unclosed), and the closes are bounded too, each bound
    ending at the latest at the deadline of ``closings`` (its run's stop)."""
    until = None if closings is None else closings.until
    bound = close_bound(spec.env.timeout_s, until)
    try:
        envs = await within(asyncio.shield(made), bound)  # not wait_for: it loses a cancel
    except asyncio.TimeoutError:
        log.warning("environment %s of job %r: __init__() still running %g s after its "
                    "making was given up; what it makes is not closed", spec.env.name,
                    spec.name, bound)  # fmt: skip
        made.add_done_callback(_retrieve)
        return
    except Exception:  # it failed: it closed those it made
        return
    until = None if closings is None else closings.until
    await close_envs(envs, spec.name, spec.env.timeout_s, loop, until)


def _retrieve(future: asyncio.Future) -> None:
    """Read the outcome of a making no one waits for any more (no "exception was never
    retrieved")."""
    if not future.cancelled():
        future.exception()


def close_bound(timeout_s: float | None, until: float | None = None) -> float:
    """How long a close is waited for [s]: the job's ``env.timeout_s``, at most
    :data:`CLOSE_TIMEOUT_S`, and at most until ``until`` (a ``time.monotonic()`` deadline:
    a stopping run's, :meth:`Closings.finish`; 0 once it passed)."""
    bound = CLOSE_TIMEOUT_S if timeout_s is None else min(timeout_s, CLOSE_TIMEOUT_S)
    if until is not None:
        bound = max(0.0, min(bound, until - time.monotonic()))
    return bound


async def close_envs(
    envs: Sequence[Environment],
    job: str,
    timeout_s: float | None,
    loop: EnvLoop | None,
    until: float | None = None,
) -> int:
    """Call ``close()`` of every one of ``envs`` (``job``'s), all at once, each on ``loop``
    (the job's thread of its own; None: this loop) within ``timeout_s`` [s] (the job's
    ``env.timeout_s``), at most :data:`CLOSE_TIMEOUT_S` and at most until ``until``
    (:func:`close_bound`). A close that raises or does not return in time is a warning naming
    the environment and the job (one line for the instances that failed alike); returns how
    many failed. Every close runs to its end (or its bound) even when one is interrupted:
    Ctrl-C, SIGTERM or a cancellation that ended one goes on once they all ended, as it
    came, and so does the cancellation of this call (which cancels them), after Ctrl-C or
    SIGTERM that a close met (:func:`_first_interruption`)."""
    bound = close_bound(timeout_s, until)
    closes = [asyncio.ensure_future(_close(env, job, bound, loop)) for env in envs]
    cancelled: asyncio.CancelledError | None = None
    try:
        if closes:
            await asyncio.wait(closes)
    except asyncio.CancelledError as err:  # their values are read still: a kept Ctrl-C
        cancelled = err
        for close in closes:
            close.cancel()
        await asyncio.wait(closes)  # each ends at once (its call is given up on, not waited)
    outcomes = [_outcome(close) for close in closes]
    failed: dict[tuple[str, str], int] = {}
    for env, reason in zip(envs, outcomes, strict=True):
        if isinstance(reason, str):
            key = (env_name(env), reason)
            failed[key] = failed.get(key, 0) + 1
    for (name, reason), count in failed.items():
        each = f" ({count} of {len(envs)} instances)" if len(envs) > 1 else ""
        log.warning("environment %s of job %r: close() %s%s; the run goes on", name, job,
                    reason, each)  # fmt: skip
    interruption = _first_interruption([*outcomes, cancelled])
    if interruption is not None:
        raise interruption
    return sum(failed.values())


def _outcome(close: asyncio.Task) -> object:
    """What a :func:`_close` task ended with: its value, or a cancellation before it began."""
    if close.cancelled():
        return asyncio.CancelledError()
    return close.exception() or close.result()


def _first_interruption(outcomes: Sequence[object]) -> BaseException | None:
    """The interruption to raise of ``outcomes`` (closes' outcomes, a cancellation): the first
    Ctrl-C or SIGTERM (KeyboardInterrupt, SystemExit), else the first cancellation, else None.
    A cancellation raised in its place lost the signal (the run's stop ended as cancelled,
    or, its caller's AbortGeneration awaited, went on)."""
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    signals = [e for e in errors if _signal(e)]
    return (signals or errors or [None])[0]


def _signal(error: BaseException) -> bool:
    """Whether ``error`` is Ctrl-C or SIGTERM's (KeyboardInterrupt, Interrupted), or SystemExit."""
    return isinstance(error, KeyboardInterrupt | SystemExit)


async def _close(
    env: Environment, job: str, bound: float, loop: EnvLoop | None
) -> str | BaseException | None:
    """Why ``env``'s close failed (``raised KeyError: 'x'``, ``did not return within 2 s``);
    None when it returned; the interruption that ended it (Ctrl-C, SIGTERM, its cancellation),
    kept for :func:`close_envs` to raise once the other closes ended: raised in this task,
    asyncio would let a KeyboardInterrupt out of the event loop at once, and a gather would
    leave the other closes behind."""
    if bound <= 0:  # the run's stop deadline passed before it began (Closings.finish)
        return (f"was not called: the run's closes were given up {CLOSE_TIMEOUT_S:g} s after "
                "it stopped")  # fmt: skip
    try:
        await env_call(env, "close", env.close, job, bound, loop)
    except EnvTimeoutError:
        return f"did not return within {bound:.3g} s"
    except Exception as err:  # whatever it raised, or the contract it broke: a warning
        text = " ".join(str(err).split()) or type(err).__name__
        text = text.removeprefix(f"environment {env_name(env)}: ")
        return text.removeprefix("close() ") if text.startswith("close() ") else f"failed: {text}"
    except BaseException as interruption:  # Ctrl-C, SIGTERM, a cancellation: raised after
        return interruption
    return None


class Closings:
    """The closes going on in the background, on the run's loop; :meth:`finish` waits for
    them (the run stops)."""

    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task, str] = {}
        """Each close in the background -> its job."""
        self.until: float | None = None
        """The run's stop deadline (``time.monotonic()``, set by :meth:`finish`): no close is
        waited for past it."""
        self._interruptions: list[BaseException] = []
        """What ended closes that were interrupted (Ctrl-C, SIGTERM), for :meth:`finish`."""

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
        task = asyncio.get_running_loop().create_task(self._kept(work))
        self._tasks[task] = job
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task) -> None:
        """Done callback of a close's task: no longer among these, its error read (no "Task
        exception was never retrieved": :meth:`finish` waits for the tasks, not their
        values)."""
        self._tasks.pop(task, None)
        if not task.cancelled():
            task.exception()

    async def _kept(self, work: Coroutine[Any, Any, None]) -> None:
        """``work``; once the run is stopping (:meth:`finish`), the interruption it ends with
        is kept for :meth:`finish` to raise (raised in this task, a KeyboardInterrupt would
        leave the event loop at once, before the other closes ended). Before, it goes on at
        once (Ctrl-C stops the run), and so does this task's own cancellation, always."""
        try:
            await work
        except asyncio.CancelledError as err:
            if self.until is None or cancelled_here():
                raise
            self._interruptions.append(err)
        except Exception:
            raise
        except BaseException as err:  # Ctrl-C, SIGTERM
            if self.until is None:
                raise
            self._interruptions.append(err)

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
                await close_envs(envs, job, timeout_s, loop, self.until)
        finally:
            if then is not None:
                this = asyncio.current_task()
                earlier = [t for t, of in self._tasks.items() if of == job and t is not this]
                try:
                    if earlier:
                        await asyncio.wait(earlier)
                finally:
                    then()

    async def finish(self) -> None:
        """Wait for every close started, the run stopping, under one deadline: each ends
        within :data:`CLOSE_TIMEOUT_S` from now at the latest (:attr:`until`; the closes of
        a given-up making's instances, which wait for the making first, were the ones that
        could go on longer), the closes started now and those in the background at once.
        Then raise the first interruption a close ended with (Ctrl-C, SIGTERM, before any
        cancellation: :func:`_first_interruption`), or this call's own cancellation, which
        cuts no close short."""
        until = time.monotonic() + CLOSE_TIMEOUT_S
        self.until = until if self.until is None else min(self.until, until)
        cancelled: asyncio.CancelledError | None = None
        while self._tasks:
            try:
                await asyncio.wait(list(self._tasks))
            except asyncio.CancelledError as err:  # the closes go on to their ends first
                cancelled = err
        interruptions, self._interruptions = self._interruptions, []
        interruption = _first_interruption([*interruptions, cancelled])
        if interruption is not None:
            raise interruption
