"""The environment-call contract: how a real run calls a user's environment, and what it
accepts back.

Every call of an environment (``__init__`` through :func:`bounded`, ``reset``,
``reset_problem``, ``step``, ``close``) goes through :func:`env_call`: :func:`guarded_call`
checks that it gives a coroutine and turns what it raises into one line naming the
environment and the call (:class:`EnvCallError`; ``sys.exit`` is :class:`EnvResultError`,
Ctrl-C and SIGTERM go on as they came, a CancelledError of the environment's own is its
error, not the run's end), and the call is bounded by its job's ``env.timeout_s``
(:class:`EnvTimeoutError`), on the job's loop (:mod:`marlaas.executors.env_loops`). What it
gives back is checked before any state changes: a prompt is Unicode text
(:func:`env_reset`), a step's result a :class:`~marlaas.envs.base.StepResult` of a finite
reward within :data:`MAX_REWARD`, a text observation, a flag as ``done`` and a dict as
``info`` (:func:`checked_step`). The group episodes that make these calls are
:mod:`marlaas.executors.episodes`.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from marlaas.envs.base import Environment, StepResult
from marlaas.executors.env_loops import EnvLoop, outcome
from marlaas.import_path import one_line, shown
from marlaas.interrupts import Interrupted
from marlaas.numpy_values import is_numpy_bool
from marlaas.strict_json import lone_surrogate

MAX_REWARD = 1e100
"""The largest reward magnitude a step may give: an episode's sum of its turns' rewards, a
group's mean and the squares of GRPO's standard deviation stay finite (rewards of 1.7e308, finite,
summed to inf: the run ended in a traceback writing its journal; rewards of +-1e200 overflowed
the advantages' squares)."""


def _within(reward: numbers.Real) -> bool:
    """Whether ``reward`` is finite and at most MAX_REWARD in magnitude (an int too large for a
    float is not)."""
    try:
        value = float(reward)
    except (OverflowError, TypeError, ValueError):
        return False
    return math.isfinite(value) and abs(value) <= MAX_REWARD


class EnvResultError(TypeError):
    """An environment that broke its contract (marlaas.envs.base.Environment): a ``reset``
    that is not a coroutine or gives no text, a ``step`` that is not a coroutine or gives no
    :class:`StepResult` of a finite number as reward (at most :data:`MAX_REWARD` in magnitude),
    Unicode text as observation (a prompt too), a bool as done and a dict as info,
    or either of them raising SystemExit (``sys.exit``: an environment does not end the run).
    One line naming the environment's class and what it gave or did; the group's state is left as
    it was (a NaN reward once trained every adapter of the job into NaN weights, and an
    observation that was not text was rendered as if it were)."""


class EnvStateError(EnvResultError):
    """An environment whose state cannot be pickled, so cannot travel to or from the Ray
    actor that runs its calls (``train --ray``: marlaas.executors.ray_actors.RemoteEnv): one
    line naming the job, the environment's class, the call and what could not be pickled (it
    was Ray's TypeError, a page of its serialization checker naming neither the job nor the
    environment)."""


class EnvCallError(RuntimeError):
    """What an environment's call (``reset``, ``reset_problem``, ``step``) raised, as one line
    naming the environment's class and the call: ``environment pkg.mod:Cls: step() raised
    KeyError: 'x'`` (the run's reason once said ``EnvStep of job 'j' failed 4 times in a row:
    KeyError: 'x'``, which named neither the environment nor its call). Retried as other
    failed work."""


class EnvTimeoutError(RuntimeError):
    """An environment call (``reset``, ``step``) that did not return within its job's
    ``env.timeout_s``: one line naming the environment's class, the call, the job and the
    bound. The call is cancelled and the group's state is left as it was (a hung environment
    once hung the run for good)."""


def env_name(env: Environment) -> str:
    """``module:Class`` of the user's environment (under Ray, the one a ``RemoteEnv`` runs
    in its actors, not the proxy)."""
    name = f"{type(env).__module__}:{type(env).__qualname__}"
    if name == REMOTE_ENV:
        return env_name(env.env)
    return name


REMOTE_ENV = "marlaas.executors.ray_actors:RemoteEnv"
"""The proxy of an environment run in Ray's actors (named, not imported: Ray is optional)."""


async def guarded_call(env: Environment, method: str, call: Callable[[], Any]) -> Any:
    """Call and await ``call`` (``env.method(...)``). EnvResultError when it gives no
    awaitable (a plain ``def`` where the interface says ``async def``), or when it raises
    SystemExit (``sys.exit`` in an environment: raised out of the event loop it once ended
    the run with the environment's exit status, no message, and "Task was destroyed but it
    is pending!"). KeyboardInterrupt and SIGTERM's Interrupted go on as they came; what else
    it raises (a BaseException of the user's own too) is
    EnvCallError naming the environment and the call (one already named is raised as it
    is: a RemoteEnv's, whose actor named it)."""
    try:
        value = call()
        if not inspect.isawaitable(value):
            got = type(value).__name__
            fix = "declare it async def"
            if inspect.isasyncgen(value):  # an async def that yields: it was told to be one
                fix = "it yields: return the value instead"
            raise EnvResultError(f"environment {env_name(env)}: {method}() returned {got}, "
                                 f"not a coroutine ({fix})")  # fmt: skip
        return await value
    except SystemExit as exit_:
        raise EnvResultError(f"environment {env_name(env)}: {method}() raised "
                             f"SystemExit({shown(exit_.code)}); an environment must not end "
                             "the process (raise an exception instead)") from None  # fmt: skip
    except asyncio.CancelledError:
        if cancelled_here():
            raise  # the call itself was cancelled: given up at its bound, or its group failed
        raise _own_cancellation(
            env, method, "an inner task or call cancelled, not this call"
        ) from None
    except (EnvResultError, EnvCallError, EnvTimeoutError):
        raise
    except BaseException as exc:  # a BaseException of the user's own too (pytest.fail's)
        if isinstance(exc, KeyboardInterrupt | Interrupted | GeneratorExit):
            raise  # Ctrl-C is Ctrl-C, SIGTERM is SIGTERM
        if f"{type(env).__module__}:{type(env).__qualname__}" == REMOTE_ENV:
            raise  # its actor named what the environment raised; the rest is Ray's, named
        raise EnvCallError(f"environment {env_name(env)}: {method}() raised "
                           f"{one_line(exc)}") from exc  # fmt: skip


async def env_call(
    env: Environment,
    method: str,
    call: Callable[[], Any],
    job: str,
    timeout_s: float | None,
    loop: EnvLoop | None = None,
) -> Any:
    """The value of ``call`` (``env.method(...)``, checked by :func:`guarded_call`), within
    ``timeout_s`` [s] (None: unbounded); EnvTimeoutError naming the environment, the method,
    ``job`` and the bound when it takes longer. The late call is cancelled, not waited for
    (an environment that ignores its cancellation does not hold the run). ``loop``: the job's
    :class:`~marlaas.executors.env_loops.EnvLoop`, which runs the call in a thread of its own,
    so that one that blocks its thread holds neither this loop nor its bound (None: the call
    runs on this loop). An EnvStateError (the environment's state does not pickle for its
    Ray actor) is given the job's name."""
    try:
        return await _call_within(env, method, call, job, timeout_s, loop)
    except EnvStateError as err:  # raised by RemoteEnv, which does not know the job
        raise EnvStateError(f"job {job!r}: {err}") from None


async def _call_within(
    env: Environment,
    method: str,
    call: Callable[[], Any],
    job: str,
    timeout_s: float | None,
    loop: EnvLoop | None,
) -> Any:
    """:func:`env_call`'s call and its bound. A cancellation that comes back from the call,
    this task not being cancelled, is the environment's own (a step that cancelled the task
    it runs in): EnvCallError, as :func:`guarded_call` makes of an inner task's (it once went
    on to the run as a cancellation of the run: a traceback)."""
    work = guarded_call(env, method, call)
    work = _after_its_calls(env, work) if method == "close" else _running(env, work)
    if loop is not None:
        work = loop.call(work)
    try:
        return await bounded(work, timeout_s, lambda: f"environment {env_name(env)}: "
                             f"{method}() of job {job!r}")  # fmt: skip
    except asyncio.CancelledError:
        if cancelled_here():
            raise  # this call was cancelled: its group failed, or the run ends
        raise _own_cancellation(env, method, "it cancelled its own task, not the run") from None


_RUNNING: dict[int, set[asyncio.Task]] = {}
"""id(instance) -> the tasks of its calls running now, each on the loop that runs it (an
instance's calls all run on one loop, so each entry is read and changed by one thread only)."""


async def _running(env: Environment, work: Coroutine[Any, Any, Any]) -> Any:
    """``work`` (a call of ``env``), counted among ``env``'s calls running until it ends, on
    the loop that runs it."""
    task = asyncio.current_task()
    calls = _RUNNING.setdefault(id(env), set())
    calls.add(task)
    try:
        return await work
    finally:
        calls.discard(task)
        if not calls:
            del _RUNNING[id(env)]


async def _after_its_calls(env: Environment, work: Coroutine[Any, Any, Any]) -> Any:
    """``work`` (``env``'s close) once ``env``'s other calls running on this loop ended: a
    call given up on (its bound passed, its group failed) is cancelled on its loop, where it
    ends at its next ``await``, which may come after its caller moved on and the close was
    queued; the close runs after it, not beside it (within the close's bound)."""
    try:
        while calls := _RUNNING.get(id(env)):
            await asyncio.wait(list(calls))
    except BaseException:  # given up before it began
        work.close()
        raise
    return await work


async def bounded(work: Awaitable[Any], timeout_s: float | None, what: Callable[[], str]) -> Any:
    """The value of ``work`` within ``timeout_s`` [s] (None: unbounded); EnvTimeoutError
    ``<what()> did not return within <timeout_s> s (its env.timeout_s)`` when it takes
    longer. The late work is cancelled, not waited for.

    What ``work`` raises is raised here, in the caller's task, Ctrl-C and SIGTERM too: raised
    in the task that runs ``work``, asyncio lets a KeyboardInterrupt out of the event loop at
    once, and its caller cannot first end what it has to (a stopping run's other closes)."""
    if timeout_s is None:
        return await work
    task = asyncio.ensure_future(outcome(work))
    task.add_done_callback(_retrieve)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except BaseException:  # this call cancelled (its group failed, the run stops), Ctrl-C
        _give_up(task)
        raise
    if not done:
        _give_up(task)
        raise EnvTimeoutError(f"{what()} did not return within {timeout_s:g} s (its "
                              "env.timeout_s)")  # fmt: skip
    value, error = task.result()
    if error is not None:
        raise error
    return value


def _give_up(task: asyncio.Task) -> None:
    """Give up on ``task`` (:func:`bounded`'s work, its outcome a value): cancel it. An
    interruption it carries (Ctrl-C or SIGTERM landed in it, before or during its
    cancellation's cleanup) has no caller left to raise it: it is raised here, at once, or
    from the task's done callback once it ends, and leaves the event loop as an
    interruption raised in a task does (carried as a value no one read, it was lost: the run
    went on)."""
    if task.done():
        _raise_carried(task)
        return
    task.cancel()
    task.add_done_callback(_raise_carried)


def _raise_carried(task: asyncio.Task) -> None:
    """Raise the interruption (KeyboardInterrupt, SIGTERM's Interrupted, SystemExit) that
    ``task``, a given-up :func:`outcome`, ended with as its value; nothing otherwise (its
    value or error is no one's: the call was given up on). Raised in a done callback, it
    leaves the event loop (asyncio lets these two out of a callback)."""
    if task.cancelled() or task.exception() is not None:
        return
    _, error = task.result()
    if isinstance(error, KeyboardInterrupt | SystemExit):
        raise error


def _retrieve(task: asyncio.Task) -> None:
    """Done callback of an environment call's task: its exception read, so that a call given
    up on (timed out, or its group failed first) is not reported again by asyncio as "Task
    exception was never retrieved"."""
    if not task.cancelled():
        task.exception()


async def env_reset(
    env: Environment, method: str, call: Callable[[], Any], job: str,
    timeout_s: float | None = None, loop: EnvLoop | None = None,
) -> str:  # fmt: skip
    """The prompt text of ``env``'s ``reset`` / ``reset_problem`` (``method``, called by
    ``call``), within ``timeout_s`` (:func:`env_call`, on ``loop``), checked."""
    prompt = await env_call(env, method, call, job, timeout_s, loop)
    if not isinstance(prompt, str):
        got = f"{type(prompt).__name__} {shown(prompt)}"
        raise EnvResultError(f"environment {env_name(env)}: {method}() returned {got}, not "
                             "the prompt text")  # fmt: skip
    bad = lone_surrogate(prompt)
    if bad is not None:
        raise EnvResultError(f"environment {env_name(env)}: {method}() returned a prompt "
                             f"that is not Unicode text ({bad})")  # fmt: skip
    return prompt


def _own_cancellation(env: Environment, method: str, what: str) -> EnvCallError:
    """The error for a CancelledError an environment's call raised while this task was not
    cancelled (:func:`cancelled_here`): the environment's own, ``what`` saying whose."""
    return EnvCallError(f"environment {env_name(env)}: {method}() raised CancelledError of "
                        f"its own ({what})")  # fmt: skip


def cancelled_here() -> bool:
    """Whether the task running now was asked to cancel (a CancelledError an environment's
    call raised is then the call's own cancellation). An environment's own CancelledError (a
    task of its own that it awaited was cancelled) once ended the run in a traceback. Python
    3.10 cannot tell them apart: there, every CancelledError is the call's."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return task is None or cancelling is None or cancelling() > 0


def _is_flag(done: object) -> bool:
    """Whether ``done`` (or ``info["correct"]``) is a flag: a bool (numpy's too), or a
    number 0 or 1 of any kind (``float(ok)``, a numpy float: as ``bool`` reads it); a string
    such as ``"no"`` is not (true as a flag, it ended every episode, and counted as correct
    in ``evaluate``), nor a partial score such as 0.3."""
    if isinstance(done, bool) or is_numpy_bool(done):
        return True
    return isinstance(done, numbers.Real) and done in (0, 1)


def checked_step(env: Environment, result: Any) -> StepResult:
    """``result`` of ``env.step`` when it is a StepResult of a finite real reward, a text
    observation and a dict info; else EnvResultError naming the environment and the field."""
    where = f"environment {env_name(env)}: step()"
    if not isinstance(result, StepResult):
        raise EnvResultError(f"{where} returned {type(result).__name__} {shown(result)}, "
                             "not a StepResult")  # fmt: skip
    reward = result.reward
    if not (isinstance(reward, numbers.Real) and _within(reward)):
        raise EnvResultError(f"{where} returned the reward {type(reward).__name__} "
                             f"{shown(reward)}; a reward is a finite number from "
                             f"-{MAX_REWARD:g} to {MAX_REWARD:g}")  # fmt: skip
    if not isinstance(result.observation, str):
        raise EnvResultError(f"{where} returned the observation "
                             f"{type(result.observation).__name__} {shown(result.observation)}, "
                             "not text")  # fmt: skip
    bad = lone_surrogate(result.observation)
    if bad is not None:
        raise EnvResultError(f"{where} returned an observation that is not Unicode text "
                             f"({bad})")  # fmt: skip
    if not _is_flag(result.done):
        raise EnvResultError(f"{where} returned done {type(result.done).__name__} "
                             f"{shown(result.done)}, not True or False")  # fmt: skip
    if not isinstance(result.info, Mapping):
        raise EnvResultError(f"{where} returned the info {type(result.info).__name__}, "
                             "not a dict")  # fmt: skip
    if result.info.get("correct") is not None and not _is_flag(result.info["correct"]):
        correct = result.info["correct"]
        raise EnvResultError(f"{where} returned info['correct'] {type(correct).__name__} "
                             f"{shown(correct)}, not True or False (evaluate counts it as "
                             "the answer's verdict)")  # fmt: skip
    return result
