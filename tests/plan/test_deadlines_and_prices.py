"""Deadlines and prices in a workload, and the deadlines missed in a run's metrics."""

from __future__ import annotations

import pandas as pd
import pytest

from marlaas.core.workload import WorkloadError, parse_workload
from marlaas.metrics.deadlines import missed_deadlines
from marlaas.sim.run import simulate_run
from marlaas.workload_file import load_with_overrides

JOBS = [
    {"name": "a", "tenant": "ann", "deadline_s": 100},
    {"name": "b", "tenant": "ann"},
    {"name": "c", "tenant": "bob"},
]


def test_a_jobs_deadline_then_its_tenants():
    w = parse_workload({"jobs": JOBS, "tenants": {"ann": {"job_deadline_s": 50}}})
    assert w.deadlines_s() == {"a": 100.0, "b": 50.0}  # c has none


@pytest.mark.parametrize("bad", [0, -1, float("nan")])
def test_a_deadline_is_positive(bad):
    with pytest.raises(WorkloadError, match=r"jobs\[0\]\.deadline_s"):
        parse_workload({"jobs": [{"name": "a", "tenant": "t", "deadline_s": bad}]})


def test_prices_by_pool_then_profile_then_default():
    prices = {"device_hour": 3.0, "pools": {"train": 5.0}, "profiles": {"a100-7b": 1.5},
              "source": "a price list"}  # fmt: skip
    cluster = {"pools": [{"name": "rollout", "role": "inference", "devices": 2},
                         {"name": "train", "role": "training", "devices": 1}]}  # fmt: skip
    w = parse_workload({"jobs": JOBS, "cluster": cluster, "prices": prices})
    assert w.prices.device_hour_price("train", "a100-7b") == 5.0
    assert w.prices.device_hour_price("rollout", "a100-7b") == 1.5
    assert w.prices.device_hour_price("rollout", None) == 3.0
    prices["pools"] = {"trainers": 5.0}
    with pytest.raises(WorkloadError, match=r"prices\.pools: no pool named 'trainers'"):
        parse_workload({"jobs": JOBS, "cluster": cluster, "prices": prices})


def test_missed_deadlines_are_late_or_unfinished_jobs():
    jobs = pd.DataFrame({"job": ["a", "b", "c"], "jct_s": [90.0, 120.0, float("nan")]})
    deadlines = {"a": 100.0, "b": 100.0, "c": 500.0, "d": 10.0}  # d never ran
    assert missed_deadlines(jobs, deadlines) == ["b", "c", "d"]
    assert missed_deadlines(jobs, {"a": 90.0}) == []  # on the deadline is in time
    assert missed_deadlines(jobs, None) == []


def test_a_runs_summary_counts_its_missed_deadlines():
    tiny = ["jobs.*.rl.steps=1", "jobs.*.rl.prompts_per_step=1"]
    w = load_with_overrides("traces/small.yaml", [*tiny, "jobs.*.deadline_s=1",
                                                  "jobs.code-d.deadline_s=3000"])  # fmt: skip
    _, summary = simulate_run(w)
    assert summary["deadlines_s"] == {"math-a": 1.0, "math-b": 1.0, "tools-c": 1.0,
                                      "code-d": 3000.0}  # fmt: skip
    assert summary["metrics"]["deadlines_missed"] == 3
    assert summary["missed_deadlines"] == ["math-a", "math-b", "tools-c"]
    _, summary = simulate_run(load_with_overrides("traces/small.yaml", tiny))
    assert summary["deadlines_s"] == {} and summary["metrics"]["deadlines_missed"] is None
    assert summary["missed_deadlines"] == []
