"""The Ray actors of a real run and the thin forwarders the executor calls them through.

An actor holds one backend object (an engine's generator, a trainer) and runs any of its
methods by name (``call``); a forwarder has the object's methods and sends each to the actor
(SkyRL's ``RayWrappedInferenceEngine`` idea), so the executor cannot tell it from the object.
Each actor draws an incarnation id when it starts; a forwarder sends the one it knows with
every call, and an actor that Ray restarted (it died: ``max_restarts``) refuses a call made
for its predecessor. Either way (the call in flight died, or was refused) the forwarder waits
for the new actor, sets ``restarted`` and raises
:class:`~marlaas.executors.placement.BackendRestarted`: the work fails back to the core, which
retries it, and the executor puts back what it had put on the backend before its next use.

When the backends end the actors (the run is closing: done, Ctrl-C, SIGTERM), a forwarder
whose call finds its actor gone raises :class:`ActorEnded` at once instead of waiting for a
restart that will not come (a training step in flight once held a stopped run for 300 s).

Environments are a pool of stateless actors: an episode's environment object travels with
each call (``reset``, ``reset_problem``, ``step``, ``close``) and comes back with its new
state, so a dead actor loses no episode (the step in flight fails and is retried on another
actor). A state that Ray cannot pickle, on the way to the actor or back, is an
EnvStateError naming the environment and what did not pickle (:func:`state_error`), not Ray's
TypeError. The actor
checks the call as a call in process is checked (a coroutine, no ``sys.exit``:
:func:`marlaas.executors.env_contract.guarded_call`), and a call the executor gives up on (its
``env.timeout_s`` passed) is cancelled in the actor too; an actor whose cancelled call does
not end within ``ENV_CANCEL_GRACE_S`` (its thread is blocked) is killed and restarted. The
instance's next call (its close, a retried step) waits for the call given up on to end there,
so that two copies of one environment's state never run at once (:class:`RemoteEnv`).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import pickle
import textwrap
import threading
import time
import uuid
from functools import partial
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from marlaas.envs.base import Environment, StepResult
from marlaas.executors.env_contract import EnvStateError
from marlaas.executors.placement import BackendRestarted

if TYPE_CHECKING:
    from marlaas.datasets import Problem

RESTART_WAIT_S = 300.0
"""How long a forwarder waits for a restarted actor to answer [s] (a model loads again)."""
POLL_S = 0.2
"""Between two calls to an actor that is restarting [s]."""
ENV_METHODS = ("reset", "reset_problem", "step", "close")
"""The environment methods an EnvActor runs."""
ENV_CANCEL_GRACE_S = 10.0
"""How long a cancelled environment call has to end in its actor [s] before the actor is
killed and restarted: a call that blocks the actor's thread (``time.sleep``, a loop that never
awaits) cannot see its cancellation, and would hold every call the actor serves."""


class ActorEnded(RuntimeError):
    """A call to an actor its backends ended (the run is closing): nothing will restart it."""


class EnvActorDied(RuntimeError):
    """The environment actor running a call died (its process ended: ``os._exit``, a crash,
    killed); Ray restarts it and the call is retried like any failed work."""


class _Holder:
    """What every backend actor has: its incarnation and calls by method name."""

    def __init__(self) -> None:
        self.incarnation = uuid.uuid4().hex
        self.inner: Any = None

    def _check(self, incarnation: str, method: str) -> Any:
        if incarnation != self.incarnation:
            raise BackendRestarted(f"{method}: this actor was restarted (pid {os.getpid()})")
        return getattr(self.inner, method)


@ray.remote(max_restarts=-1, max_task_retries=0)
class EngineActor(_Holder):
    """One inference engine (:func:`marlaas.executors.backends.make_generator`), async."""

    def __init__(self, *generator_args) -> None:
        super().__init__()
        from marlaas.executors.backends import make_generator

        self.inner = make_generator(*generator_args)

    async def get_incarnation(self) -> str:
        """This actor's incarnation id."""
        return self.incarnation

    async def call(self, incarnation: str, method: str, *args) -> Any:
        """``await generator.method(*args)``."""
        return await self._check(incarnation, method)(*args)


