"""TensorMemo: a value is reused while its tensors are unchanged, and the memo stays bounded."""

import pytest

torch = pytest.importorskip("torch")

from marlaas.executors.tensor_memo import TensorMemo  # noqa: E402


def _counting(memo, tensors, extra=()):
    calls = []

    def compute():
        calls.append(1)
        return tensors[0].sum().item()

    return memo.get(tensors, compute, extra), calls


def test_a_value_is_reused_until_a_tensor_is_written_in_place():
    memo, t = TensorMemo(8), torch.arange(4.0)
    assert _counting(memo, (t,)) == (6.0, [1])
    assert _counting(memo, (t[:],)) == (6.0, [])  # a view of the same memory: the same tensor
    t[0] = 10.0  # in place: a new version
    assert _counting(memo, (t,)) == (16.0, [1])
    base = torch.zeros(6)
    view = base[:4]
    assert _counting(memo, (view,)) == (0.0, [1])
    base.copy_(torch.ones(6))  # written through the base: the view's version moves too
    assert _counting(memo, (view,)) == (4.0, [1])


def test_the_extra_key_and_other_shapes_are_other_entries():
    memo, t = TensorMemo(8), torch.ones(4)
    _counting(memo, (t,), ("a",))
    assert _counting(memo, (t,), ("b",))[1] == [1]
    assert _counting(memo, (t[:2],), ("a",)) == (2.0, [1])


def test_inference_tensors_are_computed_every_time():
    memo = TensorMemo(8)
    with torch.inference_mode():
        t = torch.ones(3)
    assert _counting(memo, (t,))[1] == [1]
    assert _counting(memo, (t,))[1] == [1]
    assert len(memo) == 0


def test_the_memo_keeps_its_bounds_dropping_the_least_recently_used():
    memo = TensorMemo(max_entries=2)
    a, b, c = torch.ones(1), torch.ones(2), torch.ones(3)
    for t in (a, b, a, c):  # a used again: b is the least recently used when c comes
        _counting(memo, (t,))
    assert len(memo) == 2
    assert _counting(memo, (a,))[1] == [] and _counting(memo, (b,))[1] == [1]
    sized = TensorMemo(max_entries=10, max_bytes=100)
    sized.get((a,), lambda: torch.zeros(20))  # 80 bytes
    sized.get((b,), lambda: torch.zeros(20))  # 160 in all: the first goes
    assert len(sized) == 1
    sized.get((c,), lambda: torch.zeros(30))  # 120 bytes alone: computed, not kept
    assert len(sized) == 1
