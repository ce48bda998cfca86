"""``marlaas replay``: simulate a real run again, exactly as it was, and measure the twin.

The replay simulates the run's own workload (its ``workload.json``), policy, preset and seed,
with each group turn generating the tokens it generated for real and each environment step
taking the time it took (marlaas.sim.recording), so what differs is the cost model's account of
generation, training, loads and syncs. It writes a run folder of kind ``replay`` and the
fidelity table (``fidelity.csv``).

A profile calibrated from runs that timed the engines' yardstick (marlaas.executors.yardstick)
charges a run's engines the speed its host gave them: the profile's costs :meth:`engines_at_speed
<marlaas.sim.cost_model.CostModel.engines_at_speed>` the speed that follows from the run's
yardstick over the calibration runs' (marlaas.twin.speed). On the 2-core VM of docs/twin-log.md,
where the same run took up to a third longer from one run to the next, that brings 108
held-out replays (sittings 4-6, on the code as of 1a0bb68) from 70 within 10% of the makespan
to 79, the mean error from 9.3% to 7.2%.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pandas as pd

from marlaas.executors.host_share import busy_host_note
from marlaas.executors.yardstick import positive_time, run_yardstick
from marlaas.sim.cost_profiles import CostProfile
from marlaas.sim.recording import Recording
from marlaas.sim.run import simulate_run
from marlaas.twin.fidelity import fidelity_table
from marlaas.twin.header import model_folder, model_label, same_folder
from marlaas.twin.real_run import (
    REPLAYED_STAGES,
    CalibrationError,
    RealRun,
    load_real_run,
    require_stages,
)
from marlaas.twin.speed import charged_speed, speed_ratio

FIDELITY_FILE = "fidelity.csv"


def replay(
    run: RealRun | str | Path, profile: CostProfile | None = None, at_run_speed: bool = True
) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """(replay events, replay summary, fidelity table) of a real run (its folder, or the
    folder as :func:`marlaas.twin.real_run.load_real_run` read it). With ``at_run_speed``, the
    profile's engine costs are charged at the speed the run's yardstick gives
    (:func:`run_speed`, marlaas.twin.speed); the summary records the speed charged
    (``replayed_at_speed``; None: the profile's own costs)."""
    if not isinstance(run, RealRun):
        run = load_real_run(run, "replay")
    require_stages([run], REPLAYED_STAGES, "replay")
    if any((run.summary.get("resumed_from") or {}).values()):
        raise CalibrationError(f"{run.path}: a resumed run's log starts midway; replay a run "
                               "trained from the start")  # fmt: skip
    speed = charged_speed(run_speed(run, profile)) if at_run_speed else None
    if speed is not None:
        profile = replace(profile, cost=profile.cost.engines_at_speed(speed))
    events, replayed = simulate_run(
        run.workload, run.summary["policy"], run.summary["seed"], profile=profile,
        recording=Recording.from_events(run.events), kind="replay", replay_of=str(run.path),
        replayed_at_speed=speed,
    )  # fmt: skip
    arrivals = {j.name: j.arrival_s for j in run.workload.jobs}
    table = fidelity_table(run.events, events, arrivals, run.workload.cluster.shared_processor)
    return events, replayed, table


def run_speed(run: RealRun, profile: CostProfile | None) -> float | None:
    """The run's engines' yardstick over the calibration runs' that ``profile`` records: how
    many times as slow its host ran the same fixed batch (None: either is unknown, the
    profile is of another model, or the run's host was busy: :func:`busy_yardstick`). The
    replay charges :func:`marlaas.twin.speed.charged_speed` of it."""
    if busy_yardstick(run):
        return None
    return speed_ratio(run_yardstick(run.summary), calibration_yardstick(profile, run))


def busy_yardstick(run: RealRun) -> bool:
    """Whether the run's host was busy (its summary's ``host``: other processes took
    :data:`~marlaas.executors.host_share.BUSY_HOST_SHARE` or more of the processors), so that
    its yardstick, a second's batches at each end, timed the load of that moment rather than
    the speed its host gave the run: over docs/twin-log.md's nine show-e runs of 2026-12-07
    (others at 58-63%), whose engines made the same 4,299 steps in every run, a run's
    yardstick correlates 0.24 with their total time (which correlates 0.99 with its makespan),
    and charging it put 6 of 18 held-out replays within 10% of the makespan against 12 of 18 at
    the profile's own speed (mean error 16.1% against 8.2%)."""
    return busy_host_note(run.summary.get("host")) is not None


def unkept_yardstick_note(run: RealRun, profile: CostProfile | None) -> str | None:
    """One line saying that the replay of ``run``, whose engines timed a yardstick, charges
    the profile's own costs because ``profile``, calibrated for the run's model, keeps no
    yardstick (calibrate keeps none where a calibration run's host was busy); None where the
    run timed none or its host was busy (:func:`busy_yardstick`: ``replay`` says that), or
    ``profile`` is absent, not calibrated, of another model, or keeps one."""
    if profile is None or profile.meta.get("origin") != "calibrated" or busy_yardstick(run):
        return None
    run_s = run_yardstick(run.summary)
    if not positive_time(run_s) or same_model(profile, run) is False:
        return None
    if calibration_yardstick(profile, run) is not None:
        return None
    return (f"the profile keeps no yardstick of its calibration runs (a calibration run's host "
            f"was busy, or none timed one): the replay charges the profile's own costs, not "
            f"this run's speed (its yardstick {run_s * 1e3:.3g} ms per token)")  # fmt: skip


def calibration_yardstick(profile: CostProfile | None, run: RealRun) -> object:
    """The calibration runs' yardstick ``profile`` records (``sources.yardstick_s_per_token``,
    as written: the caller checks it is a time), or None: no profile, none recorded, or a
    profile of another model than the run's (:func:`same_model`: its engines' batch is not
    this one's)."""
    if profile is None or same_model(profile, run) is False:
        return None
    sources = profile.meta.get("sources")
    return sources.get("yardstick_s_per_token") if isinstance(sources, dict) else None


def same_model(profile: CostProfile, run: RealRun) -> bool | None:
    """Whether ``profile`` was made for the base model ``run`` trained (None: the profile
    names no model). Its ``model`` (``name (folder)``, as calibrate writes it) names the same
    model when the names agree and the folders are one: compared resolved, a relative folder
    found from the file it comes from (the run's folder, the profile's) or the working folder,
    so that one folder given absolute in one and relative in the other matches."""
    text = profile.meta.get("model")
    if text is None:
        return None
    written = re.fullmatch(r"(.*) \((.+)\)", str(text))
    name, folder = written.groups() if written else (str(text), None)
    base = run.workload.base_model
    if name != base.name:
        return False
    if folder is None or base.path is None:  # a name alone: the names agree
        return True
    ours = model_folder(folder, Path(profile.path).parent)
    return same_folder(ours, model_folder(str(base.path), run.path))  # one not found: its tail


def model_warning(profile: CostProfile | None, run: RealRun) -> str | None:
    """One line saying that ``profile`` was made for another model than ``run``'s (None: the
    same model, or not known)."""
    if profile is None or same_model(profile, run) is not False:
        return None
    made = "was fitted on" if profile.meta.get("origin") == "calibrated" else "is of"
    return (f"the profile {profile.name!r} {made} another model "
            f"({profile.meta.get('model')}) than the run's ({model_label(run.workload)}): its "
            "costs may not carry over, and the run's yardstick speed is not charged")  # fmt: skip
