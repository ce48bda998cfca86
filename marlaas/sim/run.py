"""Simulate a workload and produce a run folder's content (event log and summary)."""

from __future__ import annotations

import pandas as pd

from marlaas import metrics
from marlaas.core.workload import Workload
from marlaas.eventlog import records_to_frame
from marlaas.sim.simulator import SimResult, simulate


def run_summary(workload: Workload, result: SimResult, events: pd.DataFrame) -> dict:
    """The summary.json content of a simulated run."""
    arrivals = {j.name: j.arrival_s for j in workload.jobs}
    weights = {j.tenant: j.weight for j in workload.jobs}
    return {
        "kind": "simulation",
        "workload": workload.name,
        "policy": result.policy,
        "seed": result.seed,
        "settings": result.settings,
        "arrivals": arrivals,
        "weights": weights,
        "tenants": {j.name: j.tenant for j in workload.jobs},
        "job_finish_s": result.job_finish_s,
        "wall_s": result.wall_s,
        "sim_events": result.events,
        "metrics": metrics.summarize(events, arrivals, weights),
    }


def simulate_run(
    workload: Workload, policy: str | None = None, seed: int | None = None, progress: bool = False
) -> tuple[pd.DataFrame, dict]:
    """Simulate and return (event log frame, summary)."""
    result = simulate(workload, policy, seed, progress)
    events = records_to_frame(result.records)
    return events, run_summary(workload, result, events)
