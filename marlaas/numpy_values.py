"""Numpy's values in what a user's code gives back, told apart without importing numpy.

A policy's key or an environment's ``done`` may hold a numpy value (``np.any(...) > 0`` is a
numpy bool, not a ``bool`` nor a ``numbers.Real``); numpy is then imported already, by the code
that made it. These checks do not import it themselves (a run that never meets numpy does not
load it for them): they look numpy up among the modules loaded.
"""

from __future__ import annotations

import sys
from types import ModuleType


def loaded_numpy() -> ModuleType | None:
    """The numpy module when something imported it, else None (then no value is numpy's)."""
    return sys.modules.get("numpy")


def is_numpy_bool(value: object) -> bool:
    """Whether ``value`` is a numpy bool (``numpy.bool_``)."""
    numpy = loaded_numpy()
    return numpy is not None and isinstance(value, numpy.bool_)
