"""The placement indexes answer as a scan of everything would, under random changes."""

from __future__ import annotations

import random

import pytest

from marlaas.core.free_engines import FreeEngines
from marlaas.core.need_index import NeedIndex
from marlaas.core.policy_queue import PolicyQueue


@pytest.mark.parametrize("seed", range(6))
def test_free_engines_find_the_engine_a_scan_finds(seed):
    rng = random.Random(seed)
    engines = rng.choice([1, 2, 5, 16, 37])
    free = FreeEngines(engines)
    state = {}
    for _ in range(3000):
        index = rng.randrange(engines)
        state[index] = (rng.random() < 0.7, rng.choice([0, 8, 16, 24, 32]), rng.randrange(0, 50))
        free.update(index, *state[index], busy=rng.random() < 0.5)
        seqs, tokens = rng.choice([1, 8, 16]), rng.randrange(0, 50)
        exclude = set(rng.sample(range(engines), rng.randint(0, min(3, engines))))
        fits = [
            (room, -i)
            for i, (is_open, room, left) in state.items()
            if is_open and room >= seqs and left >= tokens and i not in exclude
        ]
        expected = -max(fits)[1] if fits else None
        assert free.best(seqs, tokens, exclude) == expected
        assert free.most_tokens() == max((s[2] for s in state.values()), default=-1)


@pytest.mark.parametrize("seed", range(6))
def test_need_index_finds_the_job_a_scan_finds(seed):
    rng = random.Random(seed)
    needs = NeedIndex(rng.choice([100, 1000, 120_000]))
    top = needs.max_tokens
    indexed = {}
    for _ in range(3000):
        job = rng.randrange(40)
        if rng.random() < 0.2:
            needs.remove(job)
            indexed.pop(job, None)
        else:
            seqs, tokens = rng.choice([4, 8]), rng.choice([rng.randrange(top + 2), top // 3])
            key = (rng.choice([0.0, 1.0, rng.random()]), job)
            needs.put(job, seqs, tokens, key)
            if tokens <= top:
                indexed[job] = (seqs, tokens, key)
            else:
                indexed.pop(job, None)
        if rng.random() < 0.5:
            seqs, tokens = rng.choice([4, 8, 16]), rng.randrange(top + 2)
            fits = [(k, j) for j, (s, t, k) in indexed.items() if s <= seqs and t <= tokens]
            assert needs.first_fitting(seqs, tokens) == (min(fits) if fits else None)
    assert needs.indexed == indexed


def test_policy_queue_pops_in_key_order_with_keys_that_move():
    rng = random.Random(3)
    queue, keys = PolicyQueue(), {}
    for _ in range(2000):
        job = rng.randrange(30)
        if rng.random() < 0.3:
            queue.discard(job)
            keys.pop(job, None)
        elif rng.random() < 0.8:
            keys[job] = (rng.randrange(10), job)
            queue.put(job, keys[job])
        else:
            expected = min(keys, key=keys.get) if keys else None
            assert queue.pop() == expected
            keys.pop(expected, None)
        assert len(queue) == len(keys)
