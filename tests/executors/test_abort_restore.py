"""An aborted generation does not cut short the restore of its restarted engine: the
adapters this executor had loaded there are given back by a restore that the Generate
awaits, and an AbortGeneration that cancelled it half-way left the engine with some of them
and ``restarted`` still set, so that the next call published them all again and failed on
the first ("already published"), and so did every call after it (the run stopped)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from marlaas.executors.backend_restarts import BackendRecord


class RestartedEngine:
    """An engine restarted since its last use: its publish takes a while, and refuses an
    adapter it holds (as the vLLM and HF generators do)."""

    def __init__(self) -> None:
        self.restarted = True
        self.held: list[tuple[str, int]] = []

    async def publish(self, job: str, version: int, adapter_dir: str) -> None:
        if (job, version) in self.held:
            raise ValueError(f"adapter {job!r} version {version} is already published")
        await asyncio.sleep(0.01)
        self.held.append((job, version))


def record_with(engine: RestartedEngine) -> BackendRecord:
    """The record of an executor that had loaded three adapters on ``engine`` (no trainer)."""
    backends = SimpleNamespace(engines={"e0": engine}, trainers={})
    store = SimpleNamespace(path=lambda job, version: f"/adapters/{job}/{version}")
    record = BackendRecord(backends, store, trainers=None)
    record.loaded = {("e0", "a", 1), ("e0", "b", 2), ("e0", "c", 3)}
    return record


def test_a_generate_aborted_while_its_engine_is_restored_leaves_the_restore_whole():
    engine = RestartedEngine()
    record = record_with(engine)

    async def scenario() -> None:
        aborted = asyncio.create_task(record.restored_engine("e0"))
        while not engine.held:  # one adapter back, the others not yet
            await asyncio.sleep(0.001)
        aborted.cancel()  # what an AbortGeneration does to the Generate awaiting it
        await asyncio.gather(aborted, return_exceptions=True)
        assert await record.restored_engine("e0") is engine  # the next Generate

    asyncio.run(scenario())
    assert sorted(engine.held) == [("a", 1), ("b", 2), ("c", 3)]
    assert not engine.restarted
