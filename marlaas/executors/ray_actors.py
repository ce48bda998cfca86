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

Environments are a pool of stateless actors: an episode's environment object travels with
each call (``reset``, ``step``) and comes back with its new state, so a dead actor loses no
episode (the step in flight fails and is retried on another actor).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from marlaas.envs.base import Environment, StepResult
from marlaas.executors.placement import BackendRestarted

RESTART_WAIT_S = 300.0
"""How long a forwarder waits for a restarted actor to answer [s] (a model loads again)."""
POLL_S = 0.2
"""Between two calls to an actor that is restarting [s]."""


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
    """Runs environments' ``reset`` and ``step`` (a code sandbox stays a sandbox here)."""

    async def reset(self, env: Environment, seed: int) -> tuple[Environment, str]:
        """(the environment after ``reset(seed)``, its prompt)."""
        prompt = await env.reset(seed)
        return env, prompt

    async def step(self, env: Environment, action: str) -> tuple[Environment, StepResult]:
        """(the environment after ``step(action)``, its result)."""
        result = await env.step(action)
        return env, result


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


class EngineForwarder:
    """A :class:`~marlaas.executors.rollout.Generator` whose calls run in an EngineActor."""

    def __init__(self, name: str, actor, incarnation: str, tokenizer) -> None:
        self.name, self.actor, self.incarnation = name, actor, incarnation
        self.tokenizer = tokenizer
        self.restarted = False
        """Set when the actor was restarted, until the executor restored it."""

    async def _call(self, method: str, *args) -> Any:
        try:
            return await self.actor.call.remote(self.incarnation, method, *args)
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
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(POLL_S)
        if incarnation != self.incarnation:
            self.incarnation, self.restarted = incarnation, True

    async def generate(self, *args) -> list:
        """See :meth:`marlaas.executors.rollout.Generator.generate`."""
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


class RemoteEnv(Environment):
    """One episode's environment, whose ``reset`` and ``step`` run in the pool's actors."""

    def __init__(self, pool: EnvPool, env: Environment) -> None:
        super().__init__(env.args)
        self.pool, self.env = pool, env

    async def reset(self, seed: int) -> str:
        """The environment's ``reset``, in an actor."""
        self.env, prompt = await self.pool.next_actor().reset.remote(self.env, seed)
        return prompt

    async def step(self, action: str) -> StepResult:
        """The environment's ``step``, in an actor; a dead actor leaves the state as it was."""
        try:
            self.env, result = await self.pool.next_actor().step.remote(self.env, action)
        except RayTaskError as err:
            raise _cause(err) from None
        return result