@ray.remote(max_restarts=-1, max_task_retries=0, max_concurrency=4)
class TrainerActor(_Holder):
    """One trainer (:func:`~marlaas.executors.data_parallel.build_trainer`: a PeftTrainer, or
    a replica on each of the actor's GPUs); threaded, so that ``interrupt`` reaches a step in
    progress."""

    def __init__(self, model_dir, kwargs: dict) -> None:
        super().__init__()
        from marlaas.executors.data_parallel import build_trainer

        self.inner = build_trainer(model_dir, **kwargs)

    def get_incarnation(self) -> str:
        """This actor's incarnation id."""
        return self.incarnation

    def call(self, incarnation: str, method: str, *args, **kwargs) -> Any:
        """``trainer.method(*args, **kwargs)``, or the attribute's value."""
        found = self._check(incarnation, method)
        return found(*args, **kwargs) if callable(found) else found


@ray.remote(max_restarts=-1, max_task_retries=0)
class EnvActor:
    """Runs environments' ``reset``, ``reset_problem``, ``step`` and ``close`` (a code sandbox
    stays a sandbox here), each checked as in process. ``sandbox_caps``: the operator's
    bound on every sandbox made in this actor's process (:func:`~marlaas.envs.sandbox.
    cap_sandboxes`, held for the actor's life; a restarted actor is given them again)."""

    def __init__(self, sandbox_caps=None) -> None:
        if sandbox_caps is not None:
            from marlaas.envs.sandbox import cap_sandboxes

            cap_sandboxes(sandbox_caps)

    async def call(self, env: Environment, method: str, *args) -> tuple[Environment, Any]:
        """(the environment after ``env.method(*args)``, what it returned); a ``method`` that
        is no coroutine, or that calls ``sys.exit``, is EnvResultError naming the environment
        (:func:`~marlaas.executors.env_contract.guarded_call`), not this actor's end. What the
        call raised comes back as :class:`EnvRaised`, so that the caller tells it from Ray's
        failure to pickle the environment's new state on its way back."""
        from marlaas.executors.env_contract import guarded_call

        if method not in ENV_METHODS:
            raise ValueError(f"EnvActor runs {', '.join(ENV_METHODS)}, not {method!r}")
        try:
            value = await guarded_call(env, method, partial(getattr(env, method), *args))
        except Exception as err:
            raise EnvRaised(err) from None
        return env, value


