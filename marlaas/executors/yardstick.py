"""The engines' yardstick: one fixed base-model batch, timed in the run's own process before
its clock starts and again once its work is done, so that a run can be compared with another
for the speed its host gave it.

On the 2-core VM of docs/twin-log.md ("A host whose speed moves from run to run") the same work
ran at different speeds in different runs: a run's one-adapter decoding steps took 0.70x to
1.38x what the sequential runs' fit charges, with others at 0.0-2.6% of the processors. The
speed is the process's: it holds through a run (the first quarter of a run's steps against
its other three: correlation 0.75 over 60 runs), and a benchmark timed in a separate process
before and after the run does not see it (correlation -0.34 to 0.28). A replay at the
calibration runs' speed replays a run that its host slowed short by as much, and no term of
the cost model can tell.

:func:`yardstick` times :data:`YARDSTICK_BATCHES` batches of :data:`YARDSTICK_PROMPTS` fixed
prompts on each engine (the base model, the sampling seeded) and keeps the median of the
batches after the first, in seconds per generated token. ``marlaas train`` times it after the
warm-up and after the work, and records both in the summary (``YARDSTICK_KEYS``);
``calibrate`` keeps the mean of its runs' in the profile's sources, and ``replay`` charges a
run's engines the speed that follows from the run's yardstick (:func:`run_yardstick`: both
ends, every engine) over the calibration runs' (marlaas.twin.speed).
"""

from __future__ import annotations

import statistics
import time

YARDSTICK_PROMPTS = 16
"""Prompts in a yardstick batch (each sampled once)."""
YARDSTICK_PROMPT_TOKENS = 24
"""Length of each yardstick prompt [tokens]."""
YARDSTICK_NEW_TOKENS = 24
"""Tokens each yardstick prompt may generate."""
YARDSTICK_BATCHES = 5
"""Batches timed per engine; the first is left out (the median of the others is kept)."""


def yardstick_prompts() -> list[list[int]]:
    """The fixed prompts: token ids 1-200, distinct per prompt (no shared prefix to cache)."""
    return [
        [(7 * i + j) % 200 + 1 for j in range(YARDSTICK_PROMPT_TOKENS)]
        for i in range(YARDSTICK_PROMPTS)
    ]


async def yardstick(engines: dict) -> dict[str, float]:
    """Time the fixed batch :data:`YARDSTICK_BATCHES` times on each engine, one engine after
    another; return each engine's median over the batches after the first, in seconds per
    generated token (engine name -> s/token; a batch that generated nothing is left out, and
    an engine with no batch left)."""
    measured = {}
    for name, engine in engines.items():
        per_token = []
        for batch in range(YARDSTICK_BATCHES):
            started = time.monotonic()
            groups = await engine.generate(
                None, 0, yardstick_prompts(), 1, YARDSTICK_NEW_TOKENS, 1.0, batch
            )  # positional: a Ray engine's forwarder passes them on as they are
            spent = time.monotonic() - started
            tokens = sum(len(c.completion_ids) for group in groups for c in group)
            if batch and tokens:  # the first batch may still pay one-off costs
                per_token.append(spent / tokens)
        if per_token:  # an engine whose every batch ended at once has no yardstick
            measured[name] = round(statistics.median(per_token), 9)
    return measured


def run_yardstick(summary: dict) -> float | None:
    """A run's yardstick: the mean over its engines, and over the two times it was timed
    (``engine_yardstick_s_per_token`` before the clock, ``engine_yardstick_end_s_per_token``
    after the work, where recorded), in its summary [s per token] (None: a run from before it
    was measured). Both ends, not the first alone: over the 18 runs of docs/twin-log.md's fourth
    sitting the mean of the two correlates 0.65 with the run's decoding speed, the first 0.55,
    the last 0.42."""
    values = []
    for key in YARDSTICK_KEYS:
        measured = summary.get(key)
        if isinstance(measured, dict):  # a summary read without its schema: times only
            values += [v for v in measured.values() if positive_time(v)]
    return sum(values) / len(values) if values else None


YARDSTICK_KEYS = ("engine_yardstick_s_per_token", "engine_yardstick_end_s_per_token")
"""Where a run's summary records its engines' yardstick: after the warm-up, after the work."""


def positive_time(value) -> bool:
    """Whether ``value`` is a time per token: a number (not a bool), above 0, below 1e9 s."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e9
