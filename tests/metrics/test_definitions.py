"""The definitions every metric shares (marlaas.metrics), checked across its modules on
hand-written logs: exact numbers, and work that spans several devices counted once."""

from __future__ import annotations

import pytest

from marlaas.metrics.adapter_loads import adapter_loads
from marlaas.metrics.devices import makespan
from marlaas.metrics.idle import check_partition, idle_breakdown
from marlaas.metrics.jobs import job_table, train_ops, train_progress
from marlaas.metrics.staleness import staleness_counts, staleness_table
from marlaas.metrics.summary import summarize
from marlaas.metrics.utilization import utilization, utilization_by_pool
from tests.metrics.examples import multi_device, tiny


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
