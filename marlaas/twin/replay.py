"""``marlaas replay``: simulate a real run again, exactly as it was, and measure the twin.

The replay simulates the run's own workload (its ``workload.json``), policy, preset and seed,
with each group turn generating the tokens it generated for real and each environment step
taking the time it took (marlaas.sim.recording), so what differs is the cost model's account of
generation, training, loads and syncs. It writes a run folder of kind ``replay`` and the
fidelity table (``fidelity.csv``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from marlaas.sim.cost_profiles import CostProfile
from marlaas.sim.recording import Recording
from marlaas.sim.run import simulate_run
from marlaas.twin.fidelity import fidelity_table
from marlaas.twin.real_run import CalibrationError, RealRun, load_real_run

FIDELITY_FILE = "fidelity.csv"


def replay(
    run: RealRun | str | Path, profile: CostProfile | None = None
) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """(replay events, replay summary, fidelity table) of a real run (its folder, or the
    folder as :func:`marlaas.twin.real_run.load_real_run` read it)."""
    if not isinstance(run, RealRun):
        run = load_real_run(run, "replay")
    if any((run.summary.get("resumed_from") or {}).values()):
        raise CalibrationError(f"{run.path}: a resumed run's log starts midway; replay a run "
                               "trained from the start")  # fmt: skip
    events, replayed = simulate_run(
        run.workload, run.summary["policy"], run.summary["seed"], profile=profile,
        recording=Recording.from_events(run.events), kind="replay", replay_of=str(run.path),
    )  # fmt: skip
    arrivals = {j.name: j.arrival_s for j in run.workload.jobs}
    table = fidelity_table(run.events, events, arrivals, run.workload.cluster.shared_processor)
    return events, replayed, table
