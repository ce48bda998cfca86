"""marlaas.metrics.utilization: per device, per pool, over time, and a shared processor's."""

from __future__ import annotations

import numpy as np
import pytest

from marlaas.metrics.devices import makespan
from marlaas.metrics.intervals import merge_intervals
from marlaas.metrics.utilization import (
    DEFAULT_TIME_BINS,
    utilization,
    utilization_by_pool,
    utilization_over_time,
)
from tests.metrics.examples import busy_reference


def test_utilization_bounds_and_pools(medium_log):
    df, _ = medium_log
    u = utilization(df)
    assert list(u.columns) == ["device", "pool", "busy_s", "utilization"]
    assert u["utilization"].between(0, 1).all()
    ref = busy_reference(df)
    assert u.set_index("device")["busy_s"].to_dict() == pytest.approx(ref)
    by_pool = utilization_by_pool(df)
    assert set(by_pool) == {"rollout", "train"}
    for pool, value in by_pool.items():
        assert value == pytest.approx(u.loc[u["pool"] == pool, "utilization"].mean())
    # natural device order
    assert u["device"].tolist()[:6] == [f"rollout/{i}" for i in range(6)]


@pytest.mark.parametrize("bin_s", [None, 7.3])
def test_utilization_over_time_integrates_to_busy_seconds(medium_log, bin_s):
    df, _ = medium_log
    series = utilization_over_time(df, bin_s)
    span = makespan(df)
    width = series["t_end_s"] - series["t_start_s"]
    assert series["t_start_s"].iloc[0] == 0 and series["t_end_s"].iloc[-1] == pytest.approx(span)
    if bin_s is None:
        assert len(series) == DEFAULT_TIME_BINS
    else:
        assert width.iloc[:-1].to_numpy() == pytest.approx(bin_s)
    u = utilization(df)
    for pool, devs in u.groupby("pool"):
        assert (series[pool] * width).sum() * len(devs) == pytest.approx(devs["busy_s"].sum())
        assert series[pool].between(0, 1 + 1e-12).all()
    assert (series["overall"] * width).sum() * len(u) == pytest.approx(u["busy_s"].sum())


def test_a_shared_processor_is_busy_once_however_many_devices_work_on_it():
    """Two colocated engines on one CPU (real-tiny under sequential): the run's utilization
    is the processor's busy fraction (the union of the devices' busy time), not the mean of
    the devices' (each counted busy while they share the processor)."""
    from marlaas.eventlog import records_to_frame
    from marlaas.runs import run_summary
    from marlaas.sim.run import simulate
    from marlaas.workload_file import load_workload

    for preset in ("sequential", None):
        workload = load_workload("traces/real-tiny.yaml", {
            "jobs.*.rl.steps": 3, **({"scheduling.preset": preset} if preset else {})})  # fmt: skip
        result = simulate(workload)
        events = records_to_frame(result.records)
        work = events[events["kind"].isin(["generate", "train"])]
        union = merge_intervals(
            np.zeros(len(work), dtype=np.int64), work["start_s"].to_numpy(),
            work["end_s"].to_numpy(),
        )  # fmt: skip
        busy = float((union[2] - union[1]).sum()) / makespan(events)
        summary = run_summary(workload, result, events, "simulation")["metrics"]
        assert summary["utilization"] == pytest.approx(busy, rel=1e-9), preset
        assert summary["processor_utilization"] == summary["utilization"]
        assert workload.cluster.shared_compute
