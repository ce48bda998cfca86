"""Numbers for people: counts with thousands separators, percentages, seconds, and tables
whose columns carry human names and units.

Every helper turns None, NaN and infinities into ``-``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

MISSING = "-"


def _finite(value) -> float | None:
    if value is None or isinstance(value, str):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def count(value) -> str:
    """A whole number with thousands separators: ``12,345``."""
    x = _finite(value)
    return MISSING if x is None else f"{round(x):,}"


def percent(value, digits: int = 1) -> str:
    """A fraction as a percentage: ``0.553`` -> ``55.3%``."""
    x = _finite(value)
    return MISSING if x is None else f"{x:.{digits}%}"


def number(value, unit: str = "") -> str:
    """A measurement: 1 decimal and separators from 10 up (``1,234.5``, ``1,120.0``), else 3
    significant digits (``0.836``, ``2``, ``0``). ``unit`` follows after a space."""
    x = _finite(value)
    if x is None:
        return MISSING
    text = f"{x:,.1f}" if abs(x) >= 10 else f"{x:.3g}"
    return f"{text} {unit}" if unit else text


def seconds(value) -> str:
    """Seconds: ``1,234.5 s``."""
    return number(value, "s")


def relative(value) -> str:
    """A relative difference with its sign: ``+12.3%``, ``-4.0%``, ``0.0%``."""
    x = _finite(value)
    if x is None:
        return MISSING
    return "0.0%" if abs(x) < 5e-4 else f"{x:+.1%}"


Formatter = Callable[[object], str]

COLUMNS: dict[str, tuple[str, Formatter]] = {
    "job": ("job", str),
    "tenant": ("tenant", str),
    "device": ("device", str),
    "pool": ("pool", str),
    "arrival_s": ("arrival [s]", number),
    "completion_s": ("completed at [s]", number),
    "jct_s": ("job completion time [s]", number),
    "steps": ("training steps", count),
    "tokens": ("tokens generated", count),
    "train_tokens": ("tokens trained on", count),
    "device_s": ("device-seconds received [device-s]", number),
    "busy_s": ("busy [s]", number),
    "utilization": ("utilization", percent),
    "train_steps": ("training steps", count),
    "staleness_mean": ("staleness mean [versions]", number),
    "staleness_p90": ("staleness p90 [versions]", number),
    "staleness_max": ("staleness max [versions]", count),
}
"""Known table columns: (human name with unit, formatter)."""


def column(name: str, integer: bool = False) -> tuple[str, Formatter]:
    """Human name and formatter of a table column (known ones, else by its unit suffix;
    ``integer`` columns are counts)."""
    if name in COLUMNS:
        return COLUMNS[name]
    if name.endswith("_s"):
        return f"{name[:-2].replace('_', ' ')} [s]", number
    return name.replace("_", " "), count if integer else number


def table(frame: pd.DataFrame, index: bool = False) -> pd.DataFrame:
    """``frame`` with every value formatted for people and columns renamed to human names.

    Columns that hold text stay as they are. With ``index`` the index is kept (and formatted
    by its name too); else it is dropped.
    """
    out = {}
    for name in frame.columns:
        values = frame[name]
        human, fmt = column(str(name), pd.api.types.is_integer_dtype(values))
        if values.dtype == object and not values.map(lambda v: _finite(v) is not None).any():
            out[human] = values.fillna(MISSING).astype(str).to_numpy()
        else:
            out[human] = [fmt(v) for v in values]
    result = pd.DataFrame(out, index=frame.index if index else None)
    if index:
        result.index.name = column(str(frame.index.name))[0] if frame.index.name else None
    return result
