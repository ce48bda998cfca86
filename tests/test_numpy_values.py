"""A numpy bool is told apart without importing numpy (marlaas.numpy_values), as the policy
checks and the environment contract read it."""

from __future__ import annotations

import sys

import numpy as np

from marlaas.numpy_values import is_numpy_bool, loaded_numpy


def test_a_numpy_bool_is_one_and_nothing_else_is():
    assert is_numpy_bool(np.bool_(True)) and is_numpy_bool(np.any(np.array([1])) > 0)
    for other in (True, 1, 1.0, np.int64(1), np.float32(0.0), "True", None):
        assert not is_numpy_bool(other)


def test_numpy_is_found_only_where_it_was_imported(monkeypatch):
    assert loaded_numpy() is np
    monkeypatch.delitem(sys.modules, "numpy")
    assert loaded_numpy() is None and not is_numpy_bool(np.bool_(True))
