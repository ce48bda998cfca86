"""A trainer of several devices: one PeftTrainer replica per device, data-parallel steps.

The scheduler's trainer may span several devices (a training pool's ``devices_per_trainer``);
the simulator divides a step's compute by them (``Cluster.step_devices``). Where they are
several distinct torch devices (one GPU each), the real trainer is a
:class:`DataParallelTrainer`: the same base weights and the same LoRA adapters and optimizer
states on every device, each step's samples split between the replicas (balanced by tokens),
the gradients computed on every replica at once (one thread each: CUDA kernels release the
GIL), summed, and the same optimizer step taken on every replica. The advantages (per group)
and the loss's normalisation (the step's completion tokens) are the whole step's, so the
summed gradient is the one a single device computes on all the samples, up to float rounding.
Where the devices are one processor (a CPU, or GPUs declared as one shared processor) the
trainer is one plain PeftTrainer (:func:`build_trainer`).

It has a PeftTrainer's methods that the executor calls, so the executor, its Ray actor and its
tests cannot tell them apart.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from marlaas.executors.grpo import BackwardPass, group_advantages, step_stats
from marlaas.executors.peft_trainer import PeftTrainer
from marlaas.executors.rollout import TrainSample, TrainStats


def build_trainer(
    model_dir: str | Path,
    devices: Sequence[str],
    *,
    shared_weights: dict[str, dict[str, torch.Tensor]] | None = None,
    **kwargs,
) -> PeftTrainer | DataParallelTrainer:
    """The trainer of a scheduler's trainer whose devices run on the torch ``devices``: one
    PeftTrainer where they are one device, else a DataParallelTrainer of one replica per
    distinct device. ``shared_weights``: torch device -> the base-model tensors that replica
    may share (see PeftTrainer); ``kwargs`` go to every PeftTrainer."""
    distinct = list(dict.fromkeys(devices))
    if not distinct:
        raise ValueError("a trainer needs at least one device")
    shared = shared_weights or {}
    replicas = [
        PeftTrainer(model_dir, device=device, shared_weights=shared.get(device), **kwargs)
        for device in distinct
    ]
    return replicas[0] if len(replicas) == 1 else DataParallelTrainer(replicas)


def split_by_tokens(samples: Sequence[TrainSample], parts: int) -> list[list[int]]:
    """Indices of ``samples`` in ``parts`` shares of about equal tokens (prompt + completion:
    what a forward pass reads): the longest first, each to the share with the fewest tokens so
    far; each share in the samples' order. A share is empty when there are fewer samples."""
    loads = [0] * parts
    shares: list[list[int]] = [[] for _ in range(parts)]
    longest_first = sorted(
        range(len(samples)),
        key=lambda i: (-(len(samples[i].prompt_ids) + len(samples[i].completion_ids)), i),
    )
    for i in longest_first:
        least = min(range(parts), key=lambda p: (loads[p], p))
        shares[least].append(i)
        loads[least] += len(samples[i].prompt_ids) + len(samples[i].completion_ids)
    return [sorted(share) for share in shares]


class DataParallelTrainer:
    """Replicas of one trainer on distinct devices, kept identical: every job is added to,
    stepped on and removed from each of them; its adapter and optimizer state are written from
    the first. Thread-safe like a PeftTrainer (one lock)."""

    def __init__(self, replicas: Sequence[PeftTrainer]) -> None:
        if len(replicas) < 2:
            raise ValueError("a data-parallel trainer needs at least two replicas")
        self.replicas = list(replicas)
        self.devices = [str(r.device) for r in self.replicas]
        """Each replica's torch device."""
        self._first = self.replicas[0]
        self._lock = threading.RLock()
        self._interrupts = 0

    # ---------------------------------------------------------------- jobs
    @property
    def jobs(self) -> list[str]:
        """Names of the jobs this trainer holds."""
        return self._first.jobs

    def version(self, job: str) -> int:
        """Current adapter version of ``job``."""
        return self._first.version(job)

    def add_job(self, job: str, *args, **kwargs) -> None:
        """:meth:`PeftTrainer.add_job` on every replica (the same folder, or the same seed:
        the same weights and optimizer state); on none if it fails on one."""
        with self._lock:
            added = []
            try:
                for replica in self.replicas:
                    replica.add_job(job, *args, **kwargs)
                    added.append(replica)
            except BaseException:
                for replica in added:
                    replica.remove_job(job)
                raise

    def remove_job(self, job: str) -> None:
        """Drop ``job`` from every replica."""
        with self._lock:
            for replica in self.replicas:
                replica.remove_job(job)

    def write_initial_adapter(self, *args, **kwargs) -> Path:
        """:meth:`PeftTrainer.write_initial_adapter` (the first replica's: nothing stays)."""
        with self._lock:
            return self._first.write_initial_adapter(*args, **kwargs)

    def save_adapter(self, *args, **kwargs) -> Path:
        """:meth:`PeftTrainer.save_adapter` of the first replica (they are identical)."""
        with self._lock:
            return self._first.save_adapter(*args, **kwargs)

    def logprobs(self, *args, **kwargs) -> list[list[float]]:
        """:meth:`PeftTrainer.logprobs` on the first replica."""
        with self._lock:
            return self._first.logprobs(*args, **kwargs)

    # ---------------------------------------------------------------- training
    def interrupt(self) -> None:
        """Stop a step in progress at every replica's next micro-batch, before the optimizer
        step (see :meth:`PeftTrainer.interrupt`); steps started after the call run whole."""
        self._interrupts += 1

    def train_step(self, job: str, samples: Sequence[TrainSample]) -> TrainStats:
        """One optimizer step of ``job`` on ``samples``, split between the replicas."""
        with self._lock:
            interrupts = self._interrupts
            self.version(job)  # an unknown job: KeyError
            if not samples:
                raise ValueError("train_step needs at least one sample")
            advantages = group_advantages(samples, self._first.adv_eps)
            total_tokens = sum(len(s.completion_ids) for s in samples)
            shares = split_by_tokens(samples, len(self.replicas))

            def backward(replica: PeftTrainer, share: list[int]) -> BackwardPass:
                return replica.backward(
                    job, [samples[i] for i in share], [advantages[i] for i in share],
                    total_tokens, lambda: self._interrupts != interrupts,
                )  # fmt: skip

            try:
                with ThreadPoolExecutor(len(self.replicas), "marlaas-dp") as pool:
                    pairs = zip(self.replicas, shares, strict=True)
                    running = [pool.submit(backward, r, share) for r, share in pairs]
                passes = [f.result() for f in running]  # every one has ended: raise the first
                _sum_gradients([r.adapter_parameters(job) for r in self.replicas])
                norms = [replica.apply_gradients(job) for replica in self.replicas]
            finally:
                for replica in self.replicas:
                    replica.end_step(job)
            done = sum(passes[1:], passes[0])
            return step_stats(job, self.version(job), samples, total_tokens, done, norms[0])


@torch.no_grad()
def _sum_gradients(replicas: list[list[torch.nn.Parameter]]) -> None:
    """Give each parameter of every replica the sum of its gradients over the replicas (an
    all-reduce; a replica without samples has none: zero)."""
    for same in zip(*replicas, strict=True):
        grads = [p.grad for p in same if p.grad is not None]
        if not grads:
            continue
        home = same[0].device
        total = grads[0].to(home, copy=True)
        for grad in grads[1:]:
            total += grad.to(home)
        for p in same:
            p.grad = total.to(p.device, copy=True)
