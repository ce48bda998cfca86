"""An aborted generation on a Ray engine actor is cancelled in the actor too: its generator
stops the call there, and the engine is free for the next call at once."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

pytest.importorskip("ray")
pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.core.cluster_spec import EngineSpec
from marlaas.executors.backends import EngineSizing
from marlaas.ray_cluster import ray_session

LONG, SHORT = ["a long answer"], ["hi"]
CANCEL_AT_STEP = 20
"""The decode step of the long call (400 tokens) at which the test cancels it."""
HOLD_S = 60.0
"""The longest the actor holds that step for the cancel to reach its generator [s] (a bound
for a loaded machine: it comes at once; past it the test fails, naming it)."""
WAIT_S = 120.0
"""The longest the test waits for the actor to reach that step [s]."""


@pytest.mark.slow
def test_a_cancelled_generate_is_cancelled_in_the_engine_actor(tiny_model_dir):
    """Counted in the actor's decode steps, not in seconds: the long call is cancelled at its
    step CANCEL_AT_STEP, and the batch stops there; the short call after it does not wait
    for the ~380 steps the long one had left."""
    import ray

    from marlaas.executors.ray_actors import EngineActor, EngineForwarder

    sizing = EngineSizing(EngineSpec(), 512, 8)

    def count_decode_steps(actor) -> None:  # (nested: Ray pickles it by value)
        """Inside the engine actor (``__ray_call__``): count its HF generator's decode steps in
        ``actor.decoded``, and once ``hold_at`` is set, hold that step's thread until every row
        of its batch is stopped (its call cancelled in the actor), at most :data:`HOLD_S`: the
        test cancels the call there, and counts the steps the batch makes after it (a cancel at
        a time, as it was, could come after a fast machine's end of the call, and the steps
        after it were wall time, which a loaded machine stretches)."""
        from marlaas.executors import hf_generator

        generator, share = actor.inner, hf_generator.share_threads
        sample = generator._sample_locked
        state = actor.decoded = {"steps": 0, "hold_at": None, "held": False, "stopped": None}
        batch: dict = {}

        def sample_locked(rows):
            batch["rows"] = rows
            return sample(rows)

        def counted(*args, **kwargs):  # once a decode step, on the batch's thread
            state["steps"] += 1
            if state["steps"] == state["hold_at"]:
                state["held"], deadline = True, time.monotonic() + HOLD_S
                while not all(r.stopped for r in batch["rows"]) and time.monotonic() < deadline:
                    time.sleep(0.005)
                state["stopped"] = all(r.stopped for r in batch["rows"])
            return share(*args, **kwargs)

        generator._sample_locked = sample_locked
        hf_generator.share_threads = counted

    async def scenario(engine, actor) -> tuple[int, dict]:
        async def decoded() -> dict:
            return await actor.__ray_call__.remote(lambda a: dict(a.decoded))

        await actor.__ray_call__.remote(count_decode_steps)
        await engine.generate(None, 0, LONG, 4, 400, 1.0, 11)  # alone: one sample reaches 400
        alone = (await decoded())["steps"]

        def hold(a) -> None:
            a.decoded.update(steps=0, hold_at=CANCEL_AT_STEP)

        await actor.__ray_call__.remote(hold)
        long = asyncio.create_task(engine.generate(None, 0, LONG, 4, 400, 1.0, 11))
        deadline = time.monotonic() + WAIT_S
        while not (await decoded())["held"]:
            assert not long.done() and time.monotonic() < deadline, (
                f"the long call did not reach its decode step {CANCEL_AT_STEP} within "
                f"{WAIT_S:g} s: {await decoded()}, done: {long.done()}"
            )
            await asyncio.sleep(0.01)
        long.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await long
        await engine.generate(None, 0, SHORT, 1, 4, 1.0, 3)  # waits for the long call's batch
        return alone, await decoded()  # unless it stopped

    with ray_session(None, num_cpus=2):
        actor = EngineActor.remote("hf", tiny_model_dir, sizing, 512, 0)
        engine = EngineForwarder("e", actor, ray.get(actor.get_incarnation.remote()), None)
        alone, decoded = asyncio.run(scenario(engine, actor))
    assert alone >= 400, "the long call must run long enough to be cut"
    assert decoded["stopped"], f"the cancel did not stop the call in the actor in {HOLD_S:g} s"
    # the batch stopped at the cancel: the short call's few steps after it, not the ~380 left
    assert decoded["steps"] - CANCEL_AT_STEP < (400 - CANCEL_AT_STEP) / 4, decoded
