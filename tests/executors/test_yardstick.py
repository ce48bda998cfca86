"""The engines' yardstick: a fixed batch timed per engine, the first batch left out."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from marlaas.executors import yardstick as ys


class TimedEngine:
    """An engine whose batches take ``seconds`` in turn (simulated clock), generating
    ``tokens`` per prompt; notes its calls' arguments."""

    def __init__(self, clock: list[float], seconds: list[float], tokens: int) -> None:
        self.clock, self.seconds, self.tokens = clock, list(seconds), tokens
        self.calls: list[tuple] = []
        self.empty_at: set[int] = set()
        """Batches (by index) that generate nothing."""

    async def generate(self, *args):
        self.calls.append(args)
        self.clock[0] += self.seconds.pop(0)
        tokens = 0 if len(self.calls) - 1 in self.empty_at else self.tokens
        completion = SimpleNamespace(completion_ids=tuple(range(tokens)))
        return [[completion] for _ in args[2]]


def test_the_yardstick_is_the_median_per_token_after_the_first_batch(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(ys, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    slow_first = TimedEngine(clock, [9.0, 0.16, 0.32, 0.32, 0.48], tokens=10)
    other = TimedEngine(clock, [1.0, 0.8, 0.8, 0.8, 0.8], tokens=20)
    measured = asyncio.run(ys.yardstick({"a": slow_first, "b": other}))
    prompts = ys.YARDSTICK_PROMPTS
    assert measured == {"a": pytest.approx(0.32 / (prompts * 10)),
                        "b": pytest.approx(0.8 / (prompts * 20))}  # fmt: skip
    assert len(slow_first.calls) == ys.YARDSTICK_BATCHES
    adapter, _version, batch, n, new_tokens, _temperature, seed = slow_first.calls[1]
    assert (adapter, n, new_tokens, seed) == (None, 1, ys.YARDSTICK_NEW_TOKENS, 1)
    assert batch == ys.yardstick_prompts() and len({tuple(p) for p in batch}) == prompts


def test_a_batch_that_generated_nothing_is_no_yardstick(monkeypatch):
    """Tokens, not batches: a batch whose samples all ended at once is left out, and an engine
    with no batch left has no yardstick (rather than seconds per batch)."""
    clock = [0.0]
    monkeypatch.setattr(ys, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    some = TimedEngine(clock, [1.0, 0.2, 0.2, 0.2, 0.2], tokens=10)
    some.empty_at = {2}
    none = TimedEngine(clock, [1.0, 0.2, 0.2, 0.2, 0.2], tokens=0)
    measured = asyncio.run(ys.yardstick({"some": some, "none": none}))
    assert measured == {"some": pytest.approx(0.2 / (ys.YARDSTICK_PROMPTS * 10))}
