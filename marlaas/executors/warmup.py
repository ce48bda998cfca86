"""Engine warm-up: each engine's first generation, done once when the engines are built.

An inference engine's first call pays one-off costs (vLLM on a CPU compiles its oneDNN
kernels: 3.5-11.8 s for the tiny model's first engine in the 12 runs of docs/twin-log.md's fresh
workloads, on 2 loaded cores, against 0.07-0.25 s for a later batch of 16 samples; a second
engine in the same process then takes 0.01-0.02 s). Left to the run, that time landed in the
first group's generate row: counted as generation work, and as busy time. Here it is its own
kind of work: one short generation of the base model per engine before the run's clock starts
(measured: LoRA batches after it run at their steady speed), timed and recorded in the run's
summary as ``engine_warmup_s``, which ``marlaas calibrate`` reads as the cost model's
``engine_warmup_s``. The simulator's engines are likewise warm when its clock starts.

A trainer's first new adapter pays one-off costs as well (PEFT wraps the model: 146 ms for
the tiny model's first, against 21 ms for each later one, measured 2026-12-05), and a job's
first adapter load waits for its version 0 to be written: the first loads of every one of
the 12 show-a and show-b runs of docs/twin-log.md took 142-173 ms (the loads queued behind them
on one engine up to 358 ms) against a median of 5-19 ms for the later loads of the same
runs. :func:`warm_up_trainer` writes a throwaway adapter before the clock starts, so that no
job's first load pays that.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

WARMUP_PROMPT_TOKENS = 16
"""Length of the warm-up prompt [tokens]."""
WARMUP_NEW_TOKENS = 2
"""Tokens the warm-up generates."""


WARMUP_ADAPTER = "trainer-warmup"
"""The name of the trainer's warm-up adapter (it never becomes a job)."""
WARMUP_FOLDER = ".trainer-warmup"
"""Its folder in the adapter store, removed once written (no job's: job names have no dot)."""


async def warm_up(engines: dict) -> dict[str, float]:
    """Run one short base-model generation on each engine, one engine after another; return
    each engine's warm-up time [s] (engine name -> seconds)."""
    spent = {}
    for name, engine in engines.items():
        prompt = list(range(1, WARMUP_PROMPT_TOKENS + 1))
        started = time.monotonic()
        await engine.generate(None, 0, [prompt], 1, WARMUP_NEW_TOKENS, 1.0, 0)  # positional:
        # a Ray engine's forwarder passes them on as they are
        spent[name] = round(time.monotonic() - started, 6)
    return spent


def warm_up_trainer(trainer, store_root: Path, rank: int, seed: int) -> float:
    """Have ``trainer`` write a new adapter of ``rank`` into :data:`WARMUP_FOLDER` of the
    adapter store at ``store_root`` (its first, with the one-off costs) and remove it again;
    return the time it took [s]."""
    folder = store_root / WARMUP_FOLDER
    started = time.monotonic()
    try:
        trainer.write_initial_adapter(WARMUP_ADAPTER, rank, 2 * rank, seed, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return round(time.monotonic() - started, 6)
