"""What a real run records about itself: the staleness bound the scheduler enforced, and the
engines' warm-up as its own kind of work (before the clock), not as the first batch's
generation."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.core.scheduler import Scheduler
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backends import EngineSizing
from marlaas.executors.hf_generator import HFGenerator
from marlaas.executors.local import LocalExecutor
from marlaas.executors.train import train_run
from marlaas.executors.yardstick import YARDSTICK_BATCHES
from marlaas.workload_file import load_workload

TRACE = Path(__file__).resolve().parents[2] / "traces" / "real-tiny.yaml"


class SlowFirstCall(HFGenerator):
    """An HF generator whose first call takes 0.3 s more (a cold engine), noting when each
    call ended (monotonic [s]) and with which adapter."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str | None, float]] = []

    async def generate(self, adapter, version, prompts, n, max_new_tokens, *args, **kwargs):
        if not self.calls:
            await asyncio.sleep(0.3)
        out = await super().generate(adapter, version, prompts, n, max_new_tokens, *args,
                                     **kwargs)  # fmt: skip
        self.calls.append((adapter, time.monotonic()))
        return out


@pytest.mark.slow
def test_the_enforced_staleness_bound_and_the_warm_up_are_recorded(tiny_model_dir, tmp_path):
    """rewards.csv's bound is the one the preset enforced (0), not the workload's (2); the
    summary has each engine's warm-up."""
    workload = load_workload(TRACE, {
        "base_model.path": str(tiny_model_dir), "jobs.*.rl.steps": 1,
        "jobs.*.rl.max_staleness": 2, "scheduling.preset": "sequential",
    })  # fmt: skip
    _, summary, rewards, _ = train_run(workload, tmp_path / "run", backend="hf", progress=False)
    written = pd.read_csv(tmp_path / "run" / "rewards.csv")
    assert (written["max_staleness"] == 0).all() and (rewards["max_staleness"] == 0).all()
    engines = {e.name for e in Scheduler.for_workload(workload).cluster.engines}
    assert set(summary["engine_warmup_s"]) == engines  # colocated/0 and /1 (sequential)
    assert all(s > 0 for s in summary["engine_warmup_s"].values())
    for key in ("engine_yardstick_s_per_token", "engine_yardstick_end_s_per_token"):
        assert set(summary[key]) == engines  # timed after the warm-up, and after the work
        assert all(s > 0 for s in summary[key].values())


def test_engines_warm_up_before_the_clock_starts(tiny_model_dir, tmp_path):
    """An engine's first generation (its warm-up) is done when the engines are built, with
    the base model, before the run's clock starts: no group's generation pays it."""
    workload = load_workload(TRACE, {"base_model.path": str(tiny_model_dir)})
    cluster = Scheduler.for_workload(workload).cluster
    engine = SlowFirstCall(tiny_model_dir, max_batch_size=64)
    executor = LocalExecutor(
        EngineSizing.of_workload(workload), cluster, store=AdapterStore(tmp_path / "a"),
        model_dir=tiny_model_dir, backend="hf", generators={"rollout/0": engine},
        trainers={},
    )  # fmt: skip
    with executor:  # the warm-up, then the yardstick's batches (marlaas.executors.yardstick)
        assert [adapter for adapter, _ in engine.calls] == [None] * (1 + YARDSTICK_BATCHES)
        assert engine.calls[-1][1] <= executor.clock_zero
        assert executor.warmup_s["rollout/0"] >= 0.3


class NotedTrainer:
    """A trainer that only notes its write_initial_adapter calls (when, rank, folder) and
    writes a file where the adapter would be."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, int, Path, float]] = []
        self.jobs: list[str] = []

    def write_initial_adapter(self, job, rank, alpha, seed, out_dir) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True)
        (out / "adapter_model.safetensors").write_bytes(b"")
        self.writes.append((job, rank, out, time.monotonic()))
        return out


def test_the_first_trainer_writes_a_throwaway_adapter_before_the_clock_starts(
    tiny_model_dir, tmp_path
):
    """A trainer's first new adapter pays one-off costs (PEFT wraps the model), which a job's
    first load waited for: the executor has the first trainer write one of the engines'
    largest rank before the clock starts, and removes it; the store lists no job for it."""
    workload = load_workload(TRACE, {"base_model.path": str(tiny_model_dir)})
    cluster = Scheduler.for_workload(workload).cluster
    sizing = EngineSizing.of_workload(workload)
    store = AdapterStore(tmp_path / "a")
    trainer = NotedTrainer()
    executor = LocalExecutor(
        sizing, cluster, store=store, model_dir=tiny_model_dir, backend="hf",
        generators={"rollout/0": HFGenerator(tiny_model_dir, max_batch_size=64)},
        trainers={"train/0": trainer},
    )  # fmt: skip
    with executor:
        [(_job, rank, folder, when)] = trainer.writes
        assert when <= executor.clock_zero
        assert rank == sizing.max_lora_rank
        assert folder.parent == store.root and not folder.exists()
        assert store.jobs() == []
