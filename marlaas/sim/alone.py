"""Each job's completion time alone: the reference a job's slowdown is measured against.

A job's slowdown is its completion time in a shared run / its completion time alone (the
queueing-theory slowdown; Themis' finish-time fairness rho, Mahajan et al., NSDI 2020). Its
time alone is simulated: the job as the only job on the same cluster, with the same
scheduling settings, cost model and seed, arriving at t = 0, under ``fifo`` (one job: the
order does not matter, and the reference must not depend on the policy being judged). The
draws of a job alone are those of the first job of a workload (draws are seeded by a job's
position), so a job's alone time is the expected cost of its work, not a replay of its
shared run's draws. Jobs that differ only in name, tenant, weight, arrival, deadline or
cancellation have the same alone time: :func:`alone_key` says which simulations are the
same, so that a sweep or a cycled workload simulates each once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tqdm import tqdm

from marlaas.core.feasibility import InfeasibleWorkloadError, check_some_fit
from marlaas.core.job_spec import JobSpec
from marlaas.core.workload import Workload
from marlaas.sim.cost_model import CostModel

ALONE_POLICY = "fifo"
"""The policy a job alone runs under (one job: only placement ties could differ)."""
_IDENTITY = {"name": "job", "tenant": "tenant", "weight": 1.0, "arrival_s": 0.0,
             "cancel_after_s": None, "deadline_s": None}  # fmt: skip
"""What a job alone is given in place of its identity and its limits: it runs to the end."""


def alone_workload(workload: Workload, job: JobSpec) -> Workload:
    """``workload`` with ``job`` as its only job, arriving at t = 0, identity erased."""
    return workload.model_copy(update={"jobs": [job.model_copy(update=_IDENTITY)]})


def alone_key(workload: Workload, job: JobSpec, seed: int) -> str:
    """The identity of ``job``'s alone simulation: equal keys, equal alone times."""
    one = alone_workload(workload, job).model_dump(mode="json", exclude={"name", "arrivals"})
    return json.dumps([one, seed], sort_keys=True, default=str)


def alone_time(one: Workload, seed: int, cost: CostModel | None = None) -> float | None:
    """The completion time [s] of the only job of ``one`` (see :func:`alone_workload`), or
    None when it cannot run on the cluster at all."""
    from marlaas.sim.run import simulate

    try:
        return simulate(one, ALONE_POLICY, seed, cost=cost, check=False).makespan_s
    except InfeasibleWorkloadError:
        return None


def alone_times(
    workload: Workload,
    seed: int | None = None,
    cost: CostModel | None = None,
    progress: bool = False,
) -> dict[str, float | None]:
    """{job name: its completion time alone [s] (None: it cannot run on the cluster)} for
    every job of ``workload`` (``seed``: default the workload's; ``cost``: default its cost
    model), simulating each distinct job once; ``progress``: a progress bar on stderr.
    Raises InfeasibleWorkloadError, as the run itself would, when no job could ever run."""
    check_some_fit(workload.jobs, workload.cluster)
    seed = workload.seed if seed is None else seed
    tasks = distinct([(workload, seed)])
    bar = tqdm(tasks.items(), desc="alone", unit="job", disable=not progress)
    return per_job(workload, seed, {key: alone_time(one, s, cost) for key, (one, s) in bar})


def distinct(pairs: Iterable[tuple[Workload, int]]) -> dict[str, tuple[Workload, int]]:
    """{alone key: (one-job workload, seed)} for every job of every (workload, seed) pair,
    each distinct simulation once: the work to hand out."""
    out: dict[str, tuple[Workload, int]] = {}
    for workload, seed in pairs:
        for job in workload.jobs:
            out.setdefault(alone_key(workload, job, seed), (alone_workload(workload, job), seed))
    return out


def per_job(
    workload: Workload, seed: int, times: dict[str, float | None]
) -> dict[str, float | None]:
    """{job name: alone time} of ``workload``'s jobs, from ``times`` by alone key."""
    return {job.name: times[alone_key(workload, job, seed)] for job in workload.jobs}
