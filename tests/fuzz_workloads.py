"""A seeded generator of random workloads, and the checks every simulated run must pass.

Used by ``tests/sim/test_fuzz_workloads.py`` (a fixed-seed sample, CI-sized) and runnable on
its own for a long hunt::

    .venv/bin/python tests/fuzz_workloads.py --runs 2000 --seed 0

:func:`random_workload` draws a **valid** workload as plain data (what a YAML file holds),
covering the schema widely: 1-20 tenants and jobs, weights, arrivals (at t = 0, spread, from an
arrivals CSV or a request trace), every length distribution kind with extreme but legal
parameters, single- and multi-turn jobs, environment latencies, group sizes, staleness bounds,
LoRA ranks, cluster shapes, cost models, quotas, cancels and deadlines. Each stays small: a
simulation of it takes well under a second or two on one core.

:func:`check_run` simulates one and checks what must hold: it simulates, or it is refused
with one :class:`~marlaas.core.workload.WorkloadError` line (or an
:class:`~marlaas.core.feasibility.InfeasibleWorkloadError` when no job fits); every job ends
finished, cancelled or refused; the summary holds no NaN or infinity; utilization is within 0
and 1; no job finishes before it arrives; the makespan is at least every finish; and the same
workload and seed give the same event log twice.

:func:`mutate` turns a valid workload into an invalid one (a wrong type, a negative, huge or
NaN number, a missing field, an unknown name, a huge list) and returns the path of the field
it broke, which the error must name.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"

POLICIES = ("affinity", "bottleneck", "cp-srpt", "fair", "fifo", "horizon", "las-srpt",
            "priority", "round-robin", "split-progress", "srtf", "themis")  # fmt: skip
"""Every policy ``marlaas policies`` lists."""
PRESETS = (None, None, "sequential", "sync")
COST_PROFILES = (None, None, "h100-7b", "a100-7b", "cpu-tiny")
ENVS = ("arithmetic", "calculator", "target_char")
"""Registered environments that draw their own prompts (no dataset needed)."""

MAX_GROUP_TURNS = 240
"""Group-turns (steps x prompts x turns, over jobs) of one generated workload: keeps a run to
about a second on one core."""


def _pick(rng: np.random.Generator, options: tuple | list) -> Any:
    """One of ``options``, uniformly."""
    return options[int(rng.integers(len(options)))]


def _loguniform(rng: np.random.Generator, low: float, high: float) -> float:
    """A float spread evenly in log space over [low, high]."""
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


# ------------------------------------------------------------------------------ distributions


def random_length(rng: np.random.Generator, cap: int) -> dict:
    """A token-length distribution of any kind, values within [0, cap] tokens (a lognormal's
    median within it; its tail is truncated where it is used)."""
    kind = _pick(rng, ("constant", "lognormal", "uniform", "empirical", "trace"))
    if kind == "constant":
        return {"dist": "constant", "value": int(_pick(rng, (0, 1, rng.integers(0, cap + 1))))}
    if kind == "lognormal":
        median = _pick(rng, (1e-6, 1.0, _loguniform(rng, 1, cap)))
        sigma = float(_pick(rng, (0.0, 5.0, rng.uniform(0, 2))))
        return {"dist": "lognormal", "median": float(min(median, cap)), "sigma": sigma}
    if kind == "uniform":
        low = int(rng.integers(0, cap + 1))
        return {"dist": "uniform", "low": low, "high": int(rng.integers(low, cap + 1))}
    if kind == "empirical":
        n = int(_pick(rng, (1, 2, rng.integers(1, 50))))
        return {"dist": "empirical", "values": [int(v) for v in rng.integers(0, cap + 1, n)]}
    path, fmt = _pick(rng, (("lengths_sample.csv", "csv"), ("azure_code_sample.csv", "azure"),
                            ("azure_conv_sample.csv", "azure"),
                            ("burstgpt_sample.csv", "burstgpt")))  # fmt: skip
    column = _pick(rng, ("prompt", "response"))
    return {"dist": "trace", "path": str(TRACES / path), "format": fmt, "column": column}


def random_latency(rng: np.random.Generator) -> dict:
    """An environment latency [s]: zero, tiny, long, or a lognormal whose p99.99 stays within
    a day (MAX_LATENCY_S)."""
    kind = _pick(rng, ("constant", "lognormal", "uniform", "empirical"))
    if kind == "constant":
        return {"dist": "constant", "value": float(_pick(rng, (0.0, 1e-9, 0.05, 3600.0)))}
    if kind == "lognormal":
        sigma = float(_pick(rng, (0.0, 0.5, 1.0, 2.0)))
        top = 86_400 / math.exp(3.7191 * sigma) * 0.99  # p99.99 within a day
        median = float(min(_pick(rng, (1e-6, 0.1, 2.0, 30.0, top)), top))
        return {"dist": "lognormal", "median": median, "sigma": sigma}
    if kind == "uniform":
        low = float(_pick(rng, (0.0, 0.01, 1.0)))
        return {"dist": "uniform", "low": low, "high": low + float(_pick(rng, (0.0, 0.5, 20.0)))}
    return {"dist": "empirical", "values": [float(v) for v in rng.exponential(2.0, 5)]}


# ------------------------------------------------------------------------------------ the jobs


def random_rl(rng: np.random.Generator, budget: int) -> dict:
    """A job's RL loop, its steps x prompts_per_step x turns within ``budget`` group-turns."""
    turns = int(_pick(rng, (1, 1, 1, 2, 3, int(rng.integers(1, 9)))))
    prompts = int(_pick(rng, (1, 2, 4, int(rng.integers(1, 9)))))
    steps = max(1, min(int(_pick(rng, (1, 2, 3, int(rng.integers(1, 8))))),
                       budget // (turns * prompts) or 1))  # fmt: skip
    group = int(_pick(rng, (1, 2, 8, int(rng.integers(1, 33)), 64)))
    if rng.random() < 0.03:  # the bounds themselves, on one group of one step
        turns, prompts, steps = int(_pick(rng, (1, 256))), 1, 1
        group = int(_pick(rng, (1, 1024)))
    rl: dict[str, Any] = {
        "steps": steps,
        "prompts_per_step": prompts,
        "group_size": group,
        "max_new_tokens": int(_pick(rng, (1, 16, 256, 1024, 4096, 1_048_576))),
        "turns": turns,
        "max_staleness": int(_pick(rng, (0, 1, 2, int(rng.integers(0, 6)), 1000))),
    }
    if rng.random() < 0.3:
        rl["max_prompt_tokens"] = int(_pick(rng, (1, 64, 2048)))
    if rng.random() < 0.2:
        rl["minibatches"] = int(rng.integers(1, prompts + 1))
    if rng.random() < 0.2 and group >= 2:
        rl["resample_alike"] = int(rng.integers(0, 3))
    if rng.random() < 0.1:  # the real trainer's settings: the simulator carries them along
        rl.update(temperature=0.0, learning_rate=10.0, clip_eps=1.0, clip_eps_high=10.0,
                  lr_staleness_damping=100.0)  # fmt: skip
    return rl


def random_job(rng: np.random.Generator, i: int, tenant: str, weight: float, budget: int) -> dict:
    """Job number ``i`` of ``tenant`` (who has ``weight``), within ``budget`` group-turns."""
    rl = random_rl(rng, budget)
    job: dict[str, Any] = {"name": f"job-{i}", "tenant": tenant, "weight": weight, "rl": rl}
    job["lora_rank"] = int(_pick(rng, (1, 8, 16, 64, 1024)))
    job["prompt_tokens"] = random_length(rng, int(_pick(rng, (64, 512, 4096))))
    job["response_tokens"] = random_length(rng, int(_pick(rng, (64, 1024, 8192))))
    if rng.random() < 0.1:  # both of one trace: drawn as pairs (marlaas.sim.turn_draws)
        pair = random_length(rng, 1)
        while pair["dist"] != "trace":
            pair = random_length(rng, 1)
        job["prompt_tokens"] = {**pair, "column": "prompt"}
        job["response_tokens"] = {**pair, "column": "response"}
    if rng.random() < 0.5:
        job["arrival_s"] = float(_pick(rng, (0.0, rng.uniform(0, 60), rng.uniform(0, 3600),
                                             1e8)))  # fmt: skip
    if rng.random() < 0.15:
        job["cancel_after_s"] = float(_pick(rng, (0.0, rng.uniform(0, 30), 1e6, 1e8)))
    if rng.random() < 0.2:
        job["deadline_s"] = float(_pick(rng, (1e-3, rng.uniform(1, 600))))
    env: dict[str, Any] = {"name": _pick(rng, ENVS), "latency_s": random_latency(rng)}
    if rng.random() < 0.1:
        env["timeout_s"] = float(_pick(rng, (1e-3, 86_400.0)))
    if rl["turns"] > 1 or rng.random() < 0.2:
        env["observation_tokens"] = int(_pick(rng, (0, 1, 64, 300)))
    if rng.random() < 0.3:
        env["alike_groups"] = float(_pick(rng, (0.0, 0.5, 1.0)))
    job["env"] = env
    return job


def random_jobs(rng: np.random.Generator) -> list[dict]:
    """1-20 jobs of 1-20 tenants, a tenant's jobs sharing its weight; their work within
    MAX_GROUP_TURNS in all."""
    n_jobs = int(_pick(rng, (1, 2, 4, int(rng.integers(1, 21)))))
    n_tenants = int(rng.integers(1, n_jobs + 1))
    weights = {f"t{k}": float(_pick(rng, (1.0, 2.0, 1e-6, 1e6, rng.uniform(0.1, 10))))
               for k in range(n_tenants)}  # fmt: skip
    budget = max(1, MAX_GROUP_TURNS // n_jobs)
    jobs = []
    for i in range(n_jobs):
        tenant = f"t{i % n_tenants}" if i < n_tenants else f"t{int(rng.integers(n_tenants))}"
        jobs.append(random_job(rng, i, tenant, weights[tenant], budget))
    return jobs


# --------------------------------------------------------------------------------- the cluster


def random_cluster(rng: np.random.Generator) -> dict:
    """Pools of both roles (1-3 of each), engine and trainer capacities, environment workers
    and shared compute."""
    pools = []
    for role in ("inference", "training"):
        for k in range(int(_pick(rng, (1, 1, 2, 3)))):
            per = int(_pick(rng, (1, 1, 2, 4)))
            devices = per * int(_pick(rng, (1, 1, 2, 3))) if role == "training" else \
                int(_pick(rng, (1, 2, 6, int(rng.integers(1, 17)))))  # fmt: skip
            pool = {"name": f"{role[:5]}{k}", "role": role, "devices": devices}
            if role == "training":
                pool["devices_per_trainer"] = per
            pools.append(pool)
    engine = {
        "max_seqs": int(_pick(rng, (1, 8, 64, 65536) if rng.random() < 0.2 else (256, 1024))),
        "kv_tokens": int(_pick(rng, (1, 4096, 10**12) if rng.random() < 0.2 else (10**6, 10**7))),
        "adapter_slots": int(_pick(rng, (1, 2, 8, 4096))),
        "prefix_caching": bool(rng.random() < 0.3),
        "dtype": _pick(rng, ("auto", "float32", "bfloat16")),
    }
    cluster = {
        "pools": pools,
        "engine": engine,
        "trainer": {"adapter_slots": int(_pick(rng, (1, 2, 8)))},
        "env_workers": int(_pick(rng, (1, 8, 64, 512, 1_000_000))),
        "shared_compute": _pick(rng, (False, False, True, "overlap")),
    }
    return cluster


def random_scheduling(rng: np.random.Generator, preset: str | None) -> dict:
    """A scheduling block: a preset, and the quotas and settings that agree with it."""
    block: dict[str, Any] = {}
    if preset:
        block["preset"] = preset
    if rng.random() < 0.3 and preset is None:
        block["placement"] = _pick(rng, ("disaggregated", "colocated"))
    if rng.random() < 0.2 and preset is None:
        block["barrier"] = bool(rng.random() < 0.5)
    if rng.random() < 0.2 and preset is None:
        block["staleness_cap"] = int(_pick(rng, (0, 1, 3)))
    if rng.random() < 0.2 and preset != "sequential":
        block["max_active_jobs"] = int(_pick(rng, (1, 2, 5)))
    for key in ("max_queued_jobs", "tenant_max_queued_jobs"):
        if rng.random() < 0.15:
            block[key] = int(_pick(rng, (0, 1, 3)))
    if rng.random() < 0.15:
        block["tenant_max_active_jobs"] = int(_pick(rng, (1, 2)))
    return block


def random_cost(rng: np.random.Generator) -> dict | None:
    """A workload's own cost model: none, or a few fields at legal extremes."""
    if rng.random() < 0.7:
        return None
    options = {
        "decode_base_ms": (1e-3, 6.0, 1000.0),
        "decode_per_seq_ms": (0.0, 0.026, 10.0),
        "prefill_base_ms": (0.0, 4.46),
        "prefill_tokens_per_s": (1.0, 42_443.0, 1e7),
        "adapter_load_s": (0.0, 0.08, 30.0),
        "train_tokens_per_s": (10.0, 12_500.0, 1e7),
        "train_overhead_s": (0.0, 0.2, 60.0),
        "trainer_swap_s": (0.0, 0.12),
        "sync_s": (0.0, 0.07),
        "colocated_switch_s": (0.0, 1.4),
        "train_shares_prompts": (False, True),
        "overlap_decode_slowdown": (1.0, 2.0, 100.0),
        "overlap_train_slowdown": (1.0, 2.0, 100.0),
        "adapter_load_wait_iterations": (0.0, 3.0),
    }
    keys = list(options)
    chosen = rng.choice(len(keys), int(rng.integers(1, 5)), replace=False)
    return {keys[k]: _pick(rng, options[keys[k]]) for k in chosen}


# ---------------------------------------------------------------------------------- arrivals


def random_arrivals(rng: np.random.Generator, jobs: list[dict], folder: Path) -> dict | None:
    """An ``arrivals:`` section, writing its file into ``folder``: an arrivals CSV matched
    by job or by tenant (submit_s or ISO submit_time, with sizes), or a request trace."""
    roll = rng.random()
    if roll < 0.8:
        return None
    scale = float(_pick(rng, (0.0, 0.1, 1.0, 10.0)))
    if roll < 0.9:
        path = folder / "arrivals.csv"
        by_tenant = rng.random() < 0.5
        iso = rng.random() < 0.3
        lines = ["job,tenant,submit_time,size" if iso else "job,tenant,submit_s,size"]
        for job in jobs:
            t = float(rng.uniform(0, 100))
            when = f"2024-01-01T00:{int(t) // 60:02d}:{t % 60:06.3f}" if iso else f"{t:.3f}"
            size = str(int(rng.integers(1, 4))) if rng.random() < 0.5 else ""
            lines.append(f"{'' if by_tenant else job['name']},{job['tenant']},{when},{size}")
        path.write_text("\n".join(lines) + "\n")
        return {"path": str(path), "match": "tenant" if by_tenant else "job", "time_scale": scale}
    if roll < 0.95:  # a bundled request trace's first timestamps (200 rows each)
        path, fmt = _pick(rng, (("azure_conv_sample.csv", "azure"),
                                ("burstgpt_sample.csv", "burstgpt")))  # fmt: skip
        return {"path": str(TRACES / path), "format": fmt, "time_scale": scale}
    path = folder / "requests.csv"
    times = np.sort(rng.uniform(0, 50, len(jobs) + int(rng.integers(0, 3))))
    rows = [f"{t:.3f},{int(rng.integers(1, 500))},{int(rng.integers(1, 500))}" for t in times]
    path.write_text("timestamp_s,prompt_tokens,response_tokens\n" + "\n".join(rows) + "\n")
    return {"path": str(path), "format": "csv", "time_scale": scale}


# ------------------------------------------------------------------------------ the workload


def random_workload(rng: np.random.Generator, folder: Path) -> dict:
    """A valid workload as plain data (``folder`` holds any arrivals file it names)."""
    jobs = random_jobs(rng)
    preset = _pick(rng, PRESETS)
    data: dict[str, Any] = {
        "name": "fuzz",
        "seed": int(_pick(rng, (0, 1, 2**32 - 1, int(rng.integers(0, 1000))))),
        "policy": _pick(rng, POLICIES),
        "cluster": random_cluster(rng),
        "scheduling": random_scheduling(rng, preset),
        "jobs": jobs,
    }
    tenants = sorted({j["tenant"] for j in jobs})
    if rng.random() < 0.3:
        data["tenants"] = {
            t: {key: val for key, val in (
                ("max_active_jobs", int(_pick(rng, (1, 2)))),
                ("max_queued_jobs", int(_pick(rng, (0, 1, 5)))),
                ("job_deadline_s", float(_pick(rng, (1.0, 100.0)))),
            ) if rng.random() < 0.5}
            for t in tenants[: int(rng.integers(1, len(tenants) + 1))]
        }  # fmt: skip
    if rng.random() < 0.2:
        data["base_model"] = {"name": "fuzz-7b"}
        pools = [p["name"] for p in data["cluster"]["pools"]]
        data["prices"] = {"device_hour": 2.5, "pools": {pools[0]: 1e6}, "currency": "EUR"}
    cost = random_cost(rng)
    if cost:
        data["cost"] = cost
    arrivals = random_arrivals(rng, jobs, folder)
    if arrivals:
        data["arrivals"] = arrivals
    return data


def random_run(rng: np.random.Generator, folder: Path) -> dict:
    """One run to try: the workload, a policy (None: the workload's), a seed and a cost
    profile (None: the workload's cost model)."""
    return {
        "workload": random_workload(rng, folder),
        "policy": _pick(rng, (None, *POLICIES)),
        "seed": _pick(rng, (None, 0, int(rng.integers(0, 2**32)))),
        "cost": _pick(rng, COST_PROFILES),
    }


def write_workload(data: dict, folder: Path, name: str = "w.yaml") -> Path:
    """``data`` as a YAML workload file in ``folder``."""
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --------------------------------------------------------------------------------- the checks


class PropertyFailure(AssertionError):
    """A run broke a property every run must keep."""


def _finite(value: Any, where: str) -> None:
    """Raise PropertyFailure naming the first NaN or infinity inside ``value``."""
    if isinstance(value, float) and not math.isfinite(value):
        raise PropertyFailure(f"summary {where} is {value}")
    if isinstance(value, dict):
        for key, item in value.items():
            _finite(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for k, item in enumerate(value):
            _finite(item, f"{where}[{k}]")


def check_summary(summary: dict, result) -> None:
    """The summary's and the result's figures are sane (see the module docstring)."""
    _finite({k: v for k, v in summary.items() if k != "workload"}, "")
    metrics = summary["metrics"]
    eps = 1e-9
    for name, value in [("utilization", metrics["utilization"]),
                        *metrics["utilization_by_pool"].items()]:  # fmt: skip
        if not -eps <= value <= 1 + eps:
            raise PropertyFailure(f"utilization {name} = {value}, outside 0..1")
    total = metrics["n_devices"] * metrics["makespan_s"]  # device-seconds [s]
    idle = sum(metrics["idle_by_cause_device_s"].values())
    per_device = "processor_utilization" not in metrics  # else: one processor's busy share
    if (
        per_device
        and total > 0
        and abs(metrics["utilization"] * total + idle - total) > 1e-6 * total + 1e-6
    ):
        raise PropertyFailure(f"busy {metrics['utilization'] * total} + idle {idle} device-s "
                              f"is not the {total} device-s of the run")  # fmt: skip
    ends = set(summary["job_states"].values())
    if not ends <= {"finished", "cancelled", "refused"}:
        raise PropertyFailure(f"jobs ended as {sorted(ends)}")
    if set(summary["job_states"]) != set(summary["tenants"]):
        raise PropertyFailure("not every job of the workload has an end state")
    for name, outcome in result.jobs.items():
        finish = result.job_finish_s.get(name)
        if outcome.state == "finished":
            if finish is None or finish + eps < outcome.arrival_s:
                raise PropertyFailure(f"{name} finished at {finish} before arriving at "
                                      f"{outcome.arrival_s}")  # fmt: skip
            if finish > result.makespan_s + eps:
                raise PropertyFailure(f"{name} finished at {finish} after the makespan "
                                      f"{result.makespan_s}")  # fmt: skip
        if outcome.end_s + eps < outcome.arrival_s:
            raise PropertyFailure(f"{name} ended at {outcome.end_s} before arriving")
    if not math.isfinite(result.makespan_s) or result.makespan_s < 0:
        raise PropertyFailure(f"makespan {result.makespan_s}")


def check_outcomes(workload, result) -> None:
    """Each job ended as its workload says it may: it arrived when the workload says; only a
    job with cancel_after_s is cancelled, at or after that time; a finished one published
    every step, by then; a refused one says why."""
    eps = 1e-6
    for job in workload.jobs:
        outcome = result.jobs.get(job.name)
        if outcome is None:
            raise PropertyFailure(f"{job.name} has no outcome")
        if abs(outcome.arrival_s - job.arrival_s) > eps * max(1.0, job.arrival_s):
            raise PropertyFailure(f"{job.name} arrived at {outcome.arrival_s}, not "
                                  f"{job.arrival_s}")  # fmt: skip
        cancel = None if job.cancel_after_s is None else job.arrival_s + job.cancel_after_s
        if outcome.state == "cancelled" and (cancel is None or outcome.end_s < cancel - eps):
            raise PropertyFailure(f"{job.name} cancelled at {outcome.end_s}, cancel {cancel}")
        if outcome.state == "finished":
            if outcome.published != job.rl.steps:
                raise PropertyFailure(f"{job.name} finished at version {outcome.published} "
                                      f"of {job.rl.steps}")  # fmt: skip
            if cancel is not None and outcome.end_s > cancel + eps:
                raise PropertyFailure(f"{job.name} finished at {outcome.end_s}, after its "
                                      f"cancel at {cancel}")  # fmt: skip
        if outcome.state == "refused" and not outcome.reason:
            raise PropertyFailure(f"{job.name} refused without a reason")


def check_completion_times(workload, result, summary: dict) -> None:
    """The summary's completion times and missed deadlines agree with each job's finish: the
    longest JCT is the longest finish after arrival, and a job with a deadline missed it
    when it did not finish or finished later than its deadline after its arrival."""
    jct = {name: result.job_finish_s[name] - o.arrival_s for name, o in result.jobs.items()
           if o.state == "finished"}  # fmt: skip
    metrics, tol = summary["metrics"], 1e-6
    if jct and abs(metrics["jct_max_s"] - max(jct.values())) > tol * max(1.0, max(jct.values())):
        raise PropertyFailure(f"jct_max_s {metrics['jct_max_s']} but the jobs' JCTs {jct}")
    for name, deadline in workload.deadlines_s().items():
        late = name not in jct or jct[name] > deadline
        if abs(jct.get(name, math.inf) - deadline) <= tol * max(1.0, deadline):
            continue  # on the deadline itself: either answer is fair
        if late != (name in summary["missed_deadlines"]):
            raise PropertyFailure(f"{name}: JCT {jct.get(name)}, deadline {deadline}, listed "
                                  f"as missed: {name in summary['missed_deadlines']}")  # fmt: skip


def simulate_checked(path: Path, policy, seed, cost) -> tuple[Any, Any, dict] | str:
    """Load and simulate the workload file ``path`` twice; return (result, events, summary)
    after checking both runs' properties, or the refusal's one line."""
    import marlaas
    from marlaas.core.feasibility import InfeasibleWorkloadError
    from marlaas.core.workload import WorkloadError
    from marlaas.sim.run import simulate_logged

    try:
        workload = marlaas.load_workload(path)
        profile = marlaas.api._profile(cost, workload)
        result, events, summary = simulate_logged(workload, policy, seed, False, profile)
    except (WorkloadError, InfeasibleWorkloadError) as err:
        line = str(err)
        if "\n" in line or not line.strip():
            raise PropertyFailure(f"refusal is not one line: {line!r}") from err
        return line
    check_summary(summary, result)
    check_outcomes(workload, result)
    check_completion_times(workload, result, summary)
    again, events2, _ = simulate_logged(workload, policy, seed, False, profile)
    if not events.equals(events2) or again.makespan_s != result.makespan_s:
        raise PropertyFailure("the same workload and seed gave two event logs")
    return result, events, summary


def check_run(run: dict, folder: Path, cli: bool = False) -> str:
    """Simulate one :func:`random_run` and check it; return "ok" or the refusal's line.
    With ``cli`` also run ``marlaas simulate`` on it, which must agree (see :func:`check_cli`).
    Raises PropertyFailure (or whatever the simulator raised) when a property breaks."""
    path = write_workload(run["workload"], folder)
    out = simulate_checked(path, run["policy"], run["seed"], run["cost"])
    if cli:
        events = None if isinstance(out, str) else out[1]
        check_cli(path, run, folder / "run", events)
    return out if isinstance(out, str) else "ok"


def cli_args(path: Path, run: dict, out: Path) -> list[str]:
    """``marlaas simulate`` arguments for ``run`` of the workload file ``path``."""
    args = [str(ROOT / ".venv" / "bin" / "marlaas"), "simulate", str(path), "--out", str(out),
            "--quiet"]  # fmt: skip
    for flag in ("policy", "seed", "cost"):
        if run[flag] is not None:
            args += [f"--{flag}", str(run[flag])]
    return args


def check_cli(path: Path, run: dict, out: Path, events=None) -> str:
    """``marlaas simulate`` exits 0 and writes the event log the API gave (``events``; in
    another process: another hash seed), or, when the API refused the run (``events`` None),
    exits 2 with one ``marlaas: error:`` line on stderr; returns that line ("" for none)."""
    refused = events is None
    import shutil
    import subprocess

    shutil.rmtree(out, ignore_errors=True)
    done = subprocess.run(cli_args(path, run, out), capture_output=True, text=True, timeout=300)
    errors = [line for line in done.stderr.splitlines() if line.startswith("marlaas: error:")]
    said = ("marlaas: error:", "marlaas: warning:", "marlaas: the ")  # "the": plain Python
    other = [line for line in done.stderr.splitlines() if not line.startswith(said)]
    if done.returncode not in (0, 2) or other or (done.returncode == 2) != bool(errors):
        raise PropertyFailure(f"simulate exited {done.returncode}: {done.stderr[-2000:]}")
    if len(errors) > 1 or refused != (done.returncode == 2):
        raise PropertyFailure(f"simulate exited {done.returncode} (API refused: {refused}): "
                              f"{done.stderr[-2000:]}")  # fmt: skip
    if done.returncode == 0:
        import json

        import pandas as pd

        summary = json.loads((out / "summary.json").read_text())
        _finite({k: v for k, v in summary.items() if k != "workload"}, "")
        if not pd.read_parquet(out / "events.parquet").equals(events):
            raise PropertyFailure("marlaas simulate wrote another event log than the API's")
    return errors[0] if errors else ""


# ------------------------------------------------------------------------------- mutations


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a leaf or a node inside ``node`` (dict keys and list indices)."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for k, value in enumerate(node):
            out += _paths(value, (*prefix, k))
    return out


BAD_VALUES = (-1, -1e9, 10**30, float("nan"), float("inf"), "text", "", True, [], {},
              [1] * 20_000, None, 0.5, 1e308, "x" * 5000, -0.0, 2**64)  # fmt: skip
"""Values a mutation puts in place of a field's."""


def mutate(data: dict, rng: np.random.Generator) -> tuple[dict, str, str]:
    """A copy of ``data`` with one field made wrong: (the copy, the field's dotted path as an
    error names it, what was done)."""
    data = copy.deepcopy(data)
    data.pop("arrivals", None)  # its file's rows are not the point here
    data.pop("prices", None)  # names pools: a pool's change would be refused there
    paths = [p for p in _paths(data) if p[0] not in ("name", "cost", "tenants", "arrivals")]
    path = paths[int(rng.integers(len(paths)))]
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    how = _pick(rng, ("value", "value", "value", "drop", "unknown"))
    if how == "drop" and isinstance(parent, dict):
        del parent[last]
    elif how == "unknown" and isinstance(parent, dict):
        parent["no_such_field"] = 1
        path = (*path[:-1], "no_such_field")
    else:
        how = "value"
        bad = BAD_VALUES[int(rng.integers(len(BAD_VALUES)))]
        parent[last] = bad
        how = f"value {str(bad)[:20]}"
    return data, _dotted(path), how


def _names(line: str, field: str) -> bool:
    """Whether the error ``line`` names ``field`` or the mapping that holds it (a dropped or
    unknown field, a distribution's parameter named by its kind: ``x.lognormal.median``)."""
    parent = field.rsplit(".", 1)[0] if "." in field else field
    parent = parent.rsplit("[", 1)[0] if parent.endswith("]") and "." not in field else parent
    if field.endswith(".weight") and "a weight belongs to a tenant" in line:
        return True  # a job's weight against its tenant's other jobs: the error names both
    return field in line or parent in line


def _dotted(path: tuple) -> str:
    """``("jobs", 2, "rl", "steps")`` as an error names it: ``jobs[2].rl.steps``."""
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else f".{key}"
    return text.lstrip(".")


# ------------------------------------------------------------------------------- the hunt


def hunt(runs: int, seed: int, mutations: bool) -> int:
    """Try ``runs`` random runs (and as many mutations); print each failure; return the
    number of failures."""
    rng = np.random.default_rng(seed)
    failures = 0
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for k in range(runs):
            run = random_run(rng, folder)
            start = time.perf_counter()
            try:
                outcome = check_run(run, folder, cli=k % 25 == 0)
                label = "ok" if outcome == "ok" else "refused"
            except Exception as err:  # a hunt reports every failure
                failures += 1
                label = "FAIL"
                bad = folder / f"fail-{seed}-{k}.yaml"
                write_workload(run["workload"], folder, bad.name)
                keep = Path("/tmp/fuzz-fails") / bad.name
                keep.parent.mkdir(exist_ok=True)
                keep.write_text(bad.read_text())
                print(f"[{k}] FAIL {type(err).__name__}: {str(err)[:300]} "
                      f"policy={run['policy']} seed={run['seed']} cost={run['cost']} -> {keep}",
                      flush=True)  # fmt: skip
            took = time.perf_counter() - start
            if took > 10:
                keep = Path("/tmp/fuzz-fails") / f"slow-{seed}-{k}.yaml"
                keep.parent.mkdir(exist_ok=True)
                keep.write_text(yaml.safe_dump(run["workload"], sort_keys=False))
                print(f"[{k}] slow: {took:.1f} s policy={run['policy']} seed={run['seed']} "
                      f"cost={run['cost']} -> {keep}", flush=True)  # fmt: skip
            counts[label] = counts.get(label, 0) + 1
            if mutations:
                failures += _hunt_mutation(run["workload"], rng, folder, k)
    print(counts)
    return failures


def check_mutation(data: dict, rng: np.random.Generator, folder: Path, cli: bool = False) -> str:
    """Load a :func:`mutate` of the valid workload ``data``: it loads (a dropped field has a
    default) or is refused with one WorkloadError line naming the field, through the API and,
    with ``cli``, ``marlaas simulate`` (exit 2, that line). Returns the line ("" if it
    loaded); raises PropertyFailure otherwise."""
    import marlaas
    from marlaas.core.workload import WorkloadError

    bad, field, how = mutate(data, rng)
    path = write_workload(bad, folder, "m.yaml")
    try:
        marlaas.load_workload(path)
    except WorkloadError as err:
        line = str(err)
        if "\n" in line or not _names(line, field) or len(line) > 2000:
            raise PropertyFailure(f"{field} {how}: poor error: {line[:300]}") from err
    except Exception as err:
        raise PropertyFailure(f"{field} {how}: {type(err).__name__}: {str(err)[:300]}") from err
    else:
        return ""
    if cli:
        run = {"policy": None, "seed": None, "cost": None}
        said = check_cli(path, run, folder / "run")
        if said != f"marlaas: error: {line}":
            raise PropertyFailure(f"{field} {how}: marlaas simulate said {said[:300]!r}")
    return line


def _hunt_mutation(data: dict, rng: np.random.Generator, folder: Path, k: int) -> int:
    """:func:`check_mutation`, printing a failure; 1 for one, else 0."""
    try:
        check_mutation(data, rng, folder, cli=k % 25 == 0)
    except PropertyFailure as err:
        print(f"[{k}] MUTATION {err}", flush=True)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python tests/fuzz_workloads.py --runs N --seed S [--mutations]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mutations", action="store_true")
    args = parser.parse_args(argv)
    return 1 if hunt(args.runs, args.seed, args.mutations) else 0


if __name__ == "__main__":
    sys.exit(main())
