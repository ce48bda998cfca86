"""The analytic continuous-batching model against a brute-force per-iteration loop."""

from __future__ import annotations

import numpy as np
import pytest

from marlaas.sim.cost_model import CostModel
from marlaas.sim.engine_model import EngineModel


def brute_force(cost: CostModel, groups: list[tuple[float, list[int], float, object]]):
    """Decode iteration by iteration; returns {group index: finish time [s]}."""
    base, per_seq = cost.decode_base_ms / 1e3, cost.decode_per_seq_ms / 1e3
    per_kv, per_adapter = cost.decode_per_kv_token_ms / 1e3, cost.decode_per_adapter_ms / 1e3
    pending = sorted(range(len(groups)), key=lambda g: groups[g][0])
    running: list[list] = []  # [group, remaining, context, adapter]
    now, resume, finish = 0.0, 0.0, {}
    while pending or running:
        while pending and groups[pending[0]][0] <= now:
            g = pending.pop(0)
            admit_s, lengths, prompt, adapter = groups[g]
            tokens = prompt * len(lengths)
            resume = max(resume, admit_s) + cost.prefill_base_ms / 1e3
            resume += tokens / cost.prefill_tokens_per_s
            running += [[g, length, prompt, adapter] for length in lengths]
        if not running:
            now = groups[pending[0]][0]
            continue
        now = max(now, resume)
        context = sum(seq[2] for seq in running)
        dt = base + per_seq * len(running) + per_kv * context
        dt += per_adapter * len({seq[3] for seq in running})
        now += dt
        for seq in running:
            seq[1] -= 1
            seq[2] += 1
        for seq in [s for s in running if s[1] <= 0]:
            running.remove(seq)
            if not any(s[0] == seq[0] for s in running):
                finish[seq[0]] = now
    return finish


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_analytic_engine_matches_iteration_by_iteration(seed):
    cost = CostModel()
    rng = np.random.default_rng(seed)
    groups = [
        (float(rng.uniform(0, 3)), rng.integers(1, 200, 6).tolist(), 50.0, f"a{i % 3}")
        for i in range(8)
    ]
    groups.sort(key=lambda g: g[0])
    expected = brute_force(cost, groups)

    engine = EngineModel(cost)
    got = {}
    events = sorted((g[0], "admit", i) for i, g in enumerate(groups))
    while events or engine.next_group_done_s() is not None:
        wake = engine.next_group_done_s()
        if events and (wake is None or events[0][0] <= wake):
            t, _, i = events.pop(0)
            _, lengths, prompt, adapter = groups[i]
            engine.admit(t, i, np.array(lengths, dtype=float), prompt, adapter)
        else:
            for i in engine.pop_finished(wake):
                got[i] = wake
    assert set(got) == set(expected)
    for i, t in expected.items():
        # the fluid model ends a sequence mid-iteration; one iteration is ~10 ms
        assert got[i] == pytest.approx(t, abs=0.05), i


def test_more_adapters_in_a_batch_decode_slower():
    cost = CostModel()
    times = []
    for n_adapters in (1, 8):
        engine = EngineModel(cost)
        for g in range(8):
            engine.admit(0.0, g, np.full(8, 100.0), 10.0, f"a{g % n_adapters}")
        times.append(engine.next_group_done_s())
    assert times[1] > times[0]


@pytest.mark.parametrize("prompt", [0.0, 10.0])
def test_a_group_whose_time_left_is_below_the_clocks_resolution_ends_at_its_wake_up(prompt):
    # at 2^34 s (1.7e10 s, a clock valid inputs reach) a float moves in steps of 3.8e-6 s, and
    # one token at 1 us an iteration (decode_base_ms 1e-3, the bound) is below it: the group's
    # end is the time it was computed at, with (prompt 10) or without a prefill before it
    cost = CostModel(decode_base_ms=1e-3, decode_per_seq_ms=0, decode_per_kv_token_ms=0,
                     decode_per_adapter_ms=0, prefill_base_ms=0)  # fmt: skip
    engine = EngineModel(cost)
    now = 2.0**34
    engine.admit(now, 1, [1], prompt, "a")
    wake = engine.next_group_done_s()
    assert engine.pop_finished(wake) == [1]
    assert engine.next_group_done_s() is None and not engine.running
