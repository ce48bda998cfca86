"""The placement indexes answer as a scan of everything would, under random changes; the
record log reads back what was appended."""

from __future__ import annotations

import gc
import math
import random

import numpy as np
import pytest

from marlaas.core.free_engines import FreeEngines
from marlaas.core.need_index import NeedIndex
from marlaas.core.policy_queue import PolicyQueue
from marlaas.core.records import RecordLog, WorkRecord


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
        in_order = [
            i
            for room, i in sorted((-room, i) for i, (is_open, room, left) in state.items()
                                  if is_open and room >= seqs and left >= tokens)
        ]  # fmt: skip
        assert list(free.in_order(seqs, tokens)) == in_order
    for index in range(engines):  # every engine closed: nothing is open
        free.update(index, False, 0, 0, busy=False)
    assert free.best(0, 0) is None and not list(free.in_order(0, 0))


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


def test_record_log_reads_back_what_was_appended():
    rng = random.Random(5)
    log, kept = RecordLog(), []
    for i in range(3 * 4096 + 17):
        record = WorkRecord(
            rng.choice(["generate", "env", "idle"]), "t", f"j{i % 7}", "rollout/1", "rollout",
            rng.random() * 100, rng.random() * 100 + 100, i % 11, i, -1, 8, rng.randrange(10**6),
            i % 3, -1, "ok", rng.choice([math.nan, rng.random()]),
        )  # fmt: skip
        if i == 5000:  # a value of another type keeps its type
            record = record._replace(tokens=2.5)
        log.append(record if i % 2 else tuple(record))
        kept.append(record)
    assert len(log) == len(kept)
    assert [repr(tuple(r)) for r in log] == [repr(tuple(r)) for r in kept]
    for i in (0, 1, 4096, 5000, len(kept) - 1, -1):
        assert repr(log[i]) == repr(kept[i])
    assert [repr(r) for r in log[4090:4100]] == [repr(r) for r in kept[4090:4100]]
    columns = log.columns()
    for field, values in zip(WorkRecord._fields, columns, strict=True):
        values = values.tolist() if isinstance(values, np.ndarray) else values
        assert [repr(v) for v in values] == [repr(getattr(r, field)) for r in kept], field


def test_records_add_nothing_the_garbage_collector_tracks():
    """A run keeps every record: a record that stayed a tracked object (a tuple) would make
    the collector scan millions of them."""
    log = RecordLog()
    gc.disable()
    try:
        before = len(gc.get_objects())
        for i in range(2000):
            log.append(("generate", "t", "j", "r/0", "r", i * 0.5, i * 0.5 + 1, i, i, 0, 8,
                        10**6 + i, 0, 0, "ok", math.nan, 7, 9))  # fmt: skip
        added = len(gc.get_objects()) - before
    finally:
        gc.enable()
    assert len(log) == 2000 and log[-1].tokens == 10**6 + 1999
    assert added < 10


def test_a_record_of_the_wrong_length_is_refused_whole():
    log = RecordLog()
    log.append(tuple(range(len(WorkRecord._fields))))
    with pytest.raises(ValueError, match="18 fields, not 3"):
        log.append(("generate", "t", "j"))
    assert len(log) == 1 and {len(field) for field in log.fields} == {1}
