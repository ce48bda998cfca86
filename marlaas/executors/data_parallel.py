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
A job's step of several minibatches (``rl.minibatches``) does this per minibatch: each one's
samples split between the replicas, its gradients summed, one optimizer step on every replica;
each replica first computes the step's starting log-probs (pi_prox) of the samples it trains
on in the later minibatches.
Where the devices are one processor (a CPU, or GPUs declared as one shared processor) the
trainer is one plain PeftTrainer (:func:`build_trainer`).

It has a PeftTrainer's methods that the executor calls, so the executor, its Ray actor and its
tests cannot tell them apart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import torch

from marlaas.executors.grpo import BackwardPass, group_advantages, split_minibatches, step_stats
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


def _never() -> bool:
    return False


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
        """Stop a step in progress at every replica's next micro-batch, before its first
        optimizer step (see :meth:`PeftTrainer.interrupt`); steps started after the call run
        whole."""
        self._interrupts += 1

    def minibatches(self, job: str) -> int:
        """Optimizer steps ``job`` takes per training step (see :meth:`PeftTrainer.add_job`)."""
        return self._first.minibatches(job)

    def train_step(self, job: str, samples: Sequence[TrainSample]) -> TrainStats:
        """One training step of ``job`` on ``samples``: per minibatch, its samples split
        between the replicas, their gradients summed, one optimizer step on each."""
        with self._lock:
            interrupts = self._interrupts
            self.version(job)  # an unknown job: KeyError
            if not samples:
                raise ValueError("train_step needs at least one sample")
            advantages = group_advantages(samples, self._first.adv_eps)
            total_tokens = sum(len(s.completion_ids) for s in samples)
            parts = split_minibatches(samples, self.minibatches(job))
            # shares[n][r]: the indices of the samples replica r trains on in minibatch n
            shares = [
                [[part[j] for j in share] for share in
                 split_by_tokens([samples[i] for i in part], len(self.replicas))]
                for part in parts
            ]  # fmt: skip
            done, norms = BackwardPass(), []
            try:
                with ThreadPoolExecutor(len(self.replicas), "marlaas-dp") as pool:
                    proximal = self._proximal(pool, job, samples, shares[1:])
                    for n, per in enumerate(shares):
                        tokens = sum(len(samples[i].completion_ids) for i in parts[n])
                        stopped = (lambda: self._interrupts != interrupts) if n == 0 else _never
                        measured = self._backward(
                            pool, job, samples, advantages, per, tokens, stopped,
                            proximal if n else None,
                        )  # fmt: skip
                        last = n == len(parts) - 1
                        chosen = [samples[i] for i in parts[n]]
                        step = [
                            r.apply_gradients(job, chosen, new_version=last) for r in self.replicas
                        ]
                        norms.append(step[0])
                        done += measured.scaled(tokens, total_tokens)
            finally:
                for replica in self.replicas:
                    replica.end_step(job)
            grad_norm = sum(norms) / len(norms)
            return step_stats(job, self.version(job), samples, total_tokens, done, grad_norm)

    def _proximal(
        self,
        pool: ThreadPoolExecutor,
        job: str,
        samples: Sequence[TrainSample],
        later: list[list[list[int]]],
    ) -> dict[int, list[float]]:
        """Index -> log-probs under ``job``'s current weights of the samples each replica
        trains on in the minibatches ``later`` (``later[n][r]``: replica r's in the n-th), each
        replica computing its own."""
        mine = [[i for per in later for i in per[r]] for r in range(len(self.replicas))]
        proximal: dict[int, list[float]] = {}
        for got in pool.map(lambda r: self.replicas[r].proximal(job, samples, mine[r]),
                            range(len(self.replicas))):  # fmt: skip
            proximal.update(got)
        return proximal

    def _backward(
        self,
        pool: ThreadPoolExecutor,
        job: str,
        samples: Sequence[TrainSample],
        advantages: Sequence[float],
        per: list[list[int]],
        tokens: int,
        stopped: Callable[[], bool],
        proximal: dict[int, list[float]] | None,
    ) -> BackwardPass:
        """A minibatch's gradients (replica r: ``samples`` at ``per[r]``, the loss over the
        minibatch's ``tokens``) on every replica at once, summed over them on each; what
        their backward passes measured, added up."""

        def backward(replica: PeftTrainer, share: list[int]) -> BackwardPass:
            return replica.backward(
                job, [samples[i] for i in share], [advantages[i] for i in share], tokens,
                stopped, None if proximal is None else [proximal[i] for i in share],
            )  # fmt: skip

        running = [
            pool.submit(backward, r, share) for r, share in zip(self.replicas, per, strict=True)
        ]
        wait(running)  # every one has ended: raise the first
        passes = [f.result() for f in running]
        _sum_gradients([r.adapter_parameters(job) for r in self.replicas])
        return sum(passes[1:], passes[0])


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
