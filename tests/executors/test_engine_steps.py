"""An engine's steps as the meter reads them from the vLLM scheduler (a stand-in here; the real
engine's steps: tests/executors/test_generators.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from marlaas.executors.engine_steps import EngineStep, StepMeter, group_of, steps_frame


class Scheduler:
    """vLLM v1's scheduler as the meter uses it: ``requests`` and ``schedule()``, which
    schedules ``plan`` (request id -> tokens to compute) and advances each request's computed
    tokens by them plus ``cached`` (prefix-cache hits of a new request)."""

    def __init__(self) -> None:
        self.requests: dict[str, SimpleNamespace] = {}
        self.plan: dict[str, int] = {}
        self.cached: dict[str, int] = {}

    def add(self, rid: str, prompt: int, adapter: int | None) -> None:
        lora = None if adapter is None else SimpleNamespace(lora_int_id=adapter)
        self.requests[rid] = SimpleNamespace(num_computed_tokens=0, num_prompt_tokens=prompt,
                                             lora_request=lora)  # fmt: skip

    def schedule(self):
        for rid, tokens in self.plan.items():
            self.requests[rid].num_computed_tokens += tokens + self.cached.pop(rid, 0)
        return SimpleNamespace(num_scheduled_tokens=dict(self.plan))


def engine_of(scheduler: Scheduler):
    return SimpleNamespace(engine_core=SimpleNamespace(engine_core=SimpleNamespace(
        scheduler=scheduler)))  # fmt: skip


def test_a_step_is_measured_as_its_decoding_prefills_adapters_and_groups():
    scheduler = Scheduler()
    meter = StepMeter(engine_of(scheduler))
    for rid, prompt, adapter in [("marlaas-g1-a-x", 10, 1), ("marlaas-g1-b-x", 10, 1),
                                 ("marlaas-g2-a-x", 7, 2)]:  # fmt: skip
        scheduler.add(rid, prompt, adapter)
    scheduler.plan = {"marlaas-g1-a-x": 10, "marlaas-g1-b-x": 4}  # b: 6 of 10 from the cache;
    # g2 waits (vLLM's own queue)
    scheduler.cached = {"marlaas-g1-b-x": 6}
    meter.step(lambda: scheduler.schedule() and "out")
    scheduler.plan = {"marlaas-g1-a-x": 1, "marlaas-g1-b-x": 1, "marlaas-g2-a-x": 7}
    assert meter.step(scheduler.schedule) is not None
    scheduler.plan = {}
    meter.step(scheduler.schedule)  # nothing computed: not a step
    first, second = meter.steps
    assert (first.decoding, first.context_tokens, first.adapters) == (0, 0, 1)
    assert (first.prefill_tokens, first.prefills) == (14, 1)  # one group; cache hits not work
    assert (first.waiting, second.waiting) == (1, 0)
    assert (second.decoding, second.context_tokens) == (2, 20)
    assert (second.adapters, second.prefill_tokens, second.prefills) == (2, 7, 1)
    assert second.start >= first.start + first.duration_s >= first.start


@pytest.mark.parametrize("rid", ["marlaas-0123abcd-f00d", "marlaas-0123abcd-f00d-1a2b3c4d"])
def test_a_requests_group_is_its_generate_call_with_or_without_vllms_suffix(rid):
    assert group_of(rid) == "marlaas-0123abcd"


def test_the_frame_counts_on_the_runs_clock_and_leaves_the_warm_up_out():
    steps = {"rollout/0": [EngineStep(99.0, 0.5, 4, 40, 1, 0, 0),
                           EngineStep(101.0, 0.01, 4, 44, 1, 8, 1)]}  # fmt: skip
    frame = steps_frame(steps, zero=100.0, offset_s=30.0)
    assert frame.to_dict("records") == [{
        "engine": "rollout/0", "start_s": 31.0, "duration_s": 0.01, "decoding": 4,
        "context_tokens": 44, "adapters": 1, "prefill_tokens": 8, "prefills": 1, "waiting": 0,
    }]  # fmt: skip
