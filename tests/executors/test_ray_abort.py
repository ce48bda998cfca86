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


@pytest.mark.slow
def test_a_cancelled_generate_is_cancelled_in_the_engine_actor(tiny_model_dir):
    import ray

    from marlaas.executors.ray_actors import EngineActor, EngineForwarder

    sizing = EngineSizing(EngineSpec(), 512, 8)

    async def scenario(engine) -> tuple[float, float]:
        started = time.monotonic()  # the long call alone: one of its samples reaches 400
        await engine.generate(None, 0, LONG, 4, 400, 1.0, 11)
        whole_s = time.monotonic() - started
        long = asyncio.create_task(engine.generate(None, 0, LONG, 4, 400, 1.0, 11))
        await asyncio.sleep(0.2 * whole_s)
        long.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await long
        started = time.monotonic()  # waits for the long call's batch unless it stopped
        await engine.generate(None, 0, SHORT, 1, 4, 1.0, 3)
        return whole_s, time.monotonic() - started

    with ray_session(None, num_cpus=2):
        actor = EngineActor.remote("hf", tiny_model_dir, sizing, 512, 0)
        engine = EngineForwarder("e", actor, ray.get(actor.get_incarnation.remote()), None)
        whole_s, short_s = asyncio.run(scenario(engine))
    assert whole_s > 0.5, "the long call must run long enough to be cut"
    assert short_s < 0.5 * whole_s
