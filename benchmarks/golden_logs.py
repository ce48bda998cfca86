"""Golden event logs: the SHA-256 of each run's ``events.parquet``, to check that a change to
the scheduler or the simulator keeps every decision (and so every row) byte for byte.

    python benchmarks/golden_logs.py > before.txt        # on the code before the change
    python benchmarks/golden_logs.py --check before.txt  # after: lists every difference

Runs: traces/small.yaml and traces/paper-8.yaml under every policy, and under the presets
sequential and sync with policy fifo (``--large`` adds paper-32 under fair and fifo). Each is
exactly ``marlaas simulate TRACE --policy P [--preset S]`` with the trace's seed. The script
imports marlaas from PYTHONPATH, so one copy of it can digest an older tree's runs.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path

from marlaas.eventlog import records_to_frame, write_event_log
from marlaas.sim.run import simulate
from marlaas.workload_file import load_workload

TRACES = Path(__file__).resolve().parents[1] / "traces"
POLICIES = ("fifo", "round-robin", "fair", "srtf", "priority")
PRESETS = ("sequential", "sync")


def cases(large: bool) -> list[tuple[str, str, str | None]]:
    """(trace file, policy, preset or None) of every golden run."""
    out = []
    for trace in ("small.yaml", "paper-8.yaml"):
        out += [(trace, policy, None) for policy in POLICIES]
        out += [(trace, "fifo", preset) for preset in PRESETS]
    if large:
        out += [("paper-32.yaml", "fair", None), ("paper-32.yaml", "fifo", None)]
    return out


def digest(trace: str, policy: str, preset: str | None) -> tuple[str, int]:
    """(SHA-256 of the run's events.parquet, rows) for one run."""
    workload = load_workload(TRACES / trace)
    if preset is not None:
        workload = workload.with_overrides({"scheduling.preset": preset})
    frame = records_to_frame(simulate(workload, policy).records)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.parquet"
        write_event_log(frame, path)
        return hashlib.sha256(path.read_bytes()).hexdigest(), len(frame)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", type=Path, help="compare with a file this script printed")
    parser.add_argument("--large", action="store_true", help="add paper-32 (fair, fifo)")
    args = parser.parse_args()
    expected = {}
    if args.check:
        for line in args.check.read_text().splitlines():
            name, sha, _rows = line.split()
            expected[name] = sha
    bad = 0
    for trace, policy, preset in cases(args.large):
        name = f"{trace}:{preset or '-'}:{policy}"
        t0 = time.perf_counter()
        sha, rows = digest(trace, policy, preset)
        wall = time.perf_counter() - t0
        if args.check:
            status = "same" if expected.get(name) == sha else "DIFFERENT"
            bad += status != "same"
            print(f"{name:36s} {status:9s} {rows:7d} rows {wall:6.1f} s", flush=True)
        else:
            print(f"{name} {sha} {rows}", flush=True)
    if args.check:
        print(f"{bad} different" if bad else "all identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
