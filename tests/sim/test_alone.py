"""Each job's completion time alone, and the slowdowns a run's summary measures against it."""

from __future__ import annotations

from pathlib import Path

import pytest

import marlaas.sim.alone as alone_module
from marlaas.core.workload import parse_workload
from marlaas.metrics.fairness import jain_index
from marlaas.sim.alone import alone_times, distinct
from marlaas.sim.run import simulate_run
from marlaas.workload_file import apply_overrides, load_workload

SMALL = Path(__file__).resolve().parents[2] / "traces" / "small.yaml"


@pytest.fixture(scope="module")
def small():
    return load_workload(SMALL)


def _only(workload, index: int, **changes):
    job = workload.jobs[index].model_copy(update=changes)
    return workload.model_copy(update={"jobs": [job]})


def test_a_job_alone_from_t0_has_a_slowdown_of_exactly_one(small):
    one = _only(small, 3)
    alone = alone_times(one)
    _, summary = simulate_run(one, "fair", alone_s=alone)
    fairness = summary["metrics"]["fairness"]
    assert fairness["slowdown_max"] == 1.0 and fairness["jain_slowdown"] == 1.0
    assert summary["alone_s"] == alone


def test_the_slowdowns_of_a_shared_run_are_its_jcts_over_the_alone_times(small):
    one_by_one = apply_overrides(small, {"scheduling.preset": "sequential"})
    alone = alone_times(one_by_one)
    _, summary = simulate_run(one_by_one, "fifo", alone_s=alone)
    finish, arrivals = summary["job_finish_s"], summary["arrivals"]
    slowdowns = [(finish[j] - arrivals[j]) / alone[j] for j in finish]
    fairness = summary["metrics"]["fairness"]
    assert fairness["jain_slowdown"] == pytest.approx(jain_index(slowdowns))
    assert fairness["slowdown_max"] == pytest.approx(max(slowdowns))
    # the first job runs alone, with the draws of a job alone; each later one waits for
    # those before it, one after the other
    jct = [finish[j] - arrivals[j] for j in finish]
    assert slowdowns[0] == 1.0 and min(slowdowns[1:]) > 1.0
    assert jct == sorted(jct) and len(set(jct)) == len(jct)
    assert fairness["jain_jct"] == pytest.approx(jain_index(jct))


def test_without_alone_times_there_is_no_slowdown(small):
    _, summary = simulate_run(small, "fifo")
    fairness = summary["metrics"]["fairness"]
    assert fairness["jain_slowdown"] is None and fairness["slowdown_max"] is None
    assert fairness["jain_jct"] is not None


def test_an_alone_time_ignores_identity_and_arrival_and_is_simulated_once(small, monkeypatch):
    job = small.jobs[0]
    twin = job.model_copy(update={"name": "other", "tenant": "zed", "arrival_s": 500.0,
                                  "weight": 3.0, "deadline_s": 10.0})  # fmt: skip
    longer = job.model_copy(
        update={"name": "longer", "rl": job.rl.model_copy(update={"steps": 12})}
    )
    workload = small.model_copy(update={"jobs": [job, twin, longer]})
    calls = []
    real = alone_module.alone_time
    monkeypatch.setattr(alone_module, "alone_time", lambda *a: calls.append(a) or real(*a))
    times = alone_times(workload)
    assert len(calls) == 2 and times[job.name] == times["other"] < times["longer"]
    assert len(distinct([(workload, 0), (workload, 0), (workload, 1)])) == 4


def test_a_job_that_cannot_run_alone_has_no_alone_time(small):
    spec = small.jobs[0].model_dump() | {"name": "huge", "prompt_tokens": {
        "dist": "constant", "value": 200_000}}  # fmt: skip
    huge = type(small.jobs[0]).model_validate(spec)
    times = alone_times(small.model_copy(update={"jobs": [small.jobs[0], huge]}))
    assert times["huge"] is None and times[small.jobs[0].name] > 0


def test_the_estimate_of_a_job_bound_by_its_training_is_near_its_time_alone():
    """A tool job of 128 prompts a step trains longer than it generates; the core's
    estimate left training out and said 0.67x its simulated alone time (756 s against
    1,129 s; 987 s with training, 0.87x: the first step's generation, before any training,
    is not counted). Simulated, h100-7b profile."""
    from marlaas.core.estimates import AloneCluster, WorkEstimate
    from marlaas.core.scheduler import Scheduler

    job = {"name": "tool", "tenant": "t", "rl": {"steps": 16, "prompts_per_step": 128,
           "group_size": 8, "max_new_tokens": 1024, "turns": 4, "max_staleness": 2},
           "prompt_tokens": {"dist": "lognormal", "median": 600, "sigma": 0.3},
           "response_tokens": {"dist": "lognormal", "median": 267, "sigma": 1.0},
           "env": {"name": "calculator", "observation_tokens": 300,
                   "latency_s": {"dist": "lognormal", "median": 1.0, "sigma": 1.0}}}  # fmt: skip
    cluster = {"pools": [{"name": "rollout", "role": "inference", "devices": 36},
                         {"name": "train", "role": "training", "devices": 4,
                          "devices_per_trainer": 4}]}  # fmt: skip
    workload = parse_workload({"name": "w", "cluster": cluster, "jobs": [job]})
    simulated = alone_times(workload)["tool"]
    scheduler = Scheduler.for_workload(workload)
    scheduler.submit(workload.jobs[0], 0.0)
    job = next(iter(scheduler.jobs.values()))
    generation_only = WorkEstimate.of(job.spec, AloneCluster(trainer_devices=10**9), 2)
    assert 0.8 < job.alone_s / simulated < 1.2
    assert job.alone_s - simulated < simulated - 16 * generation_only.step_alone_s
