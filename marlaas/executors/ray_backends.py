"""The real executor's backends as Ray actors across a cluster (``--ray``).

    inference engine  an EngineActor per engine the cluster declares: one vLLM engine (or the
                      HF + PEFT generator), in a placement-group bundle of 1 GPU (when the
                      cluster has GPUs) or ``cpus_per_actor`` CPUs
    trainer           a TrainerActor per trainer: a PeftTrainer with the adapters and optimizer
                      states of the jobs the core swapped onto it, in a bundle like an engine's
                      but with as many GPUs as the trainer's devices (one where they share
                      one processor), a replica on each (marlaas.executors.data_parallel)
    environments      a pool of EnvActors (no CPU reserved: they mostly wait), serving the
                      cluster's ``env_workers`` concurrent steps between them
    driver process    the scheduler core, the policy, the driver loop, the episodes' tokens

Adapter versions travel through the adapter store, a folder every node reads (the run
folder on a shared filesystem): a trainer actor writes a version there before its Sync
returns, an engine actor loads it from there (docs/ray.md says why not the object store).
Every actor is restarted when it dies (``max_restarts=-1``); its work in flight fails back to
the core (see :mod:`marlaas.executors.ray_actors`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from pathlib import Path

from marlaas.bounded_wait import within
from marlaas.core.cluster import Cluster
from marlaas.executors.backends import BackendError, EngineSizing, sampling_dtype

log = logging.getLogger("marlaas.real")

PLACEMENT_WAIT_S = 120.0
"""How long the placement group may wait for the cluster's resources [s]."""
ENV_ACTORS = 2
"""Environment actors by default (each serves its share of ``env_workers`` steps at once)."""


class PlacementError(RuntimeError):
    """The cluster cannot hold the engines and trainers (too few GPUs or CPUs)."""


