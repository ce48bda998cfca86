"""marlaas.metrics.idle: the idle breakdown, and the partition of device time into work and
idle rows."""

from __future__ import annotations

import pandas as pd
import pytest

from marlaas.eventlog import IDLE_CAUSES
from marlaas.metrics.devices import makespan
from marlaas.metrics.idle import check_partition, idle_breakdown
from marlaas.metrics.utilization import utilization
from tests.synthetic import make_frame, synthetic_log


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_synthetic_logs_partition_exactly(seed):
    df, _ = synthetic_log(n_jobs=5, n_rollout=3, n_train=2, steps=4, seed=seed)
    check_partition(df, tol=1e-9)


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
