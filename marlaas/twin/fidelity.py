"""The fidelity table: a real run against its replay, metric by metric, with the error.

Rows: makespan; each job's completion time and their mean; the busy fraction of the shared
processor (cluster.shared_compute), of each pool and of each device (error in points); each
stage's mean and p90 duration (generate, env, train, sync, adapter_load); staleness mean and
max; adapter loads. Relative errors are (replay - real) /
real; ``points`` errors are replay - real in percentage points of busy fraction.
"""

from __future__ import annotations

import math

import pandas as pd

from marlaas.metrics.adapter_loads import adapter_loads
from marlaas.metrics.devices import makespan
from marlaas.metrics.jobs import job_table, train_ops
from marlaas.metrics.utilization import (
    processor_utilization,
    utilization,
    utilization_by_pool,
)
from marlaas.twin.operations import operations

STAGES = ("generate", "env", "train", "sync", "adapter_load")


def fidelity_table(
    real: pd.DataFrame,
    replay: pd.DataFrame,
    arrivals: dict[str, float],
    shared_processor: bool = False,
) -> pd.DataFrame:
    """Columns: ``metric``, ``unit``, ``real``, ``replay``, ``error``, ``error_unit``;
    ``shared_processor`` (cluster.shared_compute) adds the processor's busy fraction."""
    rows: list[tuple[str, str, float, float, str]] = []

    def rel(metric: str, unit: str, a: float, b: float) -> None:
        rows.append((metric, unit, a, b, "relative"))

    rel("makespan", "s", makespan(real), makespan(replay))
    jobs_real = job_table(real, arrivals).set_index("job")["jct_s"]
    jobs_sim = job_table(replay, arrivals).set_index("job")["jct_s"]
    rel("job completion, mean", "s", float(jobs_real.mean()), float(jobs_sim.mean()))
    for job in jobs_real.index:
        rel(
            f"job completion, {job}", "s", float(jobs_real[job]), float(jobs_sim.get(job, math.nan))
        )
    if shared_processor:
        rows.append(("busy fraction, processor", "fraction", processor_utilization(real),
                     processor_utilization(replay), "points"))  # fmt: skip
    for pool, value in utilization_by_pool(real).items():
        sim = utilization_by_pool(replay).get(pool, math.nan)
        rows.append((f"busy fraction, pool {pool}", "fraction", value, sim, "points"))
    device_sim = utilization(replay).set_index("device")["utilization"]
    for device, value in utilization(real).set_index("device")["utilization"].items():
        rows.append((f"busy fraction, {device}", "fraction", value,
                     float(device_sim.get(device, math.nan)), "points"))  # fmt: skip
    for stage in STAGES:
        a, b = _durations(real, stage), _durations(replay, stage)
        if len(a) and len(b):
            rel(f"{stage} duration, mean", "s", float(a.mean()), float(b.mean()))
            rel(f"{stage} duration, p90", "s", float(a.quantile(0.9)), float(b.quantile(0.9)))
    stale_real = train_ops(real)["staleness"]
    stale_sim = train_ops(replay)["staleness"]
    rows.append(("staleness, mean", "versions", float(stale_real.mean()),
                 float(stale_sim.mean()), "difference"))  # fmt: skip
    rows.append(("staleness, max", "versions", float(stale_real.max()),
                 float(stale_sim.max()), "difference"))  # fmt: skip
    rel("adapter loads", "count", adapter_loads(real), adapter_loads(replay))
    frame = pd.DataFrame(rows, columns=["metric", "unit", "real", "replay", "error_unit"])
    frame["error"] = [_error(r.real, r.replay, r.error_unit) for r in frame.itertuples()]
    return frame[["metric", "unit", "real", "replay", "error", "error_unit"]]


def _durations(events: pd.DataFrame, stage: str) -> pd.Series:
    return operations(events, stage)["duration_s"]


def _error(real: float, replay: float, unit: str) -> float:
    if unit == "points":
        return 100.0 * (replay - real)
    if unit == "difference":
        return replay - real
    return (replay - real) / real if real else math.nan


def format_fidelity(table: pd.DataFrame, devices: bool = False) -> str:
    """The table as aligned text; per-device rows only when ``devices``."""
    per_device = table["metric"].str.match(r"busy fraction, (?!pool|processor)")
    shown = table if devices else table[~per_device]
    lines = [f"{'metric':<34} {'real':>11} {'replay':>11} {'error':>9}"]
    for r in shown.itertuples():
        if r.error_unit == "points":
            real, sim, err = f"{r.real:.1%}", f"{r.replay:.1%}", f"{r.error:+.1f} pt"
        elif r.error_unit == "difference":
            real, sim, err = f"{r.real:.2f}", f"{r.replay:.2f}", f"{r.error:+.2f}"
        else:
            real, sim = _num(r.real, r.unit), _num(r.replay, r.unit)
            err = "-" if math.isnan(r.error) else f"{r.error:+.1%}"
        lines.append(f"{r.metric:<34} {real:>11} {sim:>11} {err:>9}")
    return "\n".join(lines)


def _num(value: float, unit: str) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:,.0f}" if unit == "count" else f"{value:,.3g} {unit}"
