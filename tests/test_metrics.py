"""Tests of marlaas.metrics on synthetic and hand-written event logs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from marlaas.eventlog import IDLE_CAUSES
from marlaas.metrics.adapter_loads import adapter_loads, loads_per_group
from marlaas.metrics.devices import device_busy_intervals, makespan
from marlaas.metrics.fairness import fairness, jain_index
from marlaas.metrics.idle import check_partition, idle_breakdown
from marlaas.metrics.intervals import merge_intervals
from marlaas.metrics.jobs import job_table, train_ops, train_progress
from marlaas.metrics.staleness import staleness_counts, staleness_table
from marlaas.metrics.summary import summarize
from marlaas.metrics.utilization import (
    DEFAULT_TIME_BINS,
    utilization,
    utilization_by_pool,
    utilization_over_time,
)
from tests.synthetic import _merge, make_frame, synthetic_log


def busy_reference(df: pd.DataFrame) -> dict[str, float]:
    """Busy seconds per device by a plain-Python union (independent of metrics)."""
    span = makespan(df)
    out = {}
    for dev, rows in df[df["device"] != ""].groupby("device"):
        work = rows[rows["kind"].isin(["generate", "train"])]
        spans = [
            (max(0, s), min(e, span)) for s, e in zip(work["start_s"], work["end_s"], strict=True)
        ]
        out[dev] = sum(e - s for s, e in _merge(spans) if e > s)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_synthetic_logs_partition_exactly(seed):
    df, _ = synthetic_log(n_jobs=5, n_rollout=3, n_train=2, steps=4, seed=seed)
    check_partition(df, tol=1e-9)


def test_busy_intervals_match_reference(medium_log):
    df, _ = medium_log
    intervals = device_busy_intervals(df)
    ref = busy_reference(df)
    assert set(intervals) == set(ref)
    for dev, iv in intervals.items():
        assert iv.shape[1] == 2
        assert np.all(iv[:, 1] >= iv[:, 0])
        assert np.all(iv[1:, 0] > iv[:-1, 1])  # sorted and disjoint
        assert (iv[:, 1] - iv[:, 0]).sum() == pytest.approx(ref[dev], abs=1e-9)


def test_merge_intervals_overlap_touch_gap():
    k, s, e = merge_intervals(
        np.array([0, 0, 0, 1, 0]),
        np.array([0.0, 1.0, 3.0, 0.0, 2.0]),
        np.array([2.0, 1.5, 4.0, 1.0, 2.5]),
    )
    assert k.tolist() == [0, 0, 1]
    assert s.tolist() == [0.0, 3.0, 0.0]
    assert e.tolist() == [2.5, 4.0, 1.0]
    k, s, e = merge_intervals(np.array([0, 0]), np.array([0.0, 3.0]), np.array([1.0, 4.0]), gap=2.0)
    assert (s.tolist(), e.tolist()) == ([0.0], [4.0])


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


def test_idle_breakdown_sums_idle_rows(medium_log):
    df, _ = medium_log
    table = idle_breakdown(df)
    idle = df[df["kind"] == "idle"]
    expected = (idle["end_s"] - idle["start_s"]).groupby([idle["pool"], idle["outcome"]]).sum()
    for (pool, cause), seconds in expected.items():
        assert table.loc[pool, cause] == pytest.approx(seconds)
    assert table.to_numpy().sum() == pytest.approx(expected.sum())
    assert list(table.columns[: len(IDLE_CAUSES)]) == list(IDLE_CAUSES)
    # busy + idle = makespan x devices
    u = utilization(df)
    assert u["busy_s"].sum() + table.to_numpy().sum() == pytest.approx(makespan(df) * len(u))


def test_check_partition_catches_missing_idle(small_log):
    df, _ = small_log
    idle = df.index[(df["kind"] == "idle") & (df["device"] == "train/0")]
    broken = df.drop(idle[0])
    with pytest.raises(AssertionError, match=r"train/0"):
        check_partition(broken)


def test_check_partition_catches_idle_overlapping_work(small_log):
    df, _ = small_log
    extra = make_frame(
        [
            dict(
                kind="idle",
                device="rollout/1",
                pool="rollout",
                start_s=1.0,
                end_s=2.0,
                outcome="no_work",
            )
        ]
    )
    with pytest.raises(AssertionError, match=r"rollout/1"):
        check_partition(pd.concat([df, extra], ignore_index=True))


def tiny() -> pd.DataFrame:
    """Two jobs, one engine, one trainer, exact numbers."""
    common = dict(device="rollout/0", pool="rollout")
    return make_frame(
        [
            dict(kind="generate", tenant="a", job="j1", start_s=0, end_s=2, tokens=10, **common),
            dict(kind="generate", tenant="b", job="j2", start_s=1, end_s=3, tokens=20, **common),
            dict(kind="idle", start_s=3, end_s=10, outcome="no_work", **common),
            dict(kind="env", tenant="a", job="j1", pool="env", start_s=2, end_s=4),
            dict(
                kind="idle", device="train/0", pool="train", start_s=0, end_s=4, outcome="rollouts"
            ),
            dict(
                kind="train",
                tenant="a",
                job="j1",
                device="train/0",
                pool="train",
                start_s=4,
                end_s=6,
                step=0,
                tokens=100,
                staleness=0,
            ),
            dict(
                kind="sync",
                tenant="a",
                job="j1",
                device="train/0",
                pool="train",
                start_s=6,
                end_s=7,
            ),
            dict(
                kind="idle",
                device="train/0",
                pool="train",
                start_s=6,
                end_s=7,
                outcome="weight_sync",
            ),
            dict(
                kind="train",
                tenant="b",
                job="j2",
                device="train/0",
                pool="train",
                start_s=7,
                end_s=9,
                step=0,
                staleness=2,
            ),
            dict(
                kind="train",
                tenant="b",
                job="j2",
                device="train/0",
                pool="train",
                start_s=9,
                end_s=10,
                step=1,
                staleness=1,
                outcome="failed",
            ),
        ]
    )


def test_tiny_log_exact_numbers():
    df = tiny()
    assert makespan(df) == 10.0
    check_partition(df)
    u = utilization(df).set_index("device")
    assert u.loc["rollout/0", "busy_s"] == 3.0 and u.loc["train/0", "busy_s"] == 5.0
    assert utilization_by_pool(df) == {"rollout": 0.3, "train": 0.5}
    jobs = job_table(df, arrivals={"j2": 1.0}).set_index("job")
    assert jobs.loc["j1", "completion_s"] == 7.0  # last sync
    assert jobs.loc["j2", "completion_s"] == 10.0  # no sync: last train
    assert jobs.loc["j2", "jct_s"] == 9.0
    assert jobs.loc["j1", "steps"] == 1 and jobs.loc["j2", "steps"] == 1  # failed not counted
    assert jobs.loc["j2", "tokens"] == 20
    # overlap [1, 2] split in half: j1 = 1 + 0.5 + train 2; j2 = 0.5 + 1 + train 3
    assert jobs["device_s"].to_dict() == pytest.approx({"j1": 3.5, "j2": 4.5})
    assert jobs["device_s"].sum() == pytest.approx(u["busy_s"].sum())
    st = staleness_table(df).set_index("job")
    assert st.loc["j2", "staleness_max"] == 2 and st.loc["j2", "staleness_mean"] == 1.5
    assert staleness_counts(df).loc["j2"].to_dict() == {0: 0, 1: 1, 2: 1}
    idle = idle_breakdown(df)
    assert idle.loc["rollout", "no_work"] == 7 and idle.loc["train", "weight_sync"] == 1


def test_makespan_without_train_uses_all_work():
    df = make_frame(
        [
            dict(kind="generate", device="r/0", pool="rollout", start_s=1, end_s=4),
            dict(kind="env", pool="env", start_s=4, end_s=6),
            dict(kind="idle", device="r/0", pool="rollout", start_s=0, end_s=9),
        ]
    )
    assert makespan(df) == 6.0
    assert makespan(df.iloc[:0]) == 0.0


def test_jain_index():
    assert jain_index([2, 2, 2]) == 1.0
    assert jain_index([1, 0, 0]) == pytest.approx(1 / 3)
    assert jain_index([0, 0]) == 1.0
    assert math.isnan(jain_index([]))
    assert jain_index([1, float("nan"), 1]) == 1.0


def test_fairness_weights():
    df = tiny()
    fair = fairness(df, weights={"a": 3.5, "b": 4.5})
    assert fair["jain_tenant_gpu_s_per_weight"] == pytest.approx(1.0)
    assert fair["jain_tenant_gpu_s"] < 1.0
    assert fairness(df)["jain_tenant_gpu_s_per_weight"] is None


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


def test_train_progress_counts_ok_steps(medium_log):
    df, _ = medium_log
    prog = train_progress(df)
    last = prog.groupby("job")["steps_done"].max()
    jobs = job_table(df).set_index("job")
    assert last.to_dict() == jobs["steps"].to_dict()


def multi_device() -> pd.DataFrame:
    """One job on a trainer of 4 devices: a swap-in, 2 steps and their syncs (one row per
    device each), plus one adapter version loaded by 2 engines at the same time."""
    trainer = [f"train/{i}" for i in range(4)]
    rows = []

    def on_trainer(**row):
        rows.extend(dict(row, device=d, pool="train", tenant="a", job="j") for d in trainer)

    on_trainer(kind="adapter_load", start_s=0, end_s=2, version=0)
    on_trainer(kind="train", step=0, start_s=2, end_s=5, tokens=1000, version=1, staleness=0)
    on_trainer(kind="sync", step=0, start_s=5, end_s=6, version=1)
    on_trainer(kind="train", step=1, start_s=6, end_s=9, tokens=3000, version=2, staleness=1)
    on_trainer(kind="sync", step=1, start_s=9, end_s=10, version=2)
    for engine in ("rollout/0", "rollout/1"):
        rows.append(
            dict(kind="adapter_load", device=engine, pool="rollout", tenant="a", job="j",
                 start_s=6, end_s=6.2, version=1)
        )  # fmt: skip
    return make_frame(rows)


def test_work_spanning_devices_is_counted_once():
    df = multi_device()
    jobs = job_table(df).set_index("job")
    assert jobs.loc["j", "steps"] == 2
    assert jobs.loc["j", "train_tokens"] == 4000
    assert jobs.loc["j", "device_s"] == pytest.approx(4 * 6.0)  # device-seconds count devices
    assert train_progress(df)["steps_done"].tolist() == [1, 2]
    assert train_ops(df)["devices"].tolist() == [4, 4]
    st = staleness_table(df).set_index("job")
    assert st.loc["j", "train_steps"] == 2 and st.loc["j", "staleness_mean"] == 0.5
    assert staleness_counts(df).loc["j"].to_dict() == {0: 1, 1: 1}
    # the swap-in on 4 trainer devices is one load; the two engines' loads are two
    assert adapter_loads(df) == 3
    assert summarize(df)["adapter_swaps"] == 3


def test_sequential_simulation_counts_each_step_once():
    from marlaas.sim.run import simulate_run
    from marlaas.workload_file import load_workload

    small = Path(__file__).resolve().parent.parent / "traces" / "small.yaml"
    workload = load_workload(small).with_overrides(
        {"jobs.*.rl.steps": 2, "jobs.*.rl.prompts_per_step": 2, "scheduling.preset": "sequential"}
    )
    events, _ = simulate_run(workload, "fifo", 0)
    assert events.loc[events["kind"] == "train", "device"].nunique() == 8  # 8 rows per step
    jobs = job_table(events)
    assert jobs["steps"].tolist() == [2] * len(workload.jobs)
    assert train_progress(events).groupby("job")["steps_done"].max().eq(2).all()


def test_loads_per_group_counts_engine_loads_only():
    df = multi_device()
    assert loads_per_group(df) is None  # nothing generated
    generated = [
        dict(kind="generate", device="rollout/0", pool="rollout", tenant="a", job="j",
             start_s=6.2 + i, end_s=6.9 + i, version=1, tokens=10)
        for i in range(4)
    ]  # fmt: skip
    df = pd.concat([df, make_frame(generated)], ignore_index=True)
    assert loads_per_group(df) == 2 / 4  # the trainer's swap-in is not an engine's
    assert summarize(df)["loads_per_group"] == 0.5


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
