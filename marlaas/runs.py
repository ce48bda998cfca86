"""Run folders: the event log and a summary, written all at once or not at all.

A run folder holds ``events.parquet`` (see marlaas.eventlog), ``summary.json`` (the
workload's name, the policy, the seed, the mechanism settings, job arrivals and weights, and
the headline metrics), ``workload.json`` (the whole workload as run, which ``marlaas replay``
simulates again) and ``manifest.json`` (see :mod:`marlaas.out_folder`: it is built in a
staging folder beside ``--out`` and swapped into place, so an interrupted or failed run
never leaves a half-written ``--out``, and only a run folder is ever replaced by a run).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from marlaas.atomic import write_durably
from marlaas.core.workload import Workload
from marlaas.eventlog import EVENT_LOG_FILE, write_event_log
from marlaas.metrics.deadlines import missed_deadlines
from marlaas.metrics.jobs import job_table
from marlaas.metrics.summary import summarize
from marlaas.out_folder import claim

SUMMARY_FILE = "summary.json"
WORKLOAD_FILE = "workload.json"
SIMULATION = "simulation"


def write_run(
    out: str | Path, events: pd.DataFrame, summary: dict, workload: Workload | None = None
) -> Path:
    """Write a simulation's (or replay's) run folder at ``out`` whole (see
    :mod:`marlaas.out_folder`), replacing an earlier one of its kind; any other folder is
    refused."""
    with claim(out, summary.get("kind", SIMULATION)) as target, target.staged() as staging:
        write_run_files(staging, events, summary, workload)
    return Path(out)


def write_run_files(
    folder: Path, events: pd.DataFrame, summary: dict, workload: Workload | None = None
) -> Path:
    """Write ``events.parquet``, ``summary.json`` and ``workload.json`` into ``folder``
    (created; no manifest: the caller's staging adds it, or the folder is part of a bigger
    output)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_event_log(events, folder / EVENT_LOG_FILE)
    write_durably(folder / SUMMARY_FILE, summary_json(summary))  # a failed write names its file
    if workload is not None:
        write_durably(folder / WORKLOAD_FILE, workload.model_dump_json(indent=1))
    return folder


def summary_json(summary: dict) -> str:
    """summary.json text (numpy scalars as plain numbers)."""
    return json.dumps(summary, indent=2, default=json_default)


def run_summary(
    workload: Workload,
    result,
    events: pd.DataFrame,
    kind: str,
    alone_s: Mapping[str, float | None] | None = None,
    **extra,
) -> dict:
    """The summary.json content of a run (``kind``: simulation or real): who ran what under
    which settings, how each job ended (``job_states``: finished, cancelled, refused; the
    reasons of refusals), the jobs' deadlines after their arrivals (``deadlines_s``) and those
    missed (``missed_deadlines``: late or unfinished), and the metrics of its event log (a
    cancelled job has no completion time). ``result`` is a :class:`marlaas.drive.RunResult`;
    ``alone_s`` ({job: completion time alone [s]}, marlaas.sim.alone) is recorded and gives
    the slowdowns (None: a run without them); ``extra`` adds kind-specific keys."""
    arrivals = {j.name: j.arrival_s for j in workload.jobs}
    tenants = {j.name: j.tenant for j in workload.jobs}
    weights = {j.tenant: j.weight for j in workload.jobs}
    outcomes = getattr(result, "jobs", {})  # jobs of this run (of its last part, when real)
    for name, outcome in outcomes.items():  # jobs that came from elsewhere than the file
        arrivals.setdefault(name, outcome.arrival_s)
        tenants.setdefault(name, outcome.tenant)
    states = {name: outcome.state for name, outcome in outcomes.items()}
    unfinished = [name for name, state in states.items() if state != "finished"]
    deadlines = workload.deadlines_s()
    jobs = job_table(events, arrivals, unfinished) if deadlines else None
    return {
        "kind": kind,
        "workload": workload.name,
        "policy": result.policy,
        "preset": result.settings.get("preset"),
        "seed": result.seed,
        "settings": result.settings,
        "arrivals": arrivals,
        "weights": weights,
        "tenants": tenants,
        "job_states": states,
        "refused": {n: o.reason for n, o in outcomes.items() if o.state == "refused"},
        "job_finish_s": result.job_finish_s,
        "wall_s": result.wall_s,
        "events": result.events,
        "failures": result.failures,
        "deadlines_s": deadlines,
        "alone_s": alone_s,
        "missed_deadlines": missed_deadlines(jobs, deadlines) if deadlines else [],
        **extra,
        "metrics": summarize(
            events,
            arrivals,
            weights,
            unfinished,
            deadlines=deadlines,
            shared_processor=workload.cluster.shared_processor,
            alone_s=alone_s,
        ),
    }


def json_default(value):
    """json.dumps ``default`` for numpy scalars."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {value!r}")
