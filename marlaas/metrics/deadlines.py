"""Deadlines: which jobs missed theirs."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from marlaas.metrics.natural_order import natural_key


def missed_deadlines(jobs: pd.DataFrame, deadlines: Mapping[str, float] | None) -> list[str]:
    """Jobs of ``deadlines`` ({job: deadline after its arrival [s]}) that missed it, in
    natural order: their completion time (``jobs``: a :func:`marlaas.metrics.jobs.job_table`)
    is later than the deadline, or they have none (refused, cancelled, never run)."""
    jct = dict(zip(jobs["job"], jobs["jct_s"], strict=True))
    missed = [
        name
        for name, deadline in (deadlines or {}).items()
        if not math.isfinite(jct.get(name, math.nan)) or jct[name] > deadline
    ]
    return sorted(missed, key=natural_key)
