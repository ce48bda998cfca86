"""A real run folder as the twin reads it (``calibrate``, ``replay``), checked whole.

Each of its files is checked on its own by its reader (summary.json: marlaas.run_files, the
event log: marlaas.eventlog, workload.json: marlaas.workload_file); here they are checked
against each other, so that a folder that mixes two runs (another workload's workload.json),
a simulation's folder relabelled as a real run's, or a summary without what a replay needs is
one :class:`CalibrationError` line naming the file, not a fit of nonsense. So is a run that did
not finish (its manifest.json), an event log that repeats rows or does not hold each job's
training steps as its workload.json says (cut short, or another run's workload), a cluster
with devices the log never names, a job arriving otherwise than the summary and the log say,
and, for calibrate and replay alike, a log without a stage of work (:func:`require_stages`).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError

from marlaas.core.scheduler import Scheduler
from marlaas.core.validation_message import format_validation_error, short_repr
from marlaas.core.workload import Workload, WorkloadError
from marlaas.eventlog import DONE_OUTCOMES, EVENT_LOG_FILE, read_event_log
from marlaas.executors.engine_steps import ENGINE_STEPS_CSV
from marlaas.executors.engine_steps import READ as STEP_COLUMNS
from marlaas.output.kinds import other_output
from marlaas.output.manifest import MANIFEST_FILE, peek
from marlaas.run_files import (
    MAX_TABLE_BYTES,
    SUMMARY_FILE,
    Name,
    NonNegative,
    check_summary,
    read_summary,
    read_text,
)
from marlaas.twin.operations import split_loads
from marlaas.workload_file import load_run_workload

WORKLOAD_FILE = "workload.json"
MAX_SHOWN = 3
"""Names an error lists before saying how many more."""


class CalibrationError(WorkloadError):
    """Runs that cannot calibrate a cost model or be replayed (a stage is missing, too few
    rows, files that do not belong together)."""


class _TwinSummary(BaseModel):
    """The keys of a real run's summary.json that only the twin reads (beyond
    marlaas.run_files.RunSummary's)."""

    model_config = ConfigDict(extra="allow")
    engine_warmup_s: dict[Name, NonNegative] = {}
    """Each engine's warm-up before the run's clock started [s] (marlaas.executors.warmup)."""


@dataclass(frozen=True)
class RealRun:
    """A real run folder's event log, workload and summary, and its engines' measured steps
    (``engine_steps.csv``; None where the run has none: engines out of its process, a run
    from before they were measured)."""

    path: Path
    events: pd.DataFrame
    workload: Workload
    summary: dict
    steps: pd.DataFrame | None = None


def load_real_run(path: str | Path, command: str = "calibrate") -> RealRun:
    """Read and check a run folder written by ``marlaas train`` (``command`` names who asks,
    for the errors)."""
    path = Path(path)
    other = other_output(path) if path.is_dir() else None
    if other is not None:  # its manifest (or content) says what it is
        raise CalibrationError(f"{path}: is {other}, not a real training run; {command} reads "
                               "the folders `marlaas train` writes")  # fmt: skip
    summary = read_summary(path)
    if summary.get("kind") != "real":
        read = (path / SUMMARY_FILE).exists()  # one without a kind is a simulation's
        kind = summary.get("kind", "simulation") if read else f"no {SUMMARY_FILE}"
        raise CalibrationError(f"{path}: not a real training run ({kind}); {command} reads the "
                               "folders `marlaas train` writes")  # fmt: skip
    check_summary(summary, str(path / SUMMARY_FILE), require=("policy", "seed", "metrics"))
    try:
        _TwinSummary.model_validate(summary, strict=True)
    except ValidationError as err:
        raise CalibrationError(format_validation_error(err, str(path / SUMMARY_FILE))) from None
    check_finished(path, command)
    makespan = summary["metrics"].get("makespan_s")
    if not makespan:
        raise CalibrationError(f"{path / SUMMARY_FILE}: metrics.makespan_s: missing or 0 (a "
                               "finished real run records its makespan)")  # fmt: skip
    events = read_event_log(path)
    workload = load_run_workload(path)
    check_belongs(path, events, workload, summary)
    check_steps(path, events, workload, summary)
    check_turns(path, events, workload)
    check_cluster(path, events, workload)
    check_arrivals(path, events, workload, summary)
    return RealRun(path, events, workload, summary, read_engine_steps(path, workload))


