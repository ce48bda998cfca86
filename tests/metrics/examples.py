"""Hand-written event logs with exact numbers, and a plain-Python reference of busy time,
shared by the metrics tests."""

from __future__ import annotations

import pandas as pd

from marlaas.metrics.devices import makespan
from tests.synthetic import _merge, make_frame


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
