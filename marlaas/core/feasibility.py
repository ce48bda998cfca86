"""Up-front checks that every job can run on its cluster at all (else it would stall)."""

from __future__ import annotations

from collections.abc import Sequence

from marlaas.core.jobs import JobState
from marlaas.core.prompts import prompt_cap
from marlaas.core.workload import Workload


class InfeasibleWorkloadError(ValueError):
    """A job that can never run on this cluster (e.g. a group larger than an engine)."""


def check_feasible(workload: Workload, jobs: Sequence[JobState]) -> None:
    """Raise :class:`InfeasibleWorkloadError` naming the first job whose group can never fit
    an empty engine (sequences, or KV tokens at its last turn with the longest prompt the job
    can draw) or the environment workers."""
    engine, env_workers = workload.cluster.engine, workload.cluster.env_workers
    for job in jobs:
        rl = job.spec.rl
        # the last turn holds the prompt, every earlier turn's response and observation (at
        # most max_new_tokens and observation_tokens per sample), and its own room
        longest = prompt_cap(job.spec)
        per_turn = rl.group_size * (rl.max_new_tokens + job.spec.env.observation_tokens)
        need = (
            rl.group_size * longest + (rl.turns - 1) * per_turn + rl.group_size * rl.max_new_tokens
        )
        if rl.group_size > engine.max_seqs or need > engine.kv_tokens:
            raise InfeasibleWorkloadError(
                f"jobs[{job.index}] ({job.name}): one group needs {rl.group_size} seqs and "
                f"{need:,} KV tokens with its longest prompt ({longest:,} tokens per sample), "
                f"but an engine has {engine.max_seqs} seqs and {engine.kv_tokens:,} tokens "
                f"(cluster.engine; rl.max_prompt_tokens truncates prompts)"
            )
        if rl.group_size > env_workers:
            raise InfeasibleWorkloadError(
                f"jobs[{job.index}] ({job.name}): group_size {rl.group_size} exceeds "
                f"cluster.env_workers {env_workers}"
            )
