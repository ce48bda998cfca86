"""The twin's held-out check (issue 27's Show, docs/twin.md): calibrate on one schedule's real
runs, replay every other run of the workload with that profile, and print the errors.

    python benchmarks/twin_holdout.py RUN_DIR [RUN_DIR ...] [--refine 150] [--mixed]

Runs are grouped by schedule: their summary's policy and preset (``fair``, ``fifo``,
``fifo+sequential``). For each schedule in turn its runs calibrate a profile (as ``marlaas
calibrate``), and each run of the other schedules is replayed with it (as ``marlaas replay``):
one row per replay with the makespan error, the largest busy-fraction error (the shared
processor and the pools, in points), the replayed run's host share (``summary.json``'s
``host``: the share of the machine's processor time that other processes and the hypervisor
took while it ran; "-" for a run from before it was recorded), the speed the replay charged
it (marlaas.twin.speed: from its engines' yardstick over the calibration runs'; above 1: its
host ran the same fixed batch slower; "-" where a run has none, or one more than 4x the
calibration runs' either way), and the makespan error of a replay at the profile's own
speed. A first table lists every run: makespan, its own CPU seconds, the host share, and
generation's total time from its event log, then how far apart the repeats of each schedule
are.
Last, per calibration schedule, how many of its replays are within the Show's bounds (10% of
makespan, 5 points of every busy fraction). With ``--mixed`` each calibration is one run of
each of two schedules (every pair of schedules, every repeat), and every other run is
replayed: the runs of the third schedule are then of a schedule no calibration run had.
Nothing is written but the output; profiles and replays stay in memory.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd

from marlaas.sim.cost_profiles import CostProfile
from marlaas.twin.calibrate import calibrate
from marlaas.twin.header import provenance
from marlaas.twin.real_run import load_real_run
from marlaas.twin.replay import replay

WITHIN = 0.10
"""The Show's bound on a held-out replay's makespan error (relative)."""
BUSY_WITHIN = 5.0
"""The Show's bound on a held-out replay's busy-fraction error [percentage points]."""


def schedule_of(summary: dict) -> str:
    """A run's schedule: its policy, and its preset when it has one."""
    preset = summary.get("preset")
    return summary["policy"] + (f"+{preset}" if preset else "")


def host_share(summary: dict) -> str:
    """The run's host share as a percentage ("-": not recorded)."""
    share = (summary.get("host") or {}).get("others_share")
    return "-" if share is None else f"{share:.1%}"


def run_table(runs: list) -> pd.DataFrame:
    """One row per real run: schedule, makespan, CPU seconds, host share, generation time."""
    rows = []
    for run in runs:
        host = run.summary.get("host") or {}
        gen = run.events[(run.events["kind"] == "generate") & (run.events["outcome"] == "ok")]
        rows.append({
            "run": run.path.name, "schedule": schedule_of(run.summary),
            "makespan_s": run.summary["metrics"]["makespan_s"],
            "run_cpu_s": host.get("run_cpu_s"), "others": host_share(run.summary),
            "generate_s": float((gen["end_s"] - gen["start_s"]).sum()),
        })  # fmt: skip
    return pd.DataFrame(rows)


def repeat_spread(listed: pd.DataFrame) -> list[str]:
    """One line per schedule of several runs: their makespans and how far apart they are (the
    largest less the smallest, over their mean): no replay can be nearer a run than its
    repeats are to each other."""
    lines = []
    for schedule, rows in listed.groupby("schedule", sort=True):
        if len(rows) < 2:
            continue
        makespans = rows["makespan_s"]
        apart = (makespans.max() - makespans.min()) / makespans.mean()
        shown = ", ".join(f"{m:.1f}" for m in makespans)
        lines.append(f"repeats of {schedule}: makespans {shown} s, {apart:.1%} apart")
    return lines


def calibration_sets(by_schedule: dict[str, list], mixed: bool) -> list[tuple[str, list]]:
    """(label, runs) of each calibration: every schedule's runs (the issue's check), or, when
    ``mixed``, each pair of schedules' k-th runs (one run of each, for every k both have), so
    that a per-adapter cost and the work beside other jobs' that one schedule cannot tell apart
    from the rest are both seen (docs/twin-log.md, "Calibrated on two schedules")."""
    schedules = sorted(by_schedule)
    if not mixed:
        return [(schedule, by_schedule[schedule]) for schedule in schedules]
    sets = []
    for i, first in enumerate(schedules):
        for second in schedules[i + 1 :]:
            pairs = zip(by_schedule[first], by_schedule[second], strict=False)  # k-th runs of both
            sets += [(f"{first} + {second}", list(pair)) for pair in pairs]
    return sets