class RayBackends:
    """Engines, trainers and environments as Ray actors, built by :meth:`open` (nothing
    before it: Ray must be initialised by then, see :func:`ray_session`)."""

    kind = "ray"

    def __init__(
        self,
        model_dir: Path,
        backend: str,
        *,
        env_workers: int,
        env_actors: int = ENV_ACTORS,
        cpus_per_actor: float = 1.0,
        strategy: str = "PACK",
        micro_batch_size: int = 8,
        activation_checkpointing: bool = True,
        sandbox_caps=None,
    ) -> None:
        self.model_dir, self.backend = Path(model_dir).resolve(), backend
        self.sandbox_caps = sandbox_caps
        """The operator's bound on every sandbox the environment actors make (a
        :class:`~marlaas.envs.sandbox.SandboxCaps`; None: none)."""
        self.env_workers, self.env_actors = env_workers, max(1, min(env_actors, env_workers))
        self.cpus_per_actor, self.strategy = cpus_per_actor, strategy
        self.trainer_kwargs = {
            "micro_batch_size": micro_batch_size,
            "activation_checkpointing": activation_checkpointing,
        }
        self.engines: dict = {}
        self.trainers: dict = {}
        self.tokenizer = None
        self.make_env = None
        self.actors: dict[str, object] = {}
        """Actor name (engine, trainer, ``env<i>``) -> its handle (a test kills one)."""
        self._group = None

    async def open(
        self, sizing: EngineSizing, cluster: Cluster, max_model_len: int, seed: int
    ) -> None:
        """Reserve a bundle per engine and trainer, start the actors in them, wait until
        every model loaded."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        from transformers import AutoTokenizer

        from marlaas.executors.ray_actors import (
            EngineActor,
            EngineForwarder,
            EnvActor,
            EnvPool,
            TrainerActor,
            TrainerForwarder,
        )

        names = [e.name for e in cluster.engines] + [t.name for t in cluster.trainers]
        widths = [1] * len(cluster.engines) + [cluster.step_devices(t) for t in cluster.trainers]
        gpus = ray.cluster_resources().get("GPU", 0.0) >= sum(widths)
        if not gpus and max(widths) > 1:
            log.warning(
                "the Ray cluster has fewer than %d GPUs: every trainer trains on one CPU actor, "
                "while the simulator divides a step by the trainer's devices (declare "
                "cluster.shared_compute: true to model one processor)", sum(widths),
            )  # fmt: skip
        bundles = [{"CPU": self.cpus_per_actor, **({"GPU": float(w)} if gpus else {})}
                   for w in widths]  # fmt: skip
        self._group = placement_group(bundles, strategy=self.strategy)
        try:
            await within(_awaited(self._group.ready()), PLACEMENT_WAIT_S)
        except Exception as err:
            raise PlacementError(
                f"the Ray cluster cannot place {len(names)} actors ({', '.join(names)}: "
                f"{bundles}) within {PLACEMENT_WAIT_S:.0f} s (it has "
                f"{ray.cluster_resources()}): add nodes or use fewer engines"
            ) from err
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        # Ray shows an actor its own GPUs as cuda:0, cuda:1, ...
        actor_devices = [[f"cuda:{g}" for g in range(w)] if gpus else ["cpu"] for w in widths]
        engine_devices = [devices[0] for devices in actor_devices[: len(cluster.engines)]]
        sampled_in = sampling_dtype(self.backend, sizing.engine.dtype, engine_devices)
        handles = {}
        for i, (name, bundle) in enumerate(zip(names, bundles, strict=True)):
            options = {
                "num_cpus": bundle["CPU"], "num_gpus": bundle.get("GPU", 0),
                "scheduling_strategy": PlacementGroupSchedulingStrategy(
                    placement_group=self._group, placement_group_bundle_index=i),
            }  # fmt: skip
            devices = actor_devices[i]
            if i < len(cluster.engines):
                args = (self.backend, self.model_dir, sizing, max_model_len, seed, devices[0])
                handles[name] = EngineActor.options(**options).remote(*args)
            else:
                kwargs = {**self.trainer_kwargs, "devices": devices, "sampled_in": sampled_in}
                handles[name] = TrainerActor.options(**options).remote(self.model_dir, kwargs)
        per_actor = math.ceil(self.env_workers / self.env_actors)
        envs = [EnvActor.options(num_cpus=0, max_concurrency=per_actor).remote(self.sandbox_caps)
                for _ in range(self.env_actors)]  # fmt: skip
        self.actors = {**handles, **{f"env{i}": a for i, a in enumerate(envs)}}
        answers = await asyncio.gather(
            *(handles[n].get_incarnation.remote() for n in names), return_exceptions=True
        )
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, BaseException):  # its constructor raised: no restart
                raise BackendError(f"{name}: its Ray actor could not start: {_last_error(answer)}")
        for i, (name, incarnation) in enumerate(zip(names, answers, strict=True)):
            if i < len(cluster.engines):
                self.engines[name] = EngineForwarder(name, handles[name], incarnation,
                                                     self.tokenizer)  # fmt: skip
            else:
                self.trainers[name] = TrainerForwarder(name, handles[name], incarnation)
        self.make_env = EnvPool(envs).make_env

    def owns(self, engine: str) -> bool:
        """Every engine is an actor built here."""
        return True

    async def close(self) -> None:
        """End the actors (no restart) and free their placement group; a call still in
        flight (a training step on a thread, when a run is stopped) then fails at once
        instead of waiting for a restart (the forwarders' ``end``)."""
        import ray
        from ray.util.placement_group import remove_placement_group

        for forwarder in [*self.engines.values(), *self.trainers.values()]:
            forwarder.end()
        for actor in self.actors.values():
            ray.kill(actor, no_restart=True)
        self.actors.clear()
        if self._group is not None:
            remove_placement_group(self._group)
            self._group = None


async def _awaited(ref):
    """An ObjectRef as a coroutine (for :func:`~marlaas.bounded_wait.within`)."""
    return await ref


def _last_error(err: BaseException) -> str:
    """The line of an actor's error that names the exception (Ray's message is a traceback)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    named = [line for line in lines if "Error" in line.split(":")[0]]
    return (named or lines or [type(err).__name__])[-1][:300]
