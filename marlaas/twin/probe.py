"""A probe workload: the engine at many batch sizes, lengths and adapters, so that
calibration can tell its costs apart.

One schedule's real runs batch about as many sequences all the time (fair's about 31 on
traces/twin/show-b.yaml, sequential's about 12), so the rows of its event log cannot tell a
cost per iteration from a cost per running sequence (docs/twin.md: the per-sequence term's
95% interval includes 0 on either schedule alone), and a profile fitted from them is wrong
by the batch-size term on any other schedule. The probe's jobs are copies of one of the
workload's jobs (its environment, prompts and adapter rank), one prompt group per step of
``size`` samples for sizes from 1 to what an engine holds, each at the job's answer length
and at a quarter of it (``-short``: iterations that vary apart from the batch, so that a
prefill's cost is not an iteration's), all admitted at once under fifo (so that groups of
several adapters share the engine, in batches of many sizes). Calibrating from a run and its
probe's run (``marlaas calibrate RUN PROBE_RUN``) sees the same engine, model and environment
over all of them: in simulation it recovers every engine term (tests/test_probe_workload.py).
"""

from __future__ import annotations

from marlaas.core.feasibility import why_infeasible
from marlaas.core.job_spec import JobSpec
from marlaas.core.workload import Workload, parse_workload

PROBE_STEPS = 2
"""Training steps of each probe job: two generations per job (a fresh adapter and a
trained one, a load between them)."""
SHORT_SHARE = 4
"""A short probe job's answers are at most this share of the job's: max_new_tokens // 4."""
PROBE_TENANT = "probe"


def default_sizes(workload: Workload) -> list[int]:
    """Powers of two from 1 up to what one engine and the environment workers hold, and that
    largest size itself."""
    limit = min(workload.cluster.engine.max_seqs, workload.cluster.env_workers)
    sizes = [1 << i for i in range(limit.bit_length()) if 1 << i <= limit]
    return sizes if sizes[-1] == limit else [*sizes, limit]


def probe_workload(
    workload: Workload, sizes: list[int] | None = None, job: str | None = None
) -> Workload:
    """``workload``'s cluster, base model and seed with two probe jobs per batch size (the
    job's answer length and a quarter of it), each a copy of job ``job`` (default: the
    first) with ``size`` samples in its one group per step, all admitted at once under
    fifo. Without ``sizes``: :func:`default_sizes` that an engine holds with the job's
    longest prompt; a size asked for that it cannot hold is a ValueError."""
    template = _template(workload, job)
    chosen = sorted(set(sizes or default_sizes(workload)))
    cluster = workload.cluster
    unfit = {s: why for s in chosen if (why := why_infeasible(_probe_job(template, s), cluster))}
    if unfit and sizes:
        size, why = next(iter(unfit.items()))
        raise ValueError(f"size {size}: {why}")
    kept = [s for s in chosen if s not in unfit]
    if not kept:
        raise ValueError(f"no batch size fits an engine with {template.name!r}'s prompts: "
                         f"{next(iter(unfit.values()))}")  # fmt: skip
    short = max(1, template.rl.max_new_tokens // SHORT_SHARE)
    jobs = [_probe_job(template, s) for s in kept]
    if short < template.rl.max_new_tokens:
        jobs += [_probe_job(template, s, short) for s in kept]
    data = workload.model_dump(mode="json")
    data.update(
        name=f"{workload.name}-probe", policy="fifo", arrivals=None, scheduling={},
        jobs=[spec.model_dump(mode="json") for spec in jobs],
    )  # fmt: skip
    return parse_workload(data, source=f"the probe of {workload.name}", schema=type(workload))


def _template(workload: Workload, job: str | None) -> JobSpec:
    if job is None:
        return workload.jobs[0]
    for spec in workload.jobs:
        if spec.name == job:
            return spec
    names = ", ".join(spec.name for spec in workload.jobs)
    raise ValueError(f"no job named {job!r} (jobs: {names})")


def _probe_job(template: JobSpec, size: int, max_new_tokens: int | None = None) -> JobSpec:
    """A copy of ``template`` with one group of ``size`` samples per step, one turn, on-policy
    (and answers of at most ``max_new_tokens``: a ``-short`` job)."""
    rl = template.rl.model_copy(update={
        "steps": PROBE_STEPS, "prompts_per_step": 1, "group_size": size, "turns": 1,
        "minibatches": 1, "max_staleness": 0, "resample_alike": 0,
        "max_new_tokens": max_new_tokens or template.rl.max_new_tokens,
    })  # fmt: skip
    env = template.env.model_copy(update={"observation_tokens": 0, "alike_groups": 0.0})
    name = f"probe-{size}" + ("-short" if max_new_tokens else "")
    return template.model_copy(update={
        "name": name, "tenant": PROBE_TENANT, "weight": 1.0, "arrival_s": 0.0,
        "cancel_after_s": None, "deadline_s": None, "rl": rl, "env": env,
    })  # fmt: skip
