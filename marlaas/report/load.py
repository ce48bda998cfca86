"""Loading run folders for reports: the event log, its metadata, and clear errors."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from marlaas.eventlog import EVENT_LOG_FILE, KINDS, EventLogError, read_event_log

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class Run:
    """One run as a report sees it."""

    label: str
    """Short unique name, used in section ids and file names (letters, digits, - and _)."""
    path: Path
    """The run folder (or the Parquet file when given directly)."""
    events: pd.DataFrame = field(repr=False)
    """The event log (see marlaas.eventlog)."""
    meta: dict = field(default_factory=dict)
    """summary.json as written by the run (workload, policy, seed, ...); {} when absent."""

    @property
    def arrivals(self) -> dict[str, float] | None:
        """Job arrival times [s] from summary.json, or None."""
        return self.meta.get("arrivals")

    @property
    def weights(self) -> dict[str, float] | None:
        """Tenant weights from summary.json, or None."""
        return self.meta.get("weights")

    @property
    def title(self) -> str:
        """Human-readable name: the label plus workload, policy and seed when known."""
        parts = [f"{k} {self.meta[k]}" for k in ("workload", "policy", "seed") if k in self.meta]
        return f"{self.label} ({', '.join(parts)})" if parts else self.label


def validate_events(df: pd.DataFrame, source: str | Path) -> None:
    """Raise EventLogError when the frame is not a usable event log (no rows, bad values)."""
    if len(df) == 0:
        raise EventLogError(f"{source}: the event log has no rows")
    unknown = sorted(set(df["kind"].astype(object).unique()) - set(KINDS))
    if unknown:
        raise EventLogError(f"{source}: unknown kinds {unknown[:5]} (expected one of {KINDS})")
    start, end = df["start_s"].to_numpy(float), df["end_s"].to_numpy(float)
    if not (np.isfinite(start).all() and np.isfinite(end).all()):
        raise EventLogError(f"{source}: start_s/end_s contain NaN or infinite times")
    bad = np.flatnonzero(end < start)
    if len(bad):
        raise EventLogError(f"{source}: {len(bad)} row(s) end before they start (row {bad[0]})")


def _read_meta(run_path: Path) -> dict:
    summary = run_path / SUMMARY_FILE if run_path.is_dir() else None
    if summary is None or not summary.exists():
        return {}
    try:
        meta = json.loads(summary.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise EventLogError(f"{summary}: not a readable JSON summary ({err})") from err
    if not isinstance(meta, dict):
        raise EventLogError(f"{summary}: expected a JSON object, got {type(meta).__name__}")
    for key in ("arrivals", "weights"):
        value = meta.get(key)
        if value is not None and not (
            isinstance(value, dict)
            and all(isinstance(v, (int, float)) and math.isfinite(v) for v in value.values())
        ):
            raise EventLogError(f"{summary}: '{key}' must map names to numbers")
    return meta


def load_run(path: str | Path, label: str | None = None) -> Run:
    """Load a run folder (``events.parquet`` + optional ``summary.json``) or a Parquet file.

    Raises EventLogError, naming the file, when it is missing, empty, truncated or foreign.
    """
    path = Path(path)
    try:
        events = read_event_log(path)
    except EventLogError:
        raise
    except (pa.ArrowException, OSError, ValueError) as err:
        raise EventLogError(f"{path}: not a readable event log ({err})") from err
    source = path / EVENT_LOG_FILE if path.is_dir() else path
    validate_events(events, source)
    name = path.name if path.is_dir() else path.parent.name or path.stem
    return Run(label=label or slug(name), path=path, events=events, meta=_read_meta(path))


def slug(text: str) -> str:
    """``text`` reduced to letters, digits, - and _ (for ids and file names)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "run"


def load_runs(paths: list[str | Path]) -> list[Run]:
    """Load several runs, giving them unique labels (folder names, suffixed when repeated)."""
    runs, seen = [], set()
    for p in paths:
        run = load_run(p)
        label, i = run.label, 2
        while label in seen:
            label, i = f"{run.label}-{i}", i + 1
        seen.add(label)
        runs.append(Run(label=label, path=run.path, events=run.events, meta=run.meta))
    return runs
