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

from marlaas.eventlog import read_event_log
from marlaas.runs import read_summary
from marlaas.sim.cost_profiles import CostProfile
from marlaas.sim.recording import Recording
from marlaas.sim.run import simulate_run
from marlaas.twin.calibrate import CalibrationError
from marlaas.twin.fidelity import fidelity_table
from marlaas.workload_file import load_run_workload

FIDELITY_FILE = "fidelity.csv"


def replay(
    run_dir: str | Path, profile: CostProfile | None = None
) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """(replay events, replay summary, fidelity table) of the real run at ``run_dir``."""
    run_dir = Path(run_dir)
    summary = read_summary(run_dir)
    if summary.get("kind") != "real":
        raise CalibrationError(f"{run_dir}: not a real training run; replay reads the folders "
                               "`marlaas train` writes")  # fmt: skip
    if any((summary.get("resumed_from") or {}).values()):
        raise CalibrationError(f"{run_dir}: a resumed run's log starts midway; replay a run "
                               "trained from the start")  # fmt: skip
    workload = load_run_workload(run_dir)
    real = read_event_log(run_dir)
    events, replayed = simulate_run(
        workload, summary["policy"], summary["seed"], profile=profile,
        recording=Recording.from_events(real), kind="replay", replay_of=str(run_dir),
    )  # fmt: skip
    table = fidelity_table(real, events, {j.name: j.arrival_s for j in workload.jobs})
    return events, replayed, table
