"""The speed a replay charges a real run's engines: how many times as slow its host ran them,
from the run's yardstick (marlaas.executors.yardstick) over its calibration runs'.

On the 2-core VM of docs/twin-log.md ("A host whose speed moves from run to run") the same run
took up to a third longer from one run to the next, and no term of the cost model can tell.
The yardstick, timed in the run's own process, sees part of it; a replay charges the speed
that follows from it to the profile's engine terms
(:meth:`marlaas.sim.cost_model.CostModel.engines_at_speed`).
"""

from __future__ import annotations

import math

from marlaas.executors.yardstick import positive_time

SCALED_WITHIN = 4.0
"""The largest yardstick ratio a replay charges a speed for (either way): past it the run and
the calibration ran on hardware different in kind, whose costs differ in shape, not only in
speed."""

SPEED_PER_YARDSTICK = 0.8
"""How a run's speed follows its yardstick: the speed a replay charges is the yardstick's ratio
to this power (:func:`charged_speed`). The yardstick is itself noisy (its two ends differ by up
to 70% within one run), so the best guess of a run's speed moves less than it: over the 18
runs of each of docs/twin-log.md's sittings 4 and 5, the logarithm of a run's one-adapter
decoding-step ratio (against its workload's sequential runs' fit) regressed on the logarithm
of its yardstick, each workload's runs centred, has slope 0.85 and 0.76 (measured after this
was chosen: 0.76 over sitting 6's, 0.29 over sitting 7's, whose repeats were close)."""


def speed_ratio(run_s_per_token: object, reference_s_per_token: object) -> float | None:
    """A run's yardstick over the calibration runs' (None when either is not a time per token,
    or their ratio is not a finite number above 0)."""
    if not (positive_time(run_s_per_token) and positive_time(reference_s_per_token)):
        return None
    ratio = run_s_per_token / reference_s_per_token
    return ratio if 0 < ratio < math.inf else None


def charged_speed(ratio: float | None) -> float | None:
    """The speed a replay charges a run whose yardstick is ``ratio`` times the calibration
    runs' (:data:`SPEED_PER_YARDSTICK`); None, the profile's own speed, where the ratio is
    unknown or past :data:`SCALED_WITHIN` either way."""
    if ratio is None or not 1 / SCALED_WITHIN <= ratio <= SCALED_WITHIN:
        return None
    return ratio**SPEED_PER_YARDSTICK


def speed_note(run_s_per_token: object, reference_s_per_token: object) -> str | None:
    """One line setting a run's yardstick against the calibration runs', and the speed a
    replay charges it (None when either yardstick is unknown)."""
    ratio = speed_ratio(run_s_per_token, reference_s_per_token)
    if ratio is None:  # unknown, or not a time (a profile file's hand-edited sources)
        return None
    charged = charged_speed(ratio)
    return (f"the run's engines took {ratio:.3g}x the calibration runs' time on the fixed "
            f"yardstick batch ({run_s_per_token * 1e3:.3g} against "
            f"{reference_s_per_token * 1e3:.3g} ms per token): "
            + (f"the replay charges the profile's engine costs at {charged:.3g}x (runs' speed "
               f"follows the yardstick to the power {SPEED_PER_YARDSTICK:g})"
               if charged is not None else "too far apart to be the same hardware; the replay "
               "charges the profile's own costs"))  # fmt: skip
