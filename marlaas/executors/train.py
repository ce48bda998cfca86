"""One real training run, end to end: what ``marlaas train`` does (also used by the tests).

The scheduler core, driven by the one loop (marlaas.drive) over a :class:`LocalExecutor`,
then the run folder: the event log, the summary, reward curves and every adapter version.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from marlaas.core.policies import Policy
from marlaas.core.scheduler import Scheduler
from marlaas.core.workload import Workload
from marlaas.drive import Observer, RunResult, drive
from marlaas.drive.progress import StepProgress
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backends import model_dir_of, resolve_backend
from marlaas.executors.local import LocalExecutor
from marlaas.executors.memory import MemoryMonitor, release_large_blocks
from marlaas.executors.outputs import (
    ADAPTERS_DIR,
    KEPT_DIRS,
    check_real_run_folder,
    real_events,
    real_summary,
    rewards_frame,
    write_real_run,
)
from marlaas.executors.resume import remaining_workload, resume_offsets
from marlaas.executors.tracking import RewardFeed, open_tracker


def train_run(
    workload: Workload,
    out: str | Path,
    policy: Policy | str | None = None,
    *,
    resume: bool = False,
    base_dir: Path | None = None,
    backend: str = "auto",
    seed: int | None = None,
    progress: bool = True,
    observers: Sequence[Observer] = (),
    tracker: str | None = None,
    **options,
) -> tuple[pd.DataFrame, dict, pd.DataFrame, RunResult]:
    """Train every job of ``workload`` for real and write the run folder ``out``.

    Without ``resume`` the adapters of an earlier run in ``out`` are replaced; with it, each
    job continues from its newest saved version (adapter and optimizer state). ``options`` go
    to :class:`LocalExecutor` (generators, trainers, micro_batch_size,
    activation_checkpointing, max_model_len, chat_template). ``observers`` see every
    completion (see marlaas.drive). ``tracker``
    (``tensorboard`` or ``wandb``, see marlaas.executors.tracking) logs every job's training
    steps under ``out/<tracker>/`` as they finish (a fresh run starts a fresh log, a resumed
    one appends). Returns (events, summary, rewards, result).

    Memory: freed blocks of 256 KiB and more go back to the system from the start (see
    marlaas.executors.memory: process-wide); the summary's ``memory`` holds this process's
    peak resident memory (``peak_rss_mb``, ru_maxrss) and the run's, sampled from before the
    models load to the end (``run_peak_rss_mb``), in MB, and their ratio to the model's
    weight files; rewards.csv holds the resident memory after every training step.
    """
    release_large_blocks()
    out = Path(out)
    check_real_run_folder(out)
    backend = "external" if options.get("generators") else resolve_backend(backend)
    model_dir = model_dir_of(workload, base_dir)
    store = AdapterStore(out / ADAPTERS_DIR)
    if not resume:
        for name in KEPT_DIRS:
            shutil.rmtree(out / name, ignore_errors=True)
    offsets = resume_offsets(store, workload) if resume else {}
    scheduler = Scheduler(remaining_workload(workload, offsets), policy)
    total = sum(j.steps for j in scheduler.jobs)
    track = None
    if tracker is not None:  # before the models load: a missing package fails at once
        config = _tracker_config(workload, scheduler, backend, seed)
        track = open_tracker(tracker, out, run_name=out.name, config=config)
    try:
        with MemoryMonitor() as memory, LocalExecutor(
            scheduler.workload, scheduler.cluster, store=store, model_dir=model_dir,
            backend=backend, seed=seed, offsets=offsets, **options,
        ) as executor, StepProgress(
            total, "training", enabled=progress, postfix=executor.latest_rewards
        ) as bar:  # fmt: skip
            feeds = [RewardFeed(executor.rewards, [track.log_step])] if track else []
            result = drive(scheduler, executor, observers=[bar, *feeds, *observers])
        events = real_events(result, offsets)
        rewards = rewards_frame(executor.rewards)
        summary = real_summary(workload, result, events, rewards, backend, offsets,
                               memory.summary(model_dir))  # fmt: skip
        if track is not None:
            track.log_run(summary)
    finally:
        if track is not None:
            track.close()
    write_real_run(out, events, summary, rewards, workload)
    return events, summary, rewards, result


def _tracker_config(workload: Workload, scheduler: Scheduler, backend: str, seed) -> dict:
    """What a tracker records about the run (W&B's config)."""
    return {
        "workload": workload.name, "policy": scheduler.policy.name, "backend": backend,
        "seed": workload.seed if seed is None else seed,
        "jobs": [j.name for j in workload.jobs],
    }  # fmt: skip
