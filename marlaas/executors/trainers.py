"""The real trainers: one per trainer the scheduler sees, a PeftTrainer on its device or a
data-parallel one across its GPUs (marlaas.executors.data_parallel).

A job's adapter and optimizer state are on a trainer only between the scheduler's ``SwapIn``
and ``SwapOut``; otherwise they live in the adapter store, where every ``Sync`` writes the new
version together with the optimizer state (older versions keep their adapter weights only,
once the new one is durable).
Versions are the scheduler's: a resumed job is submitted at its last durable version.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from marlaas.core.job_spec import JobSpec
from marlaas.executors.adapter_store import OPTIMIZER_FILE, AdapterStore
from marlaas.executors.rollout import TrainSample, TrainStats

if TYPE_CHECKING:  # torch: imported where a trainer is built (marlaas.executors.local)
    from marlaas.executors.data_parallel import DataParallelTrainer
    from marlaas.executors.peft_trainer import PeftTrainer


class TrainerPool:
    """Moves jobs' state between trainers and the store exactly as the scheduler decides."""

    def __init__(
        self,
        trainers: dict[str, PeftTrainer | DataParallelTrainer],
        store: AdapterStore,
        specs: dict[str, JobSpec],
    ) -> None:
        self.trainers = trainers
        self.store = store
        self.specs = specs

    def resident(self, trainer: str) -> set[str]:
        """The jobs whose state is on ``trainer``, as the trainer itself reports them."""
        return set(self.trainers[trainer].jobs)

    def create(self, job: str, spec: JobSpec, seed: int) -> None:
        """Write version 0 of a new job (a freshly initialised adapter, no optimizer state)
        to the store, using the first trainer, which keeps nothing of it (it waits for a step
        in progress there: the trainer's lock)."""
        trainer = next(iter(self.trainers.values()))
        rank = spec.lora_rank
        trainer.write_initial_adapter(job, rank, 2 * rank, seed, self.store.path(job, 0))

    def swap_in(self, job: str, version: int, trainer: str) -> None:
        """Load ``job`` at ``version`` (adapter and optimizer state) from the store."""
        spec, target = self.specs[job], self.trainers[trainer]
        target.add_job(
            job, spec.lora_rank, 2 * spec.lora_rank, spec.rl.learning_rate,
            init_dir=self.store.path(job, version), version=version,
            minibatches=spec.rl.minibatches, clip_eps=spec.rl.clip_eps,
            clip_eps_high=spec.rl.clip_eps_high,
            lr_staleness_damping=spec.rl.lr_staleness_damping,
        )  # fmt: skip
        if target.version(job) != version:
            target.remove_job(job)
            raise RuntimeError(f"{job}: the store's v{version} holds another version")

    def swap_out(self, job: str, trainer: str) -> None:
        """Drop ``job``'s state from ``trainer`` (it is in the store since its last sync)."""
        self.trainers[trainer].remove_job(job)

    def interrupt(self) -> None:
        """Stop every training step in progress at its next micro-batch (see
        :meth:`PeftTrainer.interrupt`)."""
        for trainer in self.trainers.values():
            trainer.interrupt()

    def train(self, job: str, trainer: str, samples: list[TrainSample]) -> TrainStats:
        """One training step of ``job`` on ``trainer``."""
        return self.trainers[trainer].train_step(job, samples)

    def sync(self, job: str, version: int, trainer: str) -> Path:
        """Save ``job``'s new ``version`` with its optimizer state (the older versions' states
        are pruned once the step is durable: :meth:`prune_optimizers`)."""
        path = self.store.path(job, version)
        self.trainers[trainer].save_adapter(job, version, path, overwrite=True, optimizer=True)
        return path

    def prune_optimizers(self, job: str, version: int) -> None:
        """Drop the optimizer state of ``job``'s versions before ``version`` (they keep their
        adapter weights): called once ``version`` is durable in the run's journal."""
        for older in self.store.versions(job):
            if older < version:
                (self.store.path(job, older) / OPTIMIZER_FILE).unlink(missing_ok=True)
