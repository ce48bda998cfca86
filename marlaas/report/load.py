"""Loading run folders for reports: the event log, its metadata, a real run's rewards and
evaluation, and clear errors."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa

from marlaas.eventlog import EVENT_LOG_FILE, EventLogError, read_event_log
from marlaas.executors.outputs import MEMORY_CSV, REWARDS_CSV
from marlaas.report.labels import kind_name, run_labels, unique_slugs
from marlaas.report.labels import slug as _slug
from marlaas.run_files import (
    EVAL_FILE,
    check_run_jobs,
    read_evaluation,
    read_memory,
    read_rewards,
    read_summary,
)

DEMO_RUNS = ("runs/sequential", "runs/fair")
"""The run folders that ``make demo`` writes."""


@dataclass(frozen=True)
class Run:
    """One run as a report sees it."""

    label: str
    """Unique name of the run in its report (see :func:`marlaas.report.labels.run_label`)."""
    path: Path
    """The run folder (or the Parquet file when given directly)."""
    events: pd.DataFrame = field(repr=False)
    """The event log (see marlaas.eventlog)."""
    meta: dict = field(default_factory=dict)
    """summary.json as written by the run (workload, policy, seed, ...); {} when absent."""
    key: str = ""
    """The run's slug, unique in its report ("": the label's, see :attr:`slug`)."""

    @property
    def arrivals(self) -> dict[str, float] | None:
        """Job arrival times [s] from summary.json, or None."""
        return self.meta.get("arrivals")

    @property
    def weights(self) -> dict[str, float] | None:
        """Tenant weights from summary.json, or None."""
        return self.meta.get("weights")

    @property
    def shared_processor(self) -> bool:
        """Whether the run's devices shared one processor (cluster.shared_compute): its
        summary then measures utilization as that processor's busy time."""
        return "processor_utilization" in self.meta.get("metrics", {})

    @property
    def slug(self) -> str:
        """The label as letters, digits, - and _ (for section ids and file names), unique
        among the runs of one report (:func:`marlaas.report.labels.unique_slugs`)."""
        return self.key or _slug(self.label)

    @property
    def kind(self) -> str:
        """Human name of the run's kind: simulation, real run or replay."""
        return kind_name(self.meta)

    @property
    def title(self) -> str:
        """Human-readable name: the label, then the kind, workload and seed when known (those
        the label does not say already)."""
        parts = [self.kind]
        parts += [f"{k} {self.meta[k]}" for k in ("workload", "seed") if k in self.meta]
        parts = [p for p in parts if p not in self.label]
        return f"{self.label} ({', '.join(parts)})" if parts else self.label

    @property
    def folder(self) -> Path:
        """The run folder (the Parquet file's folder when a file was given)."""
        return self.path if self.path.is_dir() else self.path.parent

    @property
    def jobs(self) -> dict[str, str]:
        """The run's jobs and their tenants: its event log's, and its summary's (which has
        the jobs that never ran too)."""
        pairs = self.events.loc[self.events["job"] != "", ["job", "tenant"]].drop_duplicates()
        logged = dict(zip(pairs["job"], pairs["tenant"], strict=True))
        return {**logged, **(self.meta.get("tenants") or {})}

    def rewards(self) -> pd.DataFrame | None:
        """``rewards.csv`` of a real run (job, tenant, step, mean_reward, time_s), else None;
        RunFileError when a row names a job this run does not have, or another tenant."""
        path = self.folder / REWARDS_CSV
        if not path.exists():
            return None
        return check_run_jobs(read_rewards(path), path, self.jobs, "line", first=2)

    def memory(self) -> pd.DataFrame | None:
        """``memory.csv`` of a real run (time_s, rss_mb, peak_rss_mb), else None."""
        path = self.folder / MEMORY_CSV
        return read_memory(path) if path.exists() else None

    def evaluation(self) -> pd.DataFrame | None:
        """``eval.json`` of a real run (one row per job and model: accuracy, mean_reward),
        else None; RunFileError when a row names a job this run does not have, or another tenant."""
        path = self.folder / EVAL_FILE
        if not path.exists():
            return None
        return check_run_jobs(read_evaluation(path), path, self.jobs, "item", first=0)


def validate_events(df: pd.DataFrame, source: str | Path) -> None:
    """Raise EventLogError when the frame has no rows to report (read_event_log has checked
    its values)."""
    if len(df) == 0:
        raise EventLogError(f"{source}: the event log has no rows")


def _read_meta(run_path: Path) -> dict:
    return read_summary(run_path) if run_path.is_dir() else {}


def load_run(path: str | Path, label: str | None = None, key: str = "") -> Run:
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
    meta = _read_meta(path)
    return Run(label=label or run_labels([meta], [_folder_name(path)])[0], path=path,
               events=events, meta=meta, key=key)  # fmt: skip


def _folder_name(path: Path) -> str:
    return path.name if path.is_dir() else path.parent.name or path.stem


def load_runs(paths: list[str | Path]) -> list[Run]:
    """Load several runs and name them together (:func:`marlaas.report.labels.run_labels`:
    preset or policy, plus what tells runs of one name apart; the folder name without a
    summary)."""
    loaded = [load_run(p) for p in paths]
    labels = run_labels([r.meta for r in loaded], [_folder_name(r.path) for r in loaded])
    keys = unique_slugs(labels)
    return [
        Run(label=label, path=r.path, events=r.events, meta=r.meta, key=key)
        for label, key, r in zip(labels, keys, loaded, strict=True)
    ]


def locate_runs(*paths: str | Path) -> list[Path]:
    """The run folders ``paths``, each as given or, when relative and not found there, in the
    parent folders of the working directory (so ``runs/fair`` works from ``notebooks/``).

    Raises FileNotFoundError naming what is missing and how to make it (``make demo``).
    """
    found, missing = [], []
    for path in map(Path, paths):
        candidates = [path]
        if not path.is_absolute():
            candidates += [parent / path for parent in Path.cwd().resolve().parents]
        hit = next((c for c in candidates if (c / EVENT_LOG_FILE).is_file()), None)
        (found if hit else missing).append(hit or path)
    if missing:
        names = ", ".join(str(m) for m in missing)
        raise FileNotFoundError(
            f"no run folder {names} (looked from {os.getcwd()} upwards). Run `make demo` to "
            f"write {' and '.join(DEMO_RUNS)}, or point MARLAAS_RUN_A / MARLAAS_RUN_B at two "
            "run folders."
        )
    return found
