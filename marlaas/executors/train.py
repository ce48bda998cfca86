"""One real training run, end to end: what ``marlaas train`` does (also used by the tests).

The scheduler core, driven by the one loop (marlaas.drive) over the real executor
(marlaas.executors.real; its backends here or on Ray: ``ray``), writes its run folder in
place, as it trains: ``adapters/`` (every version, the newest with its optimizer state) and
``journal.jsonl`` (every record, and each step once durable: see
:mod:`marlaas.executors.journal`). At the end the event log, summary and reward curves are
rendered from the journal, over every part of the run. ``--resume`` continues a run that was
stopped (Ctrl-C, SIGTERM, ``kill -9``, a crash) after its last durable step.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from marlaas.core.feasibility import check_some_fit
from marlaas.core.policies import Policy
from marlaas.core.scheduler import Scheduler
from marlaas.core.workload import Workload
from marlaas.drive import Observer, RunResult, drive
from marlaas.drive.inbox import workload_inbox
from marlaas.drive.loop import OnEnded
from marlaas.drive.progress import StepProgress
from marlaas.envs import resolve_env
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backends import (
    EngineSizing,
    model_dir_of,
    require_training_stack,
    resolve_backend,
)
from marlaas.executors.history import history_events, history_points, history_result
from marlaas.executors.host_share import HostShare
from marlaas.executors.journal import JOURNAL_FILE, Journal, read_journal, read_run_journal
from marlaas.executors.journal_observer import JournalObserver
from marlaas.executors.memory import MemoryMonitor, release_large_blocks
from marlaas.executors.open_real import open_real_executor
from marlaas.executors.outputs import (
    ADAPTERS_DIR,
    real_summary,
    rewards_frame,
    write_real_files,
)
from marlaas.executors.resume import (
    NothingToResumeError,
    check_resumable,
    check_same_workload,
    identity,
)
from marlaas.executors.tracking import RewardFeed, check_tracker, open_tracker
from marlaas.executors.yardstick import YARDSTICK_KEYS
from marlaas.out_folder import claim
from marlaas.output.manifest import write_manifest

REAL = "real"


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
    on_ended: OnEnded | None = None,
    ray: str | None = None,
    **options,
) -> tuple[pd.DataFrame, dict, pd.DataFrame, RunResult]:
    """Train every job of ``workload`` for real into the run folder ``out``.

    Without ``resume`` an earlier finished real run in ``out`` is replaced (an unfinished one
    is refused: resume it), kept aside until the new run's first durable step: it comes back
    if the new one fails or is stopped before (marlaas.output.claim.Claim.in_place); a fresh
    run that does leaves ``out`` as it was (missing, or empty), so that the same command may
    run again. With ``resume``, each job continues after its last durable step (adapter and
    optimizer state; fewer ``rl.steps`` than a job has done is refused), and the run's
    history goes on. ``ray``: None to run the engines, trainers and
    environments in this process, else the Ray cluster they run on as actors (``local``,
    ``auto`` or an address: :func:`~marlaas.executors.open_real.open_real_executor`).
    ``options`` go to the executor and its backends (generators, trainers, micro_batch_size,
    activation_checkpointing, max_model_len, chat_template). ``observers`` see every
    completion (see marlaas.drive). ``tracker`` (``tensorboard`` or ``wandb``) also logs
    every job's training statistics per step under ``out/<tracker>/`` as they finish (a
    resumed run appends). Each job is submitted at its arrival (a resumed one at its last
    durable version); ``on_ended`` hears of each job as it ends (a refused one: the run goes on;
    when every job would be, it is an InfeasibleWorkloadError before any model loads).
    Returns (events, summary, rewards, result), each over the whole
    history; ``out/workload.json`` keeps the workload for ``marlaas replay``.

    Memory: freed blocks of 256 KiB and more go back to the system from the start (see
    marlaas.executors.memory: process-wide). The summary's ``memory`` holds the peak resident
    memory of this process and of its child processes (an engine core, if the backend starts
    one), sampled from before the models load to the end of this part of the run, in MB, and
    their ratio to the model's weight files; rewards.csv holds the resident memory of the
    process tree after every training step (``rss_mb``).
    """
    require_training_stack("train_run")
    if tracker is not None:  # a missing package fails at once, before --out is touched
        check_tracker(tracker)
    release_large_blocks()
    out = Path(out)
    if seed is not None and seed != workload.seed:
        # the run's seed is its workload's: journaled with it, so that --resume with another
        # seed (other prompts, other samples) is refused, and written to workload.json
        workload = workload.model_copy(update={"seed": seed})
    _check_runnable(workload)
    with claim(out, REAL, allow_partial=resume) as target:  # --out first: before any work
        backend = "external" if options.get("generators") else resolve_backend(backend)
        model_dir = model_dir_of(workload, base_dir)
        # a finished run replaced stays aside until this one's first durable step
        with target.in_place(replace=not resume) as keep:
            store = AdapterStore(out / ADAPTERS_DIR)
            journaled = read_run_journal(out)
            durable = journaled.versions if journaled.parts else None  # None: a run before journals
            if resume:  # before anything in the run folder changes
                check_same_workload(journaled.workload, workload, model_dir)
            finished = target.existing_status == "finished"
            offsets = check_resumable(store, workload, durable, finished) if resume else {}
            left = any(offsets.get(j.name, 0) < j.rl.steps for j in workload.jobs)
            if not left and finished:
                raise NothingToResumeError(f"{workload.name}: every job has already trained "
                                           "all its steps; nothing to resume")  # fmt: skip
            write_manifest(out, REAL, "partial")
            track = None
            if tracker is not None:  # before the models load
                config = _tracker_config(workload, policy, backend, seed)
                track = open_tracker(tracker, out, run_name=out.name, config=config)
            try:
                with MemoryMonitor() as memory, HostShare() as host:
                    outside_clock: dict[str, dict[str, float]] = {}
                    engine_steps = None
                    if not left:  # every step was durable: only the outputs were missing
                        result = _no_work(workload, policy, seed)
                    else:
                        journal = Journal(out / JOURNAL_FILE, journaled.parts, journaled.end_s,
                                          offsets, identity(workload, model_dir),
                                          on_durable=keep)  # fmt: skip
                        # listing the journal from its first line on: one emptied, zeroed
                        # or removed later is refused, not read as a run from before journals
                        write_manifest(out, REAL, "partial")
                        memory.offset_s = journaled.end_s
                        try:
                            result, outside_clock, engine_steps = _train_part(
                                workload, journal, store, model_dir, backend, policy, seed,
                                progress, observers, on_ended, offsets, journaled.end_s,
                                options, track, memory, ray,
                            )  # fmt: skip
                        finally:
                            journal.close()
                journaled = read_journal(out / JOURNAL_FILE)
                events = history_events(journaled)
                steps = {j.name: j.rl.steps for j in workload.jobs}
                result = history_result(result, journaled, events, steps, workload.jobs)
                rewards = rewards_frame(history_points(journaled))
                summary = real_summary(workload, result, events, rewards, backend, offsets,
                                       memory.summary(model_dir),
                                       executor="local" if ray is None else "ray",
                                       outside_clock=outside_clock,
                                       host=host.summary() if ray is None else {})  # fmt: skip
                if track is not None:
                    track.log_run(summary)
            finally:
                if track is not None:
                    track.close()
            keep()
            write_real_files(out, events, summary, rewards, workload, memory.timeline(),
                             engine_steps)  # fmt: skip
            write_manifest(out, REAL, "finished")
    return events, summary, rewards, result


def _check_runnable(workload: Workload) -> None:
    """Refuse before any model loads: an environment that cannot run here (no code
    sandbox), or a workload none of whose jobs can ever fit its cluster."""
    for name in sorted({j.env.name for j in workload.jobs}):
        resolve_env(name).check_runtime()
    check_some_fit(workload.jobs, workload.cluster)


def _train_part(
    workload, journal, store, model_dir, backend, policy, seed, progress, observers, on_ended,
    versions, start_s, options, track, memory, ray,
) -> tuple[RunResult, dict[str, dict[str, float]], pd.DataFrame]:  # fmt: skip
    """Drive one part of the run (the first, or a resumed one: each job submitted at its
    last durable version, the arrivals ``start_s`` earlier), journaling it (and feeding
    ``track``, a tracker, each training step's statistics); ``memory``'s timeline counts on
    the run's clock from the end of the setup. Returns the result, what the engines did
    outside the clock (each one's warm-up [s] and yardstick [s per token] before it started,
    and the yardstick again after the work: the summary's ``engine_warmup_s``,
    ``engine_yardstick_s_per_token`` and ``engine_yardstick_end_s_per_token``), and the
    engines' steps (marlaas.executors.engine_steps) on the run's clock."""
    scheduler = Scheduler.for_workload(workload, policy, seed)
    total = sum(max(0, j.rl.steps - versions.get(j.name, 0)) for j in workload.jobs)
    sizing = EngineSizing.of_workload(workload)
    with open_real_executor(
        sizing, scheduler.cluster, store=store, model_dir=model_dir, backend=backend,
        seed=scheduler.seed, env_workers=workload.cluster.env_workers, ray=ray, **options,
    ) as executor, StepProgress(
        total, "training", enabled=progress, postfix=executor.latest_rewards
    ) as bar:  # fmt: skip
        memory.zero = executor.clock_zero
        keeper = JournalObserver(scheduler, executor, journal)
        feeds = [RewardFeed(executor.rewards, [track.log_step])] if track is not None else []
        result = drive(
            scheduler, executor, workload_inbox(workload, versions, start_s),
            observers=[keeper, bar, *feeds, *observers], on_ended=on_ended,
        )  # fmt: skip
        keeper.finish(result.records)
        steps = executor.engine_steps(start_s)
        after = executor.yardstick_again()
    yardsticks = dict(zip(YARDSTICK_KEYS, (executor.yardstick_s_per_token, after), strict=True))
    outside_clock = {"engine_warmup_s": executor.warmup_s, **yardsticks}
    return result, outside_clock, steps


def _no_work(workload: Workload, policy, seed: int | None) -> RunResult:
    scheduler = Scheduler.for_workload(workload, policy, seed)
    return RunResult(
        records=[], makespan_s=0.0, job_finish_s={}, policy=scheduler.policy.name,
        settings=scheduler.mechanism.as_dict(),
        seed=workload.seed if seed is None else seed, wall_s=0.0, events=0,
    )  # fmt: skip


def _tracker_config(workload: Workload, policy, backend: str, seed) -> dict:
    """What a tracker records about the run (W&B's config)."""
    name = policy if isinstance(policy, str) else getattr(policy, "name", workload.policy)
    return {
        "workload": workload.name, "policy": name or workload.policy, "backend": backend,
        "seed": workload.seed if seed is None else seed,
        "jobs": [j.name for j in workload.jobs],
    }  # fmt: skip
