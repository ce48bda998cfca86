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
Every digest moved again when the simulator's draws became common random numbers (a
group's turn draws its response lengths and environment waits from generators of its own,
``marlaas/sim/draws.py``, instead of from one generator shared in event order).
``python benchmarks/golden_logs.py`` checks the written events.parquet of more runs.
"""

from __future__ import annotations

import hashlib

import pytest

from marlaas.sim.run import simulate
from marlaas.workload_file import load_workload

GOLDEN = {
    "small - fifo": "4cbf63f0f626a8854ce5ca7c80482f5eda18346f2be8a830ec831ae3da1ab31f",
    "small - round-robin": "eafb9b9f229798bd456a599380a329397b92fa8eeff44cdb39a518ae5c990e82",
    "small - fair": "a0edf872ad9fe47619b2e6cbc19dcdf8ce1d04309c6268b341d6afb75b837634",
    "small - srtf": "7f9b39d995fb9516606b5cf8a58e5e1e8237683cb5e6b9bae92d0c82cfcf67dc",
    "small - priority": "16f55dae1be3160188105a689adce20796759661762d7bffe61d70ac2db49ab7",
    "small sequential fifo": "acf8e6479cdefb4557d6ec0469928043ff0fc0f93daccac7d4275693fb54cb36",
    "small sync fifo": "93911b58bef4d64dc1bb26fd850e2a84db6b5d3fbf61a3cc5b3dd0d6853dacb9",
    "paper-8 - fair": "ee4a4acb5c0d3e15b2574e9ae5ce61a889ac7267f2bd4a0198f2f4281aa40dee",
    "paper-8 sync fifo": "ca6a868629150cf7f8df42a7adfa1ff6c10dc84beb66e00474dbf7f40d516435",
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