def check_finished(path: Path, command: str = "calibrate") -> None:
    """CalibrationError unless the run finished: its manifest.json's status is ``finished``
    (a folder from before manifests, without one, counts as finished)."""
    file = path / MANIFEST_FILE
    if not file.exists():
        return
    try:
        manifest = json.loads(peek(file))
    except (OSError, ValueError):
        raise CalibrationError(f"{file}: not a readable manifest; {command} reads the folders "
                               "of finished `marlaas train` runs") from None  # fmt: skip
    status = manifest.get("status", "finished") if isinstance(manifest, dict) else None
    if status != "finished":
        shown = repr(status)[:40]
        raise CalibrationError(f"{file}: status {shown}: the run did not finish; {command} "
                               "reads finished runs (`marlaas train --resume` finishes "
                               "one)")  # fmt: skip


def check_steps(path: Path, events: pd.DataFrame, workload: Workload, summary: dict) -> None:
    """CalibrationError unless the event log holds each job's training steps as the workload
    says: its successful ``train`` rows (one step may span several device rows) count
    ``rl.steps`` distinct steps for a job that finished, and no more for any other (a job
    cancelled or refused, or resumed: its log starts midway)."""
    states = summary.get("job_states")
    states = states if isinstance(states, dict) else {}
    resumed = summary.get("resumed_from") or {}
    train = events[(events["kind"] == "train") & events["outcome"].isin(DONE_OUTCOMES)]
    logged = train.groupby("job")["step"].nunique()
    for job in workload.jobs:
        have, want = int(logged.get(job.name, 0)), job.rl.steps
        exact = states.get(job.name, "finished") == "finished" and not resumed.get(job.name)
        if have > want or (exact and have != want):
            raise CalibrationError(f"{path / EVENT_LOG_FILE}: job {job.name!r} has {have} "
                                   f"training steps in the log, but {want} in "
                                   f"{WORKLOAD_FILE}; the log is cut short or the folder "
                                   "mixes two runs")  # fmt: skip


def check_turns(path: Path, events: pd.DataFrame, workload: Workload) -> None:
    """CalibrationError unless each job's logged turns fit its shape in the workload: no turn
    past ``rl.turns``, no group of more than ``rl.group_size`` samples, no response longer
    than ``rl.max_new_tokens`` (a workload.json edited after its run replayed with drawn
    lengths for the turns the run never made, without a word); and none short of it: every
    group's first turn holds ``rl.group_size`` samples and every trained step
    ``rl.prompts_per_step`` groups (edited upwards, the replay simulated groups and samples the
    run never made). Later turns may hold fewer samples (episodes end) and responses may end
    before their bound: neither is checked from below."""
    ok = events[(events["kind"] == "generate") & (events["outcome"] == "ok")]
    logged = ok.groupby("job").agg(turn=("turn", "max"), seqs=("seqs", "max"),
                                   tokens=("longest_tokens", "max"))  # fmt: skip
    first = ok[ok["turn"] == 0]
    trained = events[(events["kind"] == "train") & (events["outcome"] == "ok")]
    for job in workload.jobs:
        if job.name not in logged.index:
            continue
        row, rl = logged.loc[job.name], job.rl
        for what, have, most in (("turns", int(row["turn"]) + 1, rl.turns),
                                 ("samples in a group", int(row["seqs"]), rl.group_size),
                                 ("tokens in a response", int(row["tokens"]),
                                  rl.max_new_tokens)):  # fmt: skip
            if have > most:
                _edited(path, job.name, f"has {have} {what} in the log, but at most {most}")
        starts = first[first["job"] == job.name]
        if starts.empty:
            continue
        fewest = int(starts["seqs"].min())
        if fewest < rl.group_size:
            _edited(path, job.name, f"has a group of {fewest} samples in the log, but "
                                    f"group_size {rl.group_size}")  # fmt: skip
        steps = set(trained.loc[trained["job"] == job.name, "step"])
        groups = starts[starts["step"].isin(steps)].groupby("step")["group"].nunique()
        if len(groups) and int(groups.min()) < rl.prompts_per_step:
            _edited(path, job.name, f"has a training step of {int(groups.min())} groups in the "
                                    f"log, but prompts_per_step {rl.prompts_per_step}")  # fmt: skip


