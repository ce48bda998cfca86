"""Golden event logs: a change to the scheduler or the simulator that is meant to keep every
decision keeps every record, byte for byte.

The digests were taken on the code before the indexed placement rounds (commit 8881f6c,
whose records carry prompt_tokens and longest_tokens), as
``sha256("\\n".join(repr(tuple(record)) for record in records))`` (repr of a float is exact).
A change that is meant to alter decisions updates them and says why in its commit.
paper-8 fair moved when jobs became submissions (a finished job's adapters and trainer
state are released at once, not when LRU would have evicted them; with that release made
lazy again, every digest here and in ``benchmarks/golden_logs.py --large`` is the old one).
Every digest moved when the h100-7b profile (the default cost model) took the prefill refit
(a 4.46 ms floor per prefill + T / 42,443 tokens/s instead of T / 38,000 tokens/s).
``python benchmarks/golden_logs.py`` checks the written events.parquet of more runs.
"""

from __future__ import annotations

import hashlib

import pytest

from marlaas.sim.run import simulate
from marlaas.workload_file import load_workload

GOLDEN = {
    "small - fifo": "661ceb96b8d5a6d7f8c9e5888b870c6a0b894df1c1cae6e00f4ee85b207deb9c",
    "small - round-robin": "d0e20480995eeff85cca717e360cbb3f6f804ba1cd14d3f2c3a17204a67abce2",
    "small - fair": "b519786faa97ccbf9a3308ac32a4dae8849156306d56fe1e5809e5a2313ecfc9",
    "small - srtf": "85962a78a2b20417c0e49c97274662dd7466ae64326a3741b5014c96b7f9d72c",
    "small - priority": "8e82b351ad1057d4204c01f573623cb7a1f3b258a88c3f4e19b0ba9f6fdde472",
    "small sequential fifo": "9df964390327d0c0ad2965976a96b94c65949a7fb4021773c43f265ad62bdbbd",
    "small sync fifo": "7b42328480c9014259ef674f8aab5938f5834ad538efe8d48cd5a314075e3747",
    "paper-8 - fair": "b0f7d5b6a916855c6e91321fdb50f4fb01c682e19c096d3fc3640c8aac84ff7e",
    "paper-8 sync fifo": "51267df8051b17c43658856649db648c986ee1246d3412ff9e0ed80222bf56b0",
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
