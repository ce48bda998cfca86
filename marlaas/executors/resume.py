"""Resuming a real run: the steps each job made durable.

A resumed job that had made k steps durable (its journal says so, and the adapter store
holds version k with its optimizer state) is submitted again at version k
(:func:`marlaas.drive.inbox.workload_inbox`): the scheduler goes on from step k, with the
versions and group numbers it would have had, so a resumed run's log reads as the
continuation it is. Its clock starts where the journal ends: jobs that arrive later arrive
that much earlier in the new part.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from marlaas.core.job_spec import JobSpec, RLSettings
from marlaas.core.workload import Workload, WorkloadError
from marlaas.executors.adapter_store import AdapterError, AdapterStore


class NothingToResumeError(WorkloadError):
    """``--resume`` on a run whose jobs have all trained every step."""


class ResumeError(WorkloadError):
    """A run that cannot be continued exactly (a durable version lost its optimizer state)."""


def check_resumable(
    store: AdapterStore,
    workload: Workload,
    durable: dict[str, int] | None,
    finished: bool = False,
) -> dict[str, int]:
    """Each job's resume offset: its last durable version (``durable``, from the journal;
    None for a run from before journals: the store's newest version). ``finished``: the run
    ended (its manifest says so), so every version its store holds was journaled.

    Raises ResumeError, before anything in the store changes, when a job has done more steps
    than its ``rl.steps`` now (:func:`check_not_fewer_steps`), or when a durable version is
    missing, lacks its optimizer state or has a damaged file (:func:`cannot_continue`), or
    when a finished run's store holds a version its journal does not name. Only
    then are the versions the store holds beyond a job's durable one removed: they were
    written by a step that was never journaled (killed between its sync and its journal
    line), and that step is trained again. (A refused resume once removed them first: a
    journal cut short lost the trained adapters its lines no longer named.)
    """
    offsets = {}
    for job in workload.jobs:
        name = job.name
        offsets[name] = (store.latest(name) or 0) if durable is None else durable.get(name, 0)
    check_not_fewer_steps(workload, offsets)
    if durable is not None:
        for job in workload.jobs:
            done = offsets[job.name]
            lost = cannot_continue(store, job.name, done, job.lora_rank)
            if lost:
                newest = store.latest(job.name) or 0
                if newest > done:  # a step's durable version keeps what it needs to go on
                    lost += (f" (its store holds versions up to {newest}, but the run's journal "
                             f"names {done} as its last durable one: was the journal cut "
                             "short?)")  # fmt: skip
                raise ResumeError(f"{lost} (train it again into a new --out folder)")
            newest = store.latest(job.name) or 0
            if finished and newest > done:  # a finished run journaled every version it saved
                raise ResumeError(
                    f"{job.name}: the finished run's store in {store.root} holds versions up "
                    f"to {newest}, but its journal names {done} as the last durable one: was "
                    "the journal cut short? Not removing them (put the journal back, or train "
                    "again into a new --out folder)"
                )
    for name, done in offsets.items():
        drop_undurable(store, name, done, check_optimizer=False)
    return offsets


def check_not_fewer_steps(workload: Workload, done: dict[str, int]) -> None:
    """Raise ResumeError naming the first job of ``workload`` that has ``done`` more steps
    than its ``rl.steps``: a run resumed with fewer steps than it made once went on, and its
    rewards.csv kept the steps past the new count."""
    for job in workload.jobs:
        steps = done.get(job.name, 0)
        if steps > job.rl.steps:
            raise ResumeError(
                f"--resume: job {job.name} has done {steps} steps, more than its rl.steps "
                f"{job.rl.steps} now; resume with rl.steps of at least {steps}, or train "
                "into a new --out folder"
            )


def cannot_continue(store: AdapterStore, job: str, done: int, rank: int | None = None) -> str:
    """Why ``job`` cannot go on exactly from its durable version ``done``: the version is
    missing, has no optimizer state or a damaged one, or (given its LoRA ``rank``) its
    adapter's files are missing or damaged (:meth:`AdapterStore.check`); empty when it can.
    Found here, the damaged file is named before any model loads: loading it failed four
    times later, naming no file."""
    if not done:
        return ""
    where = f"version {done} in {store.root}"
    if not store.path(job, done).is_dir():
        return f"{job}: {where} is missing; the run cannot be continued"
    if not store.has_optimizer(job, done):
        return f"{job}: {where} has no optimizer state; the run cannot be continued exactly"
    try:
        if rank is not None:
            store.check(job, done, rank)
        store.check_optimizer(job, done)
    except AdapterError as err:
        return f"{job}: {err}; the run cannot be continued exactly"
    return ""


def drop_undurable(
    store: AdapterStore, job: str, done: int, check_optimizer: bool = True,
    rank: int | None = None,
) -> str:  # fmt: skip
    """Remove ``job``'s versions past ``done`` (its last durable one, as its caller knows it
    for sure: they were saved by a step that never became durable); the reason it cannot go
    on exactly when version ``done`` is missing or damaged or lacks its optimizer state
    (checked with ``check_optimizer``: :func:`cannot_continue`, its adapter's files too given
    the job's LoRA ``rank``), else empty."""
    lost = cannot_continue(store, job, done, rank) if check_optimizer else ""
    for newer in store.versions(job):
        if newer > done:
            shutil.rmtree(store.path(job, newer))
    return lost


def base_model_identity(name: str, model_dir: Path | None = None) -> dict:
    """The base model a run's adapters are trained on: its name, and the SHA-256 of
    ``model_dir``'s config.json (a copy of the model elsewhere is the same model)."""
    config = None if model_dir is None else Path(model_dir) / "config.json"
    return {
        "base_model": name,
        "base_model_config": (
            hashlib.sha256(config.read_bytes()).hexdigest()
            if config is not None and config.is_file()
            else None
        ),
    }


def identity(workload: Workload, model_dir: Path | None = None) -> dict:
    """What a run's workload fixes about what its steps mean: the base model
    (:func:`base_model_identity`), the seed, and each job's tenant, LoRA rank, RL settings
    (but its number of steps: a run may be resumed to train longer), environment and
    dataset (its path, and the SHA-256 of its rows as split:
    :func:`marlaas.envs.job_dataset.dataset_digest`; None without one). The cluster and the
    schedule may change between the parts of a run; these may not."""
    return {
        **base_model_identity(workload.base_model.name, model_dir),
        "seed": workload.seed,
        "jobs": {
            job.name: {
                "tenant": job.tenant,
                "lora_rank": job.lora_rank,
                "rl": job.rl.model_dump(exclude={"steps"}),
                "env": {"name": job.env.name, "args": job.env.args},
                "dataset": _dataset_identity(job),
            }
            for job in workload.jobs
        },
    }


def _dataset_identity(job: JobSpec) -> dict | None:
    """``job``'s dataset as :func:`identity` records it: its path and the SHA-256 of its rows
    (:func:`marlaas.envs.job_dataset.dataset_digest`); None for a job without one."""
    from marlaas.envs.job_dataset import dataset_digest

    if job.dataset is None:
        return None
    return {"path": job.dataset.path, "sha256": dataset_digest(job)}


def check_run_base_model(run: Path, workload: Workload, model_dir: Path) -> None:
    """Raise ResumeError when the real run in ``run`` was trained on another base model
    than ``workload``'s (in ``model_dir``): its journal's :func:`base_model_identity` (the
    model's name and its config.json's digest) differs. Its adapters would not fit this
    model, or fit its shapes and mean nothing on its weights: ``evaluate`` scored them anyway
    (vLLM) or failed with a traceback (HF). A run without a journal, or from before the
    identity was recorded (or with a damaged journal), is not checked."""
    from marlaas.executors.journal import JOURNAL_FILE, JournalError, read_journal

    try:
        recorded = read_journal(run / JOURNAL_FILE).workload
    except JournalError:  # a damaged journal: the adapters may still be scored
        return
    if recorded is None:
        return
    now = base_model_identity(workload.base_model.name, model_dir)
    problems = [
        f"{key} {_short(recorded.get(key))} -> {_short(now[key])}"
        for key in ("base_model", "base_model_config")
        if key in recorded and recorded[key] != now[key]
    ]
    if problems:
        raise ResumeError(
            f"{run}: its adapters were trained on another base model than the workload's "
            f"{str(model_dir)!r} ({'; '.join(problems)}); give the workload the run was "
            "trained with"
        )


MAX_DIFFERENCES_SHOWN = 4


def check_same_workload(
    recorded: dict | None, workload: Workload, model_dir: Path | None = None
) -> None:
    """Raise ResumeError naming what differs when ``workload`` (on the base model in
    ``model_dir``) is not the one the run was started with (``recorded``: its
    :func:`identity`, from the journal; None for a run from before it was recorded: nothing
    to compare)."""
    if recorded is None:
        return
    now = identity(workload, model_dir)
    problems = [
        f"{key} {_short(recorded.get(key))} -> {_short(now[key])}"
        for key in ("base_model", "base_model_config", "seed")
        if recorded.get(key) != now[key]
    ]
    before, after = recorded.get("jobs", {}), now["jobs"]
    problems += [f"job {name} is not in the workload" for name in before if name not in after]
    problems += [f"job {name} is new" for name in after if name not in before]
    for name in (n for n in after if n in before):
        problems += [
            f"{name}: {field} {value!r} -> {after[name][field]!r}"
            for field, value in before[name].items()
            if field not in ("rl", "dataset") and after[name].get(field) != value
        ]
        problems += _rl_differences(name, before[name].get("rl", {}), after[name]["rl"])
        if "dataset" in before[name]:  # a run from before it was recorded: not compared
            problems += _dataset_differences(name, before[name]["dataset"], after[name]["dataset"])
    if problems:
        shown = "; ".join(problems[:MAX_DIFFERENCES_SHOWN])
        more = len(problems) - MAX_DIFFERENCES_SHOWN
        shown += f"; and {more} more" if more > 0 else ""
        seed_only = len(problems) == 1 and recorded.get("seed") != now["seed"]
        how = (f"resume with --seed {recorded.get('seed')}" if seed_only
               else "resume with that workload")  # fmt: skip
        raise ResumeError(
            f"--resume: the workload is not the one this run was started with ({shown}); "
            f"{how}, or train this one into a new --out folder"
        )


def _dataset_differences(name: str, before: dict | None, after: dict | None) -> list[str]:
    """Job ``name``'s dataset when its rows differ from those the run started with (the
    training order each group draws from would change under the resumed steps), naming the
    file; the same rows in a file moved elsewhere are the same dataset."""
    if not isinstance(before, dict) or after is None:
        if before == after:
            return []
        was, now = (d.get("path") if isinstance(d, dict) else d for d in (before, after))
        return [f"{name}: dataset {was!r} -> {now!r}"]
    if before.get("sha256") == after["sha256"]:
        return []
    moved = "" if before.get("path") == after["path"] else f" (it was {before.get('path')})"
    return [
        f"{name}: its dataset {after['path']}{moved} is not the one the run started with "
        f"(the SHA-256 of its rows {_short(before.get('sha256'))} -> "
        f"{_short(after['sha256'])}: edited since? put it back as it was)"
    ]


def _rl_differences(name: str, before: dict, after: dict) -> list[str]:
    """Job ``name``'s RL settings that differ, one line each; a setting the run's journal does
    not hold (one added since the run started) counts as its default, as the run trained."""
    defaults = {key: field.default for key, field in RLSettings.model_fields.items()}
    differences = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key, defaults.get(key)), after.get(key, defaults.get(key))
        if old != new:
            differences.append(f"{name}: rl.{key} {old!r} -> {new!r}")
    return differences


def _short(value) -> str:
    """A value as shown in a difference (a long digest cut to 12 characters)."""
    text = repr(value)
    return text[:13] + "...'" if isinstance(value, str) and len(value) > 16 else text
