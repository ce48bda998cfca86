"""Pacing Python's cyclic garbage collector while a run's loop makes objects at every event.

With the default thresholds the young generation is collected every ~700 allocations, every
tenth collection also scans the middle generation, and the full collections walk every object
the run holds (its jobs' groups, the work in flight, the records' lists). Almost nothing a
run allocates is cyclic garbage (a few hundred objects in a run of a million events), so
collecting less often costs no memory worth counting. At 256 simulated jobs (853k SimPy
events, ``benchmarks/scaling.py``'s workload), compiled, two runs each: the default thresholds
spent 1.67 s and 1.77 s of the run's 11.5 s and 12.2 s of CPU in 1,444 collections, a first
threshold of 50,000 0.12 s and 0.18 s of 10.5 s and 11.9 s in 10 (the records add nothing the
collector tracks, see :class:`~marlaas.core.records.RecordLog`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000
"""Allocations (net of deallocations) between two collections of the young generation."""


@contextmanager
def fewer_collections(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Within the block, collect the young generation after ``young`` allocations at the
    earliest (the other thresholds unchanged); the thresholds are restored on leaving it."""
    thresholds = gc.get_threshold()
    gc.set_threshold(max(young, thresholds[0]), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
