"""Simulate a workload and produce a run folder's content (event log and summary)."""

from __future__ import annotations

import pandas as pd

from marlaas.core.workload import Workload
from marlaas.eventlog import records_to_frame
from marlaas.runs import run_summary
from marlaas.sim.simulator import simulate


def simulate_run(
    workload: Workload, policy: str | None = None, seed: int | None = None, progress: bool = False
) -> tuple[pd.DataFrame, dict]:
    """Simulate and return (event log frame, summary)."""
    result = simulate(workload, policy, seed, progress)
    events = records_to_frame(result.records)
    return events, run_summary(workload, result, events, "simulation", sim_events=result.events)
