"""What the real executor put on each engine and trainer, put back on one that was restarted.

A backend that was restarted (a Ray actor that died, started again by Ray) holds nothing and
says so (``restarted``: :class:`~marlaas.executors.placement.BackendRestarted`); the work in
flight when it died failed back to the core, which retries it. Before the backend's next use
the executor re-enacts its own record of what it put there (:class:`BackendRecord`): the
adapters it loaded on an engine, the jobs it swapped onto a trainer at their latest synced
version (from the store), and a trained step not yet synced (trained again from the same
samples). It is the executor's record of its own actions, not a copy of the core's facts: the
core still counts those adapters and jobs where it put them.
"""

from __future__ import annotations

import asyncio
import logging

from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.placement import Backends
from marlaas.executors.rollout import Generator, TrainSample
from marlaas.executors.trainers import TrainerPool

log = logging.getLogger("marlaas.real")


class BackendRecord:
    """What the executor put on ``backends``' engines and trainers (``trainers``: the pool
    that moves jobs between them and ``store``), and its restore on one restarted since.

    One restore at a time per backend (a lock each). An engine's restore runs as a task of
    its own (:attr:`restores`), to its end even when the call that needed it was aborted."""

    def __init__(self, backends: Backends, store: AdapterStore, trainers: TrainerPool) -> None:
        self.backends, self.store, self.trainers = backends, store, trainers
        self.loaded: set[tuple[str, str, int]] = set()
        """(engine, job, version) this executor loaded and has not evicted."""
        self.on_trainer: dict[tuple[str, str], int] = {}
        """(trainer, job) -> the version this executor swapped in or synced there last."""
        self.unsynced: dict[tuple[str, str], list[TrainSample]] = {}
        """(trainer, job) -> the samples of a trained step whose version is not synced yet."""
        self._restoring: dict[str, asyncio.Lock] = {}
        self.restores: set[asyncio.Task] = set()
        """Restores of restarted engines under way (each runs to its end even when the call
        that needed it was aborted: :meth:`restored_engine`)."""

    async def restored_engine(self, name: str) -> Generator:
        """Engine ``name``, given back the adapters this executor loaded there when it was
        restarted since its last use (the core still counts them as loaded).

        The restore runs as a task of its own, shielded from its caller's cancellation: a
        Generate aborted meanwhile (AbortGeneration) returns at once, and the restore goes
        on to its end. Cut short, it left the engine holding some of the adapters and still
        ``restarted``, and the next call's restore published them all again: the first
        was refused as already published, and so was every call's after it."""
        engine = self.backends.engines[name]
        if getattr(engine, "restarted", False):
            restore = asyncio.ensure_future(self._restore_engine(name, engine))
            self.restores.add(restore)
            restore.add_done_callback(self.restores.discard)
            await asyncio.shield(restore)
        return engine

    async def _restore_engine(self, name: str, engine: Generator) -> None:
        """See :meth:`restored_engine` (one restore at a time per engine)."""
        async with self._restoring.setdefault(name, asyncio.Lock()):
            if engine.restarted:
                for _, job, version in sorted(e for e in self.loaded if e[0] == name):
                    await engine.publish(job, version, str(self.store.path(job, version)))
                engine.restarted = False
                log.warning("engine %s restarted: %d adapters loaded again", name,
                            sum(e[0] == name for e in self.loaded))  # fmt: skip

    async def restored_trainer(self, name: str) -> None:
        """Give trainer ``name``, when it was restarted since its last use, the jobs this
        executor put there, each at its latest synced version from the store, and train again
        a step whose version was not synced yet (the same samples)."""
        trainer = self.backends.trainers[name]
        if not getattr(trainer, "restarted", False):
            return
        async with self._restoring.setdefault(name, asyncio.Lock()):
            if not trainer.restarted:
                return
            for (where, job), version in sorted(self.on_trainer.items()):
                if where != name:
                    continue
                await asyncio.to_thread(self.trainers.swap_in, job, version, name)
                samples = self.unsynced.get((name, job))
                if samples is not None:
                    await asyncio.to_thread(self.trainers.train, job, name, samples)
            trainer.restarted = False
            log.warning("trainer %s restarted: its jobs loaded again from the store", name)