class EnvRaised(Exception):
    """What an environment's call raised in its actor (``error``)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


def state_error(env: Environment, method: str, err: Exception, back: bool) -> EnvStateError:
    """The EnvStateError of an environment whose state Ray could not pickle (``err``) to send
    it to the actor that runs its ``method`` (``back``: the state the call left, on its way
    back): naming the environment, the call and what did not pickle."""
    if back:  # the state is the actor's: only Ray's reason is known here
        way, what = "the state it left cannot be pickled to travel back from", _one_line(err)
    else:
        way, what = "its state cannot be pickled to travel to", _unpicklable(env, err)
    where = f"{type(env).__module__}:{type(env).__qualname__}"
    return EnvStateError(
        f"environment {where}: {method}(): {way} its Ray actor ({what}); an environment "
        "run on Ray must pickle: create such an object in each call, or leave it out in "
        "__getstate__"
    )


def _unpicklable(env: Environment, err: Exception) -> str:
    """What of ``env`` did not pickle: the first attribute of the state it pickles
    (``__getstate__``) that does not, and why (else the pickler's own reason, first line)."""
    getstate = getattr(env, "__getstate__", None)  # (object has one from Python 3.11 on)
    try:
        state = getstate() if getstate is not None else getattr(env, "__dict__", None)
    except Exception:
        state = None
    for name, value in state.items() if isinstance(state, dict) else ():
        try:
            ray.cloudpickle.dumps(value)
        except Exception as inner:
            return f"attribute {name!r}: {_one_line(inner)}"
    return _one_line(err)


def _one_line(err: BaseException) -> str:
    """``Type: message`` of ``err`` on one line, shortened."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return textwrap.shorten(f"{type(err).__name__}: {first}", 200)


def _cause(err: RayTaskError) -> BaseException:
    """The exception the actor's method raised."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, BaseException) else err


def _raise_unless_restarted(err: RayTaskError | RayActorError) -> None:
    """Raise what the actor's method raised, unless the call failed because the actor died or
    was restarted (then return: the caller reconnects and raises BackendRestarted)."""
    if isinstance(err, RayTaskError):
        cause = _cause(err)
        if not isinstance(cause, BackendRestarted):
            raise cause from None


def _raise_if_ended(forwarder: EngineForwarder | TrainerForwarder, what: str) -> None:
    """ActorEnded when the forwarder's actor was ended by its backends."""
    if forwarder.ended:
        raise ActorEnded(f"{what} {forwarder.name}: its Ray actor was ended (the run is "
                         "closing)") from None  # fmt: skip


class EngineForwarder:
    """A :class:`~marlaas.executors.rollout.Generator` whose calls run in an EngineActor."""

    def __init__(self, name: str, actor, incarnation: str, tokenizer) -> None:
        self.name, self.actor, self.incarnation = name, actor, incarnation
        self.tokenizer = tokenizer
        self.restarted = False
        """Set when the actor was restarted, until the executor restored it."""
        self.ended = False
        """Set by :meth:`end`: the actor was ended for good, a restart is not waited for."""

    def end(self) -> None:
        """Its backends end the actor: a call that finds it gone raises ActorEnded at once."""
        self.ended = True

    async def _call(self, method: str, *args) -> Any:
        ref = self.actor.call.remote(self.incarnation, method, *args)
        try:
            return await ref
        except asyncio.CancelledError:  # e.g. an aborted generation: cancelled in the actor
            ray.cancel(ref)  # too (an async actor's call is cancelled in its event loop)
            raise
        except (RayTaskError, RayActorError) as err:
            _raise_unless_restarted(err)
        await self._reconnect()
        raise BackendRestarted(f"engine {self.name} was restarted during {method}")

    async def _reconnect(self) -> None:
        deadline = time.monotonic() + RESTART_WAIT_S
        while True:
            try:
                incarnation = await self.actor.get_incarnation.remote()
                break
            except RayActorError:
                _raise_if_ended(self, "engine")
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(POLL_S)
        if incarnation != self.incarnation:
            self.incarnation, self.restarted = incarnation, True

    async def generate(self, *args) -> list:
        """See :meth:`marlaas.executors.rollout.Generator.generate`. Cancelled (an aborted
        generation), the call is cancelled in the actor, where the generator aborts its
        requests in the engine."""
        return await self._call("generate", *args)

    async def publish(self, adapter: str, version: int, adapter_dir: str) -> None:
        """The engine loads the version from ``adapter_dir`` (a path every node reads)."""
        await self._call("publish", adapter, version, adapter_dir)

    async def retire(self, adapter: str, version: int) -> None:
        """The engine forgets the version."""
        await self._call("retire", adapter, version)

    async def resident(self) -> set[tuple[str, int]]:
        """What the engine itself holds (read from the actor)."""
        return set(await self._call("resident"))

    async def close(self) -> None:
        """Release the engine (the actor is ended by its backends)."""
        await self._call("close")


class TrainerForwarder:
    """A PeftTrainer whose methods run in a TrainerActor (blocking: called from threads)."""

    def __init__(self, name: str, actor, incarnation: str) -> None:
        self.name, self.actor, self.incarnation = name, actor, incarnation
        self.restarted = False
        """Set when the actor was restarted, until the executor restored it."""
        self.ended = False
        """Set by :meth:`end`: the actor was ended for good, a restart is not waited for."""

    def end(self) -> None:
        """Its backends end the actor: a call that finds it gone raises ActorEnded at once
        (a training step in flight on a thread when a run is stopped)."""
        self.ended = True

    def _call(self, method: str, *args, **kwargs) -> Any:
        try:
            return ray.get(self.actor.call.remote(self.incarnation, method, *args, **kwargs))
        except (RayTaskError, RayActorError) as err:
            _raise_unless_restarted(err)
        self._reconnect()
        raise BackendRestarted(f"trainer {self.name} was restarted during {method}")

    def _reconnect(self) -> None:
        deadline = time.monotonic() + RESTART_WAIT_S
        while True:
            try:
                incarnation = ray.get(self.actor.get_incarnation.remote(), timeout=RESTART_WAIT_S)
                break
            except (RayActorError, GetTimeoutError):
                _raise_if_ended(self, "trainer")
                if time.monotonic() > deadline:
                    raise
                time.sleep(POLL_S)
        if incarnation != self.incarnation:
            self.incarnation, self.restarted = incarnation, True

    @property
    def jobs(self) -> list[str]:
        """The jobs whose state is on the trainer (read from the actor)."""
        return self._call("jobs")

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self._call(method, *args, **kwargs)


class EnvPool:
    """Environment actors, used in turn; :meth:`make_env` is the executor's env factory."""

    def __init__(self, actors: list) -> None:
        self.actors = actors
        self._turn = itertools.cycle(range(len(actors)))

    def make_env(self, name: str, args: dict) -> RemoteEnv:
        """A new environment (built here, so that a bad option fails here), run in the pool."""
        from marlaas.envs import make_env

        return RemoteEnv(self, make_env(name, args))

    def next_actor(self):
        """The next actor in turn."""
        return self.actors[next(self._turn)]

    def give_up(self, actor, ref) -> None:
        """Cancel call ``ref`` in ``actor``; if it has not ended ``ENV_CANCEL_GRACE_S``
        later, the environment blocks the actor's thread (it never awaits), where no
        cancellation reaches it: kill the actor, which Ray restarts (the calls it was serving
        fail as from a dead actor, and are retried). Watched from a thread of its own, so
        that it outlives the event loop that gave up on the call."""
        ray.cancel(ref)
        threading.Thread(target=_kill_if_stuck, args=(actor, ref), daemon=True).start()


def _kill_if_stuck(actor, ref) -> None:
    """Kill ``actor`` (Ray restarts it) if its cancelled call ``ref`` is still running
    ``ENV_CANCEL_GRACE_S`` later."""
    try:
        ended, _ = ray.wait([ref], timeout=ENV_CANCEL_GRACE_S)
        if not ended:
            ray.kill(actor, no_restart=False)
    except Exception:  # the run ended meanwhile (Ray shut down, the actor ended): nothing held
        return


class RemoteEnv(Environment):
    """One episode's environment, whose ``reset`` and ``step`` run in the pool's actors.

    Each call runs on a copy of the state (``env``), which comes back only when the call
    returned. A call given up on runs on in its actor until its cancellation ends there (its
    cleanup), or the actor is killed (:meth:`EnvPool.give_up`): the instance's next call waits
    for that first (:meth:`_given_up_ended`), so that two copies of one environment never run
    at once, as in process no close runs beside another call of its instance. What the
    given-up copy did stays in its actor, as a call's on an actor that died."""

    def __init__(self, pool: EnvPool, env: Environment) -> None:
        super().__init__(env.args)
        self.pool, self.env = pool, env
        self._given_up: ray.ObjectRef | None = None
        """The call given up on last, until it ended in its actor."""

    async def reset(self, seed: int) -> str:
        """The environment's ``reset``, in an actor."""
        return await self._run("reset", seed)

    async def reset_problem(self, problem: Problem) -> str:
        """The environment's ``reset_problem`` (a job with a dataset), in an actor."""
        return await self._run("reset_problem", problem)

    async def step(self, action: str) -> StepResult:
        """The environment's ``step``, in an actor."""
        return await self._run("step", action)

    async def close(self) -> None:
        """The environment's ``close`` (its episode is over, or the run stops), in an actor
        as its other calls (what its state names, e.g. a remote sandbox's id, is released).
        An actor that died (during the close, or restarting: a call then fails as on a dead
        actor) leaves the state as it was before, as a step on a dead actor, which the run
        retries: the close is made again in the pool's next actor, ``POLL_S`` apart, until
        it returns or its bound passes (its caller's:
        :func:`~marlaas.executors.env_contract.env_call`). Ray cannot tell whether the dead
        actor ran it: a close may run twice."""
        while True:
            try:
                await self._run("close")
                return
            except EnvActorDied:
                await asyncio.sleep(POLL_S)

    async def _run(self, method: str, *args) -> Any:
        """``env.method(*args)`` in the pool's next actor; the environment's new state is kept
        only when the call returned. What the environment raised is raised here (not Ray's
        wrapper of it); an actor that died is EnvActorDied naming the environment; a call
        given up on (cancelled: its ``env.timeout_s`` passed, or its group failed) is
        cancelled in the actor too, so that a hung environment does not keep one of the
        actor's concurrent calls for good (:meth:`EnvPool.give_up`). A state that Ray cannot
        pickle, before the call or after it, is EnvStateError (:func:`state_error`)."""
        await self._given_up_ended()
        actor = self.pool.next_actor()
        try:
            ref = actor.call.remote(self.env, method, *args)
        except (TypeError, pickle.PicklingError, RecursionError) as err:  # Ray pickling it
            raise state_error(self.env, method, err, back=False) from None
        try:
            new_env, value = await ref
        except asyncio.CancelledError:
            self._given_up = ref  # first: the next call waits for it whatever give_up does
            self.pool.give_up(actor, ref)
            raise
        except RayTaskError as err:
            cause = _cause(err)
            if isinstance(cause, EnvRaised):
                raise cause.error from None
            # not raised by the environment (that comes back as EnvRaised): Ray pickling
            # the state the call left, on its way back
            if isinstance(cause, TypeError | pickle.PicklingError | RecursionError):
                raise state_error(self.env, method, cause, back=True) from None
            raise cause from None
        except RayActorError as err:
            where = f"{type(self.env).__module__}:{type(self.env).__qualname__}"
            raise EnvActorDied(f"environment {where}: the Ray actor running its {method}() "
                               f"died ({textwrap.shorten(str(err), 200)})") from None  # fmt: skip
        self.env = new_env
        return value

    async def _given_up_ended(self) -> None:
        """Wait until the call given up on last has ended in its actor (its cleanup after the
        cancellation; a copy that blocks the actor's thread ends when the actor is killed,
        ``ENV_CANCEL_GRACE_S`` after). Made at once, the instance's close ran in another
        actor beside it, on the state from before it. Within this call's bound (its
        caller's): given up on meanwhile, it leaves the wait to the next call."""
        ref = self._given_up
        if ref is None:
            return
        ended = asyncio.wrap_future(ref.future())
        ended.add_done_callback(_read_end)  # also when this wait is given up on first
        await asyncio.wait({ended})
        if self._given_up is ref:
            self._given_up = None


def _read_end(ended: asyncio.Future) -> None:
    """Read how a call given up on ended in its actor (TaskCancelledError, RayActorError: it
    was killed; or none), waited for or not (a wait given up on first left it unread, and
    asyncio reported it with its traceback as "Future exception was never retrieved")."""
    if not ended.cancelled():
        ended.exception()
