"""Run folders: the event log and a summary, written all at once or not at all.

A run folder holds ``events.parquet`` (see marlaas.eventlog), ``summary.json`` (the
workload's name, the policy, the seed, the mechanism settings, job arrivals and weights, and
the headline metrics) and ``workload.json`` (the whole workload as run, which ``marlaas
replay`` simulates again). It is built in a temporary sibling folder and renamed into place, so
an interrupted or failed run never leaves a half-written ``--out``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from marlaas import metrics
from marlaas.core.workload import Workload
from marlaas.eventlog import EVENT_LOG_FILE, write_event_log

SUMMARY_FILE = "summary.json"
WORKLOAD_FILE = "workload.json"


@contextmanager
def staged_folder(out: str | Path, marker: str) -> Iterator[Path]:
    """Yield an empty temporary sibling of ``out``; when the block succeeds it replaces
    ``out`` whole, when it fails it is removed and ``out`` is left as it was.

    An existing ``out`` is replaced only when it is empty or holds ``marker`` (a file that
    this kind of output writes), so a mistyped ``--out`` never deletes someone's folder."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out}: exists and is not a folder")
    if out.exists() and any(out.iterdir()) and not (out / marker).exists():
        raise FileExistsError(
            f"{out}: folder exists and has no {marker}; not replacing it (choose another --out)"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield staging
        staging.chmod(0o755)
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            out.rename(old)
            try:
                staging.rename(out)
            except BaseException:
                old.rename(out)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_run(
    out: str | Path, events: pd.DataFrame, summary: dict, workload: Workload | None = None
) -> Path:
    """Write a run folder at ``out`` atomically, replacing an earlier run there."""
    with staged_folder(out, SUMMARY_FILE) as staging:
        write_event_log(events, staging / EVENT_LOG_FILE)
        (staging / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, default=json_default))
        if workload is not None:
            (staging / WORKLOAD_FILE).write_text(workload.model_dump_json(indent=1))
    return Path(out)


def run_summary(workload: Workload, result, events: pd.DataFrame, kind: str, **extra) -> dict:
    """The summary.json content of a run (``kind``: simulation or real): who ran what under
    which settings, and the metrics of its event log. ``result`` is a
    :class:`marlaas.drive.RunResult`; ``extra`` adds kind-specific keys."""
    arrivals = {j.name: j.arrival_s for j in workload.jobs}
    weights = {j.tenant: j.weight for j in workload.jobs}
    return {
        "kind": kind,
        "workload": workload.name,
        "policy": result.policy,
        "preset": result.settings.get("preset"),
        "seed": result.seed,
        "settings": result.settings,
        "arrivals": arrivals,
        "weights": weights,
        "tenants": {j.name: j.tenant for j in workload.jobs},
        "job_finish_s": result.job_finish_s,
        "wall_s": result.wall_s,
        "events": result.events,
        "failures": result.failures,
        **extra,
        "metrics": metrics.summarize(events, arrivals, weights),
    }


def read_summary(run_dir: str | Path) -> dict:
    """The summary of a run folder ({} when it has none)."""
    path = Path(run_dir) / SUMMARY_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def json_default(value):
    """json.dumps ``default`` for numpy scalars."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {value!r}")
