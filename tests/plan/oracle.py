"""A stand-in for the simulator in the plan's tests: each job's completion time is a
formula of the pool sizes (monotone unless told otherwise), so searches run in
milliseconds."""

from __future__ import annotations

import numpy as np

from marlaas.core.workload import parse_workload


def workload(deadlines: dict[str, float], **extra):
    """A workload of len(deadlines) jobs with those deadlines [s]."""
    jobs = [{"name": name, "tenant": f"t{i}", "deadline_s": d}
            for i, (name, d) in enumerate(deadlines.items())]  # fmt: skip
    cluster = {"pools": [{"name": "gen", "role": "inference", "devices": 4},
                         {"name": "fit", "role": "training", "devices": 2}]}  # fmt: skip
    return parse_workload({"name": "oracle", "jobs": jobs, "cluster": cluster, **extra})


class Oracle:
    """``execute``'s signature: job i takes ``gen[i] / inference + fit[i] / training`` seconds
    (times ``1 + 0.01 * seed``), plus ``bump`` seconds where ``bump(inference, training)``
    says; it counts the runs it was given."""

    def __init__(self, gen: list[float], fit: list[float], bump=None, policy_speed=None) -> None:
        self.gen, self.fit, self.bump = gen, fit, bump or (lambda i, t: 0.0)
        self.policy_speed = policy_speed or {}
        self.runs = 0

    def __call__(self, runs, workers=None, progress=False):
        summaries = []
        for run in runs:
            w = run.workload
            pools = {p.role: p.devices for p in w.cluster.pools}
            i, t = pools["inference"], pools["training"]
            speed = self.policy_speed.get(run.policy, 1.0) * (1 + 0.01 * run.seed)
            jct = {
                job.name: (g / i + f / t) * speed + self.bump(i, t)
                for job, g, f in zip(w.jobs, self.gen, self.fit, strict=True)
            }
            deadlines = w.deadlines_s()
            summaries.append({
                "deadlines_s": deadlines,
                "missed_deadlines": [j for j, d in deadlines.items() if jct[j] > d],
                "job_finish_s": jct,
                "arrivals": {j.name: 0.0 for j in w.jobs},
                "metrics": {"makespan_s": max(jct.values()),
                            "jct_p90_s": float(np.percentile(list(jct.values()), 90))},
                "wall_s": 0.0,
            })  # fmt: skip
        self.runs += len(runs)
        return [{} for _ in runs], summaries