def _edited(path: Path, job: str, says: str) -> None:
    """The CalibrationError of :func:`check_turns`: job ``job`` ``says`` ... in workload.json."""
    raise CalibrationError(f"{path / EVENT_LOG_FILE}: job {job!r} {says} in {WORKLOAD_FILE}; "
                           "the folder mixes two runs, or the workload was edited after it "
                           "ran")  # fmt: skip


STAGES = ("generate", "train", "sync", "adapter_load (engine)", "adapter_load (trainer swap)")
"""The stages of work a real run's event log holds: calibrate fits each."""
REPLAYED_STAGES = ("generate", "train", "sync")
"""The stages every run's log holds (loads depend on its schedule): without one, a replay
would simulate work the run did not log."""


def require_stages(
    runs: list[RealRun], stages: tuple[str, ...] = STAGES, command: str = "calibrate"
) -> None:
    """CalibrationError naming the ``stages`` (of :data:`STAGES`) of which the runs' event
    logs have no successful row (``command`` names who asks)."""
    events = pd.concat([r.events for r in runs])
    ok = events[events["outcome"] == "ok"]
    engine_loads, swaps = split_loads(ok)
    present = {
        "generate": (ok["kind"] == "generate").any(),
        "train": (ok["kind"] == "train").any(),
        "sync": (ok["kind"] == "sync").any(),
        "adapter_load (engine)": len(engine_loads) > 0,
        "adapter_load (trainer swap)": len(swaps) > 0,
    }
    missing = [stage for stage in stages if not present[stage]]
    if missing:
        names = ", ".join(str(r.path) for r in runs)
        need = "every stage (add a run that has them)" if command == "calibrate" else (
            "every stage a run logs (is the log cut short or edited?)")  # fmt: skip
        raise CalibrationError(f"{names}: no successful {' / '.join(missing)} rows in the "
                               f"event log(s); {command} needs {need}")  # fmt: skip


def read_engine_steps(path: Path, workload: Workload) -> pd.DataFrame | None:
    """The run's ``engine_steps.csv`` (marlaas.executors.engine_steps), checked: every column,
    numbers that a step can have, engines of the workload's cluster; None without the file."""
    file = path / ENGINE_STEPS_CSV
    if not file.exists():
        return None
    text = read_text(file, "table of engine steps", MAX_TABLE_BYTES)  # size-capped, UTF-8
    try:
        steps = pd.read_csv(io.StringIO(text))
    except ValueError as err:
        raise CalibrationError(f"{file}: not a CSV table ({' '.join(str(err).split())})") from None
    missing = [c for c in STEP_COLUMNS if c not in steps.columns]
    if missing:
        raise CalibrationError(f"{file}: no column {', '.join(missing)} (the file `marlaas "
                               "train` writes has them all)")  # fmt: skip
    if steps.empty:  # calibrate fell back to the generate rows without a word
        raise CalibrationError(f"{file}: no rows (`marlaas train` writes the file only when its "
                               "engines made steps): restore it, or remove it to calibrate "
                               "from the run's generate rows")  # fmt: skip
    for column in STEP_COLUMNS[1:]:
        values = pd.to_numeric(steps[column], errors="coerce")
        bad = ~np.isfinite(values) | (values < 0)  # NaN (not a number) is not finite
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            value = steps[column].iloc[row]
            shown = repr(value) if isinstance(value, str) else str(value)
            raise CalibrationError(f"{file}: row {row + 2}, {column}: {shown} is not a number "
                                   ">= 0")  # fmt: skip
        steps[column] = values
    engines = {e.name for e in Scheduler.for_workload(workload).cluster.engines}
    unknown = sorted(set(steps["engine"].astype(str)) - engines)
    if unknown:
        raise CalibrationError(f"{file}: engine {_names(unknown)} is not one of the run's "
                               f"engines ({_names(sorted(engines))})")  # fmt: skip
    return steps