def holdout_table(runs: list, refine: int, mixed: bool = False) -> tuple[pd.DataFrame, list[str]]:
    """(one row per (calibration schedule, held-out run): makespan error, busy error, host,
    speed (the speed the replay charged, from the run's yardstick over its calibration runs';
    NaN where either has none), the makespan error at the profile's own speed; each
    calibration's warnings). Runs of more than one workload, or of one schedule only,
    are a ValueError."""
    workloads = {run.workload.name for run in runs}
    if len(workloads) > 1:
        raise ValueError(f"runs of {len(workloads)} workloads ({', '.join(sorted(workloads))}): "
                         "give the runs of one")  # fmt: skip
    by_schedule = defaultdict(list)
    for run in runs:
        by_schedule[schedule_of(run.summary)].append(run)
    if len(by_schedule) < 2:
        raise ValueError(f"runs of one schedule only ({', '.join(by_schedule)}): the check "
                         "needs runs of at least two")  # fmt: skip
    rows, warnings = [], []
    for label, calibration in calibration_sets(by_schedule, mixed):
        fit = calibrate([r.path for r in calibration], refine_evaluations=refine)
        warnings += [f"calibrated on {label}: {w}" for w in fit.warnings]
        name = f"calibrated-{label.replace(' + ', '-')}"
        profile = CostProfile(name, fit.cost, "(in memory)", "-", provenance(fit, name))
        seen = {schedule_of(r.summary) for r in calibration}
        fitted_on = {r.path for r in calibration}
        for run in runs:
            if run.path in fitted_on or (not mixed and schedule_of(run.summary) in seen):
                continue
            _events, replayed, table = replay(run, profile)
            own_speed = replay(run, profile, at_run_speed=False)[2]
            busy = table[table["metric"].str.match(r"busy fraction, (pool|processor)")]
            rows.append({
                "calibrated on": label, "replayed": run.path.name,
                "schedule seen": schedule_of(run.summary) in seen,
                "makespan error": _makespan_error(table),
                "busy error pt": float(busy["error"].abs().max()),
                "others": host_share(run.summary),
                "speed": replayed["replayed_at_speed"],
                "at the profile's speed": _makespan_error(own_speed),
            })  # fmt: skip
    if not rows:
        raise ValueError("every run is in a calibration, none is left to replay: give a "
                         "second run of a schedule, or runs of a third")  # fmt: skip
    return pd.DataFrame(rows), warnings


def _makespan_error(table: pd.DataFrame) -> float:
    """The makespan's relative error in a fidelity table."""
    return float(table.set_index("metric").loc["makespan", "error"])


def per_schedule(table: pd.DataFrame) -> list[str]:
    """One line per calibration schedule: of its held-out replays, how many are within the
    Show's bounds on makespan and on busy fractions (the issue's check is one schedule
    calibrated, the others replayed)."""
    lines = []
    for schedule, rows in table.groupby("calibrated on", sort=True):
        makespan = rows["makespan error"].abs() <= WITHIN
        busy = rows["busy error pt"] <= BUSY_WITHIN
        lines.append(f"calibrated on {schedule}: makespan within {WITHIN:.0%} on "
                     f"{makespan.sum()} of {len(rows)}, busy within {BUSY_WITHIN:g} points on "
                     f"{busy.sum()}, both on {(makespan & busy).sum()}")  # fmt: skip
        unseen = ~rows["schedule seen"]
        if unseen.any() and not unseen.all():
            met = (makespan & unseen).sum()
            lines.append(f"  of them, runs of a schedule not calibrated on: makespan within "
                         f"{WITHIN:.0%} on {met} of {unseen.sum()}")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="real run folders of one workload")
    parser.add_argument("--refine", type=int, default=150,
                        help="replays refining a calibration (0: none)")  # fmt: skip
    parser.add_argument("--mixed", action="store_true",
                        help="calibrate on one run of each of two schedules (every pair and "
                             "repeat) instead of one schedule's runs")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        runs = [load_real_run(path) for path in args.runs]
    except ValueError as err:  # not a real run, a file, a corrupt summary or event log
        sys.exit(f"twin_holdout: {err}")
    listed = run_table(runs)
    print(listed.to_string(index=False))
    for line in repeat_spread(listed):
        print(line)
    try:
        table, warnings = holdout_table(runs, args.refine, args.mixed)
    except ValueError as err:
        sys.exit(f"twin_holdout: {err}")
    shown = table.assign(**{
        "makespan error": table["makespan error"].map("{:+.1%}".format),
        "busy error pt": table["busy error pt"].map("{:.1f}".format),
        "speed": table["speed"].map(lambda r: "-" if pd.isna(r) else f"{r:.2f}x"),
        "at the profile's speed": table["at the profile's speed"].map("{:+.1%}".format),
    })  # fmt: skip
    print()
    print(shown.to_string(index=False))
    within = (table["makespan error"].abs() <= WITHIN).sum()
    own_speed = table["at the profile's speed"].abs()
    print(f"\nmakespan within {WITHIN:.0%}: {within} of {len(table)} held-out replays "
          f"({(own_speed <= WITHIN).sum()} at the profile's speed); mean error "
          f"{table['makespan error'].abs().mean():.1%} ({own_speed.mean():.1%}); busy error at "
          f"most {table['busy error pt'].max():.1f} points")  # fmt: skip
    for line in per_schedule(table):
        print(line)
    for warning in warnings:
        print(f"warning: {warning}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
