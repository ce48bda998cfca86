"""Resuming a real run: the steps each job made durable.

A resumed job that had made k steps durable (its journal says so, and the adapter store
holds version k with its optimizer state) is submitted again at version k
(:func:`marlaas.drive.inbox.workload_inbox`): the scheduler goes on from step k, with the
versions and group numbers it would have had, so a resumed run's log reads as the
continuation it is. Its clock starts where the journal ends: jobs that arrive later arrive
that much earlier in the new part.
"""

from __future__ import annotations

import shutil

from marlaas.core.workload import Workload, WorkloadError
from marlaas.executors.adapter_store import AdapterStore


class NothingToResumeError(WorkloadError):
    """``--resume`` on a run whose jobs have all trained every step."""


class ResumeError(WorkloadError):
    """A run that cannot be continued exactly (a durable version lost its optimizer state)."""


def check_resumable(
    store: AdapterStore, workload: Workload, durable: dict[str, int] | None
) -> dict[str, int]:
    """Each job's resume offset: its last durable version (``durable``, from the journal;
    None for a run from before journals: the store's newest version), capped at its steps.

    Versions the store holds beyond a job's durable one were written by a step that was
    never journaled (killed between its sync and its journal line): they are removed, and
    that step is trained again. Raises ResumeError when a durable version lacks its
    optimizer state.
    """
    offsets = {}
    for job in workload.jobs:
        name = job.name
        done = (store.latest(name) or 0) if durable is None else durable.get(name, 0)
        for newer in store.versions(name):
            if newer > done:
                shutil.rmtree(store.path(name, newer))
        offset = min(done, job.rl.steps)
        if offset and durable is not None and not store.has_optimizer(name, done):
            raise ResumeError(
                f"{name}: version {done} in {store.root} has no optimizer state; the run "
                "cannot be continued exactly (train it again without --resume)"
            )
        offsets[name] = offset
    return offsets