def check_belongs(path: Path, events: pd.DataFrame, workload: Workload, summary: dict) -> None:
    """The event log, the workload and the summary are of one run: the log has rows, its
    jobs are the workload's with the same tenants, its devices the workload's cluster's, the
    summary's jobs the workload's too."""
    log = path / EVENT_LOG_FILE
    if len(events) == 0:
        raise CalibrationError(f"{log}: the event log has no rows")
    repeats = int(events.duplicated().sum())
    if repeats:
        raise CalibrationError(f"{log}: {repeats} of its {len(events)} rows repeat an earlier "
                               "row exactly; a run logs each piece of work once")  # fmt: skip
    tenants = {j.name: j.tenant for j in workload.jobs}
    pairs = events.loc[events["job"] != "", ["job", "tenant"]].drop_duplicates()
    logged = dict(zip(pairs["job"], pairs["tenant"], strict=True))
    unknown = sorted(set(logged) - set(tenants))
    if unknown:
        raise CalibrationError(f"{path / WORKLOAD_FILE}: has no job {_names(unknown)} of the "
                               f"event log (its jobs: {_names(sorted(tenants))}); the folder "
                               "mixes two runs")  # fmt: skip
    moved = sorted(job for job, tenant in logged.items() if tenants[job] != tenant)
    if moved:
        job = moved[0]
        raise CalibrationError(f"{log}: job {job!r} belongs to tenant {logged[job]!r}, but to "
                               f"{tenants[job]!r} in {WORKLOAD_FILE}; the folder mixes two "
                               "runs")  # fmt: skip
    devices = {d.name for d in Scheduler.for_workload(workload).cluster.devices}  # placed
    placed = events.loc[events["kind"] != "env", "device"]  # environment work runs elsewhere
    strange = sorted(set(placed.unique()) - devices - {""})
    if strange:
        raise CalibrationError(f"{log}: devices {_names(strange)} are not of the cluster in "
                               f"{WORKLOAD_FILE} ({_names(sorted(devices))}); the folder mixes "
                               "two runs")  # fmt: skip
    arrivals = summary.get("arrivals")
    if arrivals is not None and set(arrivals) != set(tenants):
        raise CalibrationError(f"{path / SUMMARY_FILE}: arrivals: jobs "
                               f"{_names(sorted(arrivals))}, but {WORKLOAD_FILE} has "
                               f"{_names(sorted(tenants))}; the folder mixes two runs")  # fmt: skip


def check_cluster(path: Path, events: pd.DataFrame, workload: Workload) -> None:
    """CalibrationError unless every device of the workload's cluster (as placed) has rows
    in the log: the core logs each device's work and idle time over the whole run, so a
    device without any is not of the run (a replay would simulate it)."""
    devices = {d.name for d in Scheduler.for_workload(workload).cluster.devices}
    placed = set(events.loc[events["kind"] != "env", "device"].unique()) - {""}
    silent = sorted(devices - placed)  # a real run logs each: work or idle
    if silent:
        raise CalibrationError(f"{path / WORKLOAD_FILE}: cluster devices {_names(silent)} "
                               f"have no row in {EVENT_LOG_FILE} (its devices: "
                               f"{_names(sorted(placed))}), where every "
                               "device of a run has its work or idle rows; the folder mixes "
                               "two runs")  # fmt: skip


ARRIVAL_SLACK_S = 1e-6
"""How much earlier than its job's arrival a logged piece of work may start [s]: the
float noise of a clock, not a real lead."""


def check_arrivals(path: Path, events: pd.DataFrame, workload: Workload, summary: dict) -> None:
    """Each job arrives when workload.json says (a replay submits it then): at the time the
    summary's ``arrivals`` records (where it does), and, but for a resumed job (its log may
    start midway), no earlier than its first logged work."""
    arrivals = summary.get("arrivals") or {}
    resumed = summary.get("resumed_from") or {}
    for job in workload.jobs:
        recorded = arrivals.get(job.name, job.arrival_s)
        if not (isinstance(recorded, int | float) and float(recorded) == job.arrival_s):
            raise CalibrationError(f"{path / WORKLOAD_FILE}: job {job.name!r} arrives at "
                                   f"{job.arrival_s:g} s, but at {short_repr(recorded)} s in "
                                   f"{SUMMARY_FILE}'s arrivals; the folder mixes two "
                                   "runs")  # fmt: skip
    first = events[events["job"] != ""].groupby("job")["start_s"].min()
    for job in workload.jobs:
        start = first.get(job.name)
        if (
            start is not None
            and not resumed.get(job.name)
            and start < job.arrival_s - ARRIVAL_SLACK_S
        ):
            raise CalibrationError(f"{path / WORKLOAD_FILE}: job {job.name!r} arrives at "
                                   f"{job.arrival_s:g} s, but its work starts at {start:g} s "
                                   f"in {EVENT_LOG_FILE}; the folder mixes two runs")  # fmt: skip


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:MAX_SHOWN])
    return shown + (f" and {len(names) - MAX_SHOWN} more" if len(names) > MAX_SHOWN else "")
