"""Whether a job can ever run on a cluster: the check the scheduler makes at submission."""

from __future__ import annotations

from marlaas.core.cluster_spec import ClusterSpec
from marlaas.core.job_spec import JobSpec
from marlaas.core.prompts import largest_prompts_kv, prompt_cap


class InfeasibleWorkloadError(ValueError):
    """A workload none (or, for a sweep, one) of whose jobs can ever run on its cluster."""


def why_infeasible(spec: JobSpec, cluster: ClusterSpec) -> str | None:
    """Why one group of the job can never fit an empty engine (sequences, or KV tokens at its
    last turn with the longest prompt the job can draw) or the environment workers; None
    when it can."""
    engine, rl = cluster.engine, spec.rl
    # the last turn holds the prompt (its shared blocks once with prefix caching), every
    # earlier turn's response and observation (at most max_new_tokens and observation_tokens
    # per sample), and its own room
    longest = prompt_cap(spec)
    prompt, prompts = largest_prompts_kv(spec, engine.prefix_caching)
    per_turn = rl.group_size * (rl.max_new_tokens + spec.env.observation_tokens)
    need = prompts + (rl.turns - 1) * per_turn + rl.group_size * rl.max_new_tokens
    if rl.group_size > engine.max_seqs or need > engine.kv_tokens:
        which = f"its longest prompt ({longest:,} tokens per sample)" if prompt == longest else (
            f"a prompt of {prompt:,} tokens per sample (its longest: {longest:,}; prefix "
            "caching shares whole blocks)")  # fmt: skip
        return (
            f"one group needs {rl.group_size} seqs and {need:,} KV tokens with {which}, but "
            f"an engine has {engine.max_seqs} seqs and {engine.kv_tokens:,} tokens "
            "(cluster.engine; rl.max_prompt_tokens truncates prompts)"
        )
    if rl.group_size > cluster.env_workers:
        return f"group_size {rl.group_size} exceeds cluster.env_workers {cluster.env_workers}"
    return None


def infeasible_jobs(jobs: list[JobSpec], cluster: ClusterSpec) -> list[str]:
    """``jobs[i] (name): reason`` for every job of a workload that can never run."""
    out = []
    for i, spec in enumerate(jobs):
        reason = why_infeasible(spec, cluster)
        if reason is not None:
            out.append(f"jobs[{i}] ({spec.name}): {reason}")
    return out


def check_some_fit(jobs: list[JobSpec], cluster: ClusterSpec) -> None:
    """Raise :class:`InfeasibleWorkloadError` when no job of a batch workload can ever run on
    its cluster (each would be refused: the run would do nothing). Jobs that cannot run
    among others that can are refused by the scheduler, one by one, as they arrive."""
    infeasible = infeasible_jobs(jobs, cluster)
    if infeasible and len(infeasible) == len(jobs):
        raise InfeasibleWorkloadError(f"every job would be refused: {'; '.join(infeasible)}")
