"""Golden event logs: a change to the scheduler or the simulator that is meant to keep every
decision keeps every record, byte for byte.

The digests were taken on the code before the indexed placement rounds (commit 8483d83),
as ``sha256("\\n".join(repr(tuple(record)) for record in records))`` (repr of a float is
exact). A change that is meant to alter decisions updates them and says why in its commit.
``python benchmarks/golden_logs.py`` checks the written events.parquet of more runs.
"""

from __future__ import annotations

import hashlib

import pytest

from marlaas.sim.run import simulate
from marlaas.workload_file import load_workload

GOLDEN = {
    "small - fifo": "46e906f012caa43bd7d2d1ef55e7d81142523b97cbf8ce75e6e31a55ce7eb302",
    "small - round-robin": "61a32346dfcab1bb6aba68272d063cb69cf7ca5fb01157da6de20ce38cc43188",
    "small - fair": "222e8f03bba67558bfd8bf09e9e17b55c1f1fd258b1b66a5c4db4e6876e22a8b",
    "small - srtf": "a015cbf85b03001207931c0a784407f463f941ac4355ab614302df7b8bf21409",
    "small - priority": "99fa85e7ecdbfde5d27a4933ac2de356d9222cdc11a0a5eafbdbdaee4026f1bb",
    "small sequential fifo": "028cfc010c78186d2a202dcae32e929ed236b9dcb93f724061a4eb210704ed22",
    "small sync fifo": "e4f851d9c63ba352b4e697b81804bfb977a109c73e0268e37fab0a508464bf5c",
    "paper-8 - fair": "ee0db66f35960af06bdda7893084e1bd766f75004f20d3378086953529e4bcbe",
    "paper-8 sync fifo": "bc50e7739e5f13c97d7cdcbcf100eb2e55a54d4fe41f5c9d99c6698f720a2d99",
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
