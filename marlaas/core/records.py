"""Work records: what the scheduler core writes to the event log, one per piece of work."""

from __future__ import annotations

import math
from typing import NamedTuple


class WorkRecord(NamedTuple):
    """One piece of work as it happened; the row type of the event log (see marlaas.eventlog)."""

    kind: str
    """generate, env, train, sync, adapter_load or idle."""
    tenant: str
    job: str
    device: str
    pool: str
    start_s: float
    """Start time [s]."""
    end_s: float
    """End time [s]."""
    step: int = -1
    group: int = -1
    turn: int = -1
    seqs: int = 0
    tokens: int = 0
    version: int = -1
    staleness: int = -1
    outcome: str = "ok"
    """ok / failed, or the idle cause for idle rows."""
    reward: float = math.nan
    prompt_tokens: int = -1
    """Generate: context tokens per sequence the turn started from (the prompt on the first
    turn; prompt, earlier turns and observations later); -1 for other kinds."""
    longest_tokens: int = -1
    """Generate: tokens of the group's longest sample (it decides when the group ends); -1
    for other kinds."""
