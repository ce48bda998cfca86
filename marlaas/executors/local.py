"""The real world in this process: an engine per inference device, a trainer per trainer.

:class:`LocalBackends` builds the engines (vLLM or HF + PEFT generators) and the trainers (a
PeftTrainer, or a data-parallel one across several GPUs: marlaas.executors.data_parallel) on
the devices of :func:`marlaas.executors.devices.physical_devices`, in this process; the
environments run here too. :class:`LocalExecutor` is the real executor over them (its
settings as keywords). The same executor over Ray actors: :mod:`marlaas.executors.ray_backends`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from marlaas.core.cluster import Cluster
from marlaas.envs import make_env
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backends import EngineSizing, make_generator, sampling_dtype
from marlaas.executors.devices import gpu_count, physical_devices, trainer_devices
from marlaas.executors.real import RealExecutor


class LocalBackends:
    """Engines and trainers built in this process by :meth:`open` (nothing before it).

    ``generators``/``trainers`` (engine/trainer name -> object) may be passed in, e.g. by
    tests; the others are built: a trainer whose devices are several GPUs has a replica on
    each (:func:`~marlaas.executors.data_parallel.build_trainer`). A vLLM engine built here
    lends its base-model tensors to a trainer on the same device (:meth:`_plain_weights`)."""

    kind = "local"

    def __init__(
        self,
        model_dir: Path,
        backend: str,
        *,
        generators: dict | None = None,
        trainers: dict | None = None,
        micro_batch_size: int = 8,
        activation_checkpointing: bool = True,
        sandbox_caps=None,
    ) -> None:
        self.model_dir, self.backend = model_dir, backend
        self.micro_batch_size, self.checkpointing = micro_batch_size, activation_checkpointing
        self.sandbox_caps = sandbox_caps
        """The operator's bound on every sandbox made in this process while the backends are
        open (a :class:`~marlaas.envs.sandbox.SandboxCaps`, held from :meth:`open` until
        :meth:`close`, beside any other's; None: none)."""
        self._release_caps = None
        self._given = dict(generators or {})
        self._given_trainers = trainers
        self.engines: dict = dict(self._given)
        self.trainers: dict = {}
        self.tokenizer = None
        self.make_env = make_env

    async def open(
        self, sizing: EngineSizing, cluster: Cluster, max_model_len: int, seed: int
    ) -> None:
        """Bound the sandboxes of this process (``sandbox_caps``), then build the engines,
        then the trainers, each on its device."""
        if self.sandbox_caps is not None and self._release_caps is None:
            from marlaas.envs.sandbox import cap_sandboxes

            self._release_caps = cap_sandboxes(self.sandbox_caps)
        devices = physical_devices(cluster, gpu_count())
        for engine in cluster.engines:
            if engine.name not in self.engines:
                self.engines[engine.name] = await asyncio.to_thread(
                    make_generator, self.backend, self.model_dir, sizing, max_model_len, seed,
                    devices[engine.device.name],
                )  # fmt: skip
        if self._given_trainers is not None:
            self.trainers = dict(self._given_trainers)
        else:
            from marlaas.executors.data_parallel import build_trainer

            on_engines = [devices[engine.device.name] for engine in cluster.engines]
            sampled_in = sampling_dtype(self.backend, sizing.engine.dtype, on_engines)
            for trainer in cluster.trainers:
                on = trainer_devices(trainer, devices)
                shared = {device: self._plain_weights(cluster, device, devices) for device in on}
                self.trainers[trainer.name] = await asyncio.to_thread(
                    build_trainer, self.model_dir, on, micro_batch_size=self.micro_batch_size,
                    activation_checkpointing=self.checkpointing, shared_weights=shared,
                    sampled_in=sampled_in,
                )  # fmt: skip
        self.tokenizer = next(iter(self.engines.values())).tokenizer

    def _plain_weights(self, cluster: Cluster, device: str, devices: dict[str, str]) -> dict:
        """Base-model tensors an engine built here on ``device`` keeps as loaded, for a trainer
        on the same device to use instead of its own copy (a vLLM engine in this process)."""
        for engine in cluster.engines:
            built = self.engines[engine.name]
            if engine.name not in self._given and devices[engine.device.name] == device:
                plain = getattr(built, "plain_weights", None)
                if plain is not None:
                    return plain()
        return {}

    def owns(self, engine: str) -> bool:
        """Whether ``engine`` was built here (not passed in)."""
        return engine not in self._given

    async def close(self) -> None:
        """Shut down the engines built here; release the sandbox caps :meth:`open` held."""
        try:
            for name, engine in self.engines.items():
                if name not in self._given:
                    await engine.close()
        finally:
            release, self._release_caps = self._release_caps, None
            if release is not None:
                release()


class LocalExecutor(RealExecutor):
    """The real executor over :class:`LocalBackends` (everything in this process).

    ``backend``, ``generators``, ``trainers``, ``micro_batch_size`` and
    ``activation_checkpointing`` go to :class:`LocalBackends`, the rest to
    :class:`~marlaas.executors.real.RealExecutor`."""

    def __init__(
        self,
        sizing: EngineSizing,
        cluster: Cluster,
        *,
        store: AdapterStore,
        model_dir: Path,
        backend: str,
        seed: int = 0,
        generators: dict | None = None,
        trainers: dict | None = None,
        micro_batch_size: int = 8,
        activation_checkpointing: bool = True,
        max_model_len: int | None = None,
        chat_template: bool | None = None,
    ) -> None:
        backends = LocalBackends(
            model_dir, backend, generators=generators, trainers=trainers,
            micro_batch_size=micro_batch_size, activation_checkpointing=activation_checkpointing,
        )  # fmt: skip
        super().__init__(
            sizing, cluster, store=store, backends=backends, model_dir=model_dir, seed=seed,
            max_model_len=max_model_len, chat_template=chat_template,
        )  # fmt: skip
