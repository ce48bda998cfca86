"""Golden event logs: a change to the scheduler or the simulator that is meant to keep every
decision keeps every record, byte for byte.

The digests were taken on the code before the indexed placement rounds (commit 8881f6c,
whose records carry prompt_tokens and longest_tokens), as
``sha256("\\n".join(repr(tuple(record)) for record in records))`` (repr of a float is exact).
A change that is meant to alter decisions updates them and says why in its commit.
paper-8 fair moved when jobs became submissions (a finished job's adapters and trainer
state are released at once, not when LRU would have evicted them; with that release made
lazy again, every digest here and in ``benchmarks/golden_logs.py --large`` is the old one).
``python benchmarks/golden_logs.py`` checks the written events.parquet of more runs.
"""

from __future__ import annotations

import hashlib

import pytest

from marlaas.sim.run import simulate
from marlaas.workload_file import load_workload

GOLDEN = {
    "small - fifo": "45c88e9b9d647628e5f53f0b17fd283e6907182c333afd619e1d9e552dccac5a",
    "small - round-robin": "55ea38d18abe66f8bad11063b9eb28035026bde9704115f397108b3f9d91e28f",
    "small - fair": "bd73bfcd03dde09adab8f5ae6172818c49a178386bb1aa1b605e07a02cc16ba1",
    "small - srtf": "463d78b9a907073c5f25f97bc89c71b8dc81a46b3b01824262e79279b4a8b56e",
    "small - priority": "9dc500b1187c9b0dcd93a9ab08d0acba4c3c657cf76ced7d0932a276bf3b3e20",
    "small sequential fifo": "c0344859ed029aea24a0ae1bf275d3b3d9a5f74ad5bd1a931d3571d346c43e59",
    "small sync fifo": "e203fb6cfc31a34f91911e113df30c49ba7360ce605f7a1975ac76f39252bac6",
    "paper-8 - fair": "8ea1d675318e123bbf47314c2feb2d88f46ed075206d057c69d281976a638d0d",
    "paper-8 sync fifo": "d888926793a0eb579ad8372929ab47934ee1e914609b5d8b7929a54e878dcd32",
}


@pytest.mark.parametrize("run", list(GOLDEN))
def test_event_log_is_unchanged(run):
    trace, preset, policy = run.split()
    workload = load_workload(f"traces/{trace}.yaml")
    if preset != "-":
        workload = workload.with_overrides({"scheduling.preset": preset})
    records = simulate(workload, policy).records
    text = "\n".join(repr(tuple(record)) for record in records)
    assert hashlib.sha256(text.encode()).hexdigest() == GOLDEN[run]
