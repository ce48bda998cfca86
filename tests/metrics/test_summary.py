"""marlaas.metrics.summary: a run's headline numbers as strict JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from marlaas.metrics.jobs import job_table
from marlaas.metrics.summary import summarize


def test_summarize_is_strict_json(medium_log):
    df, arrivals = medium_log
    s = summarize(df, arrivals, weights={"t0": 2.0})
    text = json.dumps(s, allow_nan=False)
    assert json.loads(text) == s
    for key in [
        "makespan_s",
        "utilization",
        "utilization_by_pool",
        "jct_mean_s",
        "jct_p90_s",
        "idle_by_cause_device_s",
        "staleness_mean",
        "staleness_max",
        "adapter_swaps",
        "fairness",
        "n_jobs",
        "n_devices",
        "n_rows",
    ]:
        assert key in s
    assert s["n_rows"] == len(df) and s["n_jobs"] == 8 and s["n_devices"] == 8
    assert s["adapter_swaps"] == int((df["kind"] == "adapter_load").sum())
    assert 0 <= s["utilization"] <= 1
    jobs = job_table(df, arrivals)
    assert s["jct_mean_s"] == pytest.approx(jobs["jct_s"].mean())
    assert s["jct_p90_s"] == pytest.approx(np.percentile(jobs["jct_s"], 90))
    assert sum(s["idle_by_cause_device_s"].values()) == pytest.approx(
        (df.loc[df.kind == "idle", "end_s"] - df.loc[df.kind == "idle", "start_s"]).sum()
    )
    assert s["staleness_max"] <= 2
