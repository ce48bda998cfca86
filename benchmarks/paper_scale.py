"""A paper-scale workload built in code: 32 jobs, 64 GPUs, 100 steps each.

A third of the jobs are multi-turn (3 turns), a quarter have slow (10 s) environments;
responses are lognormal with sigma 1.0 (p99 about 10x the median), truncated at
max_new_tokens.
"""

from __future__ import annotations

from marlaas.core.workload import Workload, parse_workload


def env_median_s(job: int) -> float:
    """Median environment latency of job ``job`` [s]: every fourth job has a slow one."""
    return 10.5 if job % 4 == 1 else 0.5


def paper_scale_workload(
    jobs: int = 32, gpus: int = 64, steps: int = 100, max_new_tokens: int = 1024
) -> Workload:
    """The benchmark workload; ``max_new_tokens`` scales every response length with it."""
    job_list = [
        {
            "name": f"job{i}",
            "tenant": f"tenant{i % 8}",
            "rl": {
                "steps": steps,
                "prompts_per_step": 8,
                "group_size": 8,
                "max_new_tokens": max_new_tokens,
                "turns": 3 if i % 3 == 0 else 1,
                "max_staleness": 1,
            },
            "response_tokens": {"dist": "lognormal", "median": max_new_tokens / 4, "sigma": 1.0},
            "env": {
                "latency_s": {
                    "dist": "lognormal",
                    "median": 10.5 if i % 4 == 1 else 0.5,
                    "sigma": 0.5,
                }
            },
        }
        for i in range(jobs)
    ]
    pools = [
        {"name": "rollout", "role": "inference", "devices": gpus * 3 // 4},
        {"name": "train", "role": "training", "devices": gpus // 4},
    ]
    # KV budget scaled with max_new_tokens so that doubling the lengths keeps concurrency.
    engine = {"kv_tokens": 120_000 * max_new_tokens // 1024}
    return parse_workload(
        {"name": f"paper-scale-{jobs}", "jobs": job_list,
         "cluster": {"pools": pools, "engine": engine}}
    )  # fmt: skip
