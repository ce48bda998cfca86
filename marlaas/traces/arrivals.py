"""Job-arrival traces: when each job is submitted and how big it is.

An arrivals CSV, in the spirit of the Philly and Helios cluster traces (one row per job)::

    job,tenant,submit_s,size        # job and size optional; submit_time instead of submit_s
    math-01,t01,0,20
    code-02,t02,35.5,10

- ``tenant``: the submitting tenant (Philly: virtual cluster / user; Helios: user).
- ``submit_s``: submission time [s] after the run's start; or ``submit_time``, an ISO 8601
  timestamp (Philly/Helios style), taken relative to the earliest row.
- ``size`` (optional): the job's length in training steps (``rl.steps``).
- ``job`` (optional): the workload job the row belongs to.

A workload takes them with a top-level section (see
:class:`marlaas.core.arrivals_spec.ArrivalsSpec`)::

    arrivals: {path: arrivals.csv, match: tenant, time_scale: 1.0}

``match: job`` gives each row to the job it names; ``match: tenant`` gives the k-th row of a
tenant (file order) to the k-th job of that tenant (workload order). Jobs without a row keep
their own ``arrival_s`` and ``rl.steps``. A row naming an unknown job or tenant, a job named
twice, or more rows for a tenant than it has jobs is an error with the row's line number.

A request trace (``format: azure``, ``burstgpt``, ``mooncake`` or ``csv``, see
:mod:`marlaas.traces.formats`) gives arrivals too: the k-th job (workload order) arrives at the
k-th request's time, relative to the earliest of the first N requests (N jobs), times
``time_scale``: the load of a live service, with its bursts, as a stream of tenants' jobs::

    arrivals: {path: azure/AzureLLMInferenceTrace_conv.csv, format: azure, time_scale: 100}
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from marlaas.core.limits import MAX_ARRIVAL_S, MAX_STEPS
from marlaas.core.validation_message import closest
from marlaas.traces.csvrows import count, number, read_rows
from marlaas.traces.errors import TraceError
from marlaas.traces.formats import get_format, read_requests

MAX_TIMESTAMP_S = 1e11
"""Latest request time a request trace may hold [s]: its times may be Unix timestamps
(seconds, or milliseconds for Mooncake; about 1.7e9 s in 2024), only their distance from the
earliest request is bounded by MAX_ARRIVAL_S."""


@dataclass(frozen=True)
class Arrival:
    """One row of an arrivals CSV."""

    line: int
    """Line number in the file (1-based, header included)."""
    tenant: str
    submit_s: float
    """Submission time [s] after the earliest row / the run's start."""
    job: str | None = None
    size: int | None = None
    """Training steps (rl.steps); None keeps the workload's."""


KNOWN_COLUMNS = ("job", "tenant", "submit_s", "submit_time", "size")
"""The columns an arrivals file's rows are read from; others are the trace's own, and ignored."""


def _check_misspelt_size(path: str | Path, rows: list[tuple[int, dict[str, str]]]) -> None:
    """TraceError for a column that is a likely misspelling of ``size`` in a header without
    one (``sizee``, ``Size``) and holds step counts: read as one of the trace's own, it was
    ignored, and every job kept its own rl.steps. A column of other values (``site: eu-1``,
    ``side: left``) is the trace's own. A misspelt ``job`` needs no check: ``match: job`` then
    finds no job column, and ``match: tenant`` reads none."""
    header = list(rows[0][1])
    if "size" in header:
        return
    for column in header:
        if column in KNOWN_COLUMNS or closest(column, ["size"]) is None:
            continue
        values = [row[column] for _, row in rows if row[column]]
        if values and all(_is_count(value) for value in values):
            raise TraceError(path, f"column {column!r} is not one an arrivals file has; did "
                             "you mean 'size'? (its columns: "
                             f"{', '.join(KNOWN_COLUMNS)}; others are ignored)", 1)  # fmt: skip


def _is_count(text: str) -> bool:
    """Whether ``text`` reads as a ``size`` (a count of training steps)."""
    try:
        count("", 0, "size", text, high=MAX_STEPS)
    except TraceError:
        return False
    return True


def load_arrivals(path: str | Path) -> list[Arrival]:
    """Read an arrivals CSV into rows, in file order; bad rows raise :class:`TraceError`."""
    rows = list(read_rows(path, ("tenant",)))
    if rows:
        _check_misspelt_size(path, rows)
    stamps: list[float] = []
    out: list[Arrival] = []
    for line, row in rows:
        if "submit_s" in row and "submit_time" in row:
            raise TraceError(path, "has both submit_s and submit_time: keep one", line)
        if "submit_s" in row:
            submit = number(path, line, "submit_s", row["submit_s"])
        elif "submit_time" in row:
            submit = datetime_s(path, line, "submit_time", row["submit_time"])
        else:
            raise TraceError(path, "needs a submit_s [s] or a submit_time column", line)
        if not row["tenant"]:
            raise TraceError(path, "tenant: must not be empty", line)
        size = row.get("size", "")
        steps = count(path, line, "size", size, high=MAX_STEPS) if size else None
        if steps == 0:
            raise TraceError(path, "size: a job needs at least 1 training step", line)
        stamps.append(submit)
        out.append(Arrival(line, row["tenant"], submit, row.get("job") or None, steps))
    if not out:
        raise TraceError(path, "no rows")
    if "submit_s" not in rows[0][1]:
        first = min(stamps)
        out = [Arrival(a.line, a.tenant, a.submit_s - first, a.job, a.size) for a in out]
        late = next((a for a in out if a.submit_s > MAX_ARRIVAL_S), None)
        if late is not None:
            raise TraceError(path, f"submit_time: {late.submit_s:g} s after the first row; "
                             f"at most {MAX_ARRIVAL_S:g} s", late.line)  # fmt: skip
    return out


def load_request_times(path: str | Path, format: str, n: int) -> list[tuple[int, float]]:
    """``(line, arrival time [s])`` of the first ``n`` requests of a request trace, each
    relative to the earliest of them (BurstGPT's failed requests count: they arrived)."""
    fmt = get_format(path, format)
    stamps: list[tuple[int, float]] = []
    for line, row in read_requests(path, fmt, (fmt.time,)):
        if len(stamps) == n:
            break
        text = row[fmt.time]
        if fmt.time_unit == "datetime":
            stamp = datetime_s(path, line, fmt.time, text)
        elif fmt.time_unit == "ms":
            stamp = number(path, line, fmt.time, text, high=MAX_TIMESTAMP_S * 1e3) / 1e3
        else:
            stamp = number(path, line, fmt.time, text, high=MAX_TIMESTAMP_S)
        stamps.append((line, stamp))
    if len(stamps) < n:
        raise TraceError(path, f"{len(stamps)} request(s); the workload has {n} jobs, and each "
                         f"job arrives at one request's {fmt.time}")  # fmt: skip
    first = min((s for _, s in stamps), default=0.0)
    times = [(line, round(stamp - first, 6)) for line, stamp in stamps]  # to the microsecond
    late = next(((line, t) for line, t in times if t > MAX_ARRIVAL_S), None)
    if late is not None:
        raise TraceError(path, f"{fmt.time}: {late[1]:g} s after the earliest request; at most "
                         f"{MAX_ARRIVAL_S:g} s", late[0])  # fmt: skip
    return times


_FRACTION = re.compile(r"(\.\d{6})\d+")
"""More than 6 digits of a second (Azure's traces have 7): Python reads at most 6."""


def datetime_s(path: str | Path, line: int, column: str, text: str) -> float:
    """An ISO 8601 date and time as seconds since 1970 (UTC when it has no offset)."""
    try:
        when = datetime.fromisoformat(_FRACTION.sub(r"\1", text.strip().replace("Z", "+00:00")))
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return when.timestamp()
    except (ValueError, OverflowError, OSError):
        raise TraceError(
            path, f"{column}: {text[:40]!r} is not an ISO 8601 date and time", line
        ) from None


def assign(
    rows: list[Arrival], jobs: list[dict], match: str, path: str | Path
) -> dict[int, Arrival]:
    """Which row each job takes: ``{job index: row}`` (see the module docstring)."""
    out: dict[int, Arrival] = {}
    if match == "job":
        index = {j.get("name"): i for i, j in enumerate(jobs)}
        for row in rows:
            if row.job is None:
                raise TraceError(path, "match: job needs a 'job' column with a value", row.line)
            if row.job not in index:
                raise TraceError(path, f"job {row.job!r} is not in the workload", row.line)
            if index[row.job] in out:
                raise TraceError(path, f"job {row.job!r} appears twice", row.line)
            owner = jobs[index[row.job]].get("tenant")
            if row.tenant != owner:
                raise TraceError(path, f"job {row.job!r} is tenant {owner!r}'s in the workload, "
                                 f"not {row.tenant!r}'s", row.line)  # fmt: skip
            out[index[row.job]] = row
        return out
    by_tenant: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        by_tenant.setdefault(job.get("tenant"), []).append(i)
    used: dict[str, int] = {}
    for row in rows:
        if row.tenant not in by_tenant:
            raise TraceError(path, f"tenant {row.tenant!r} has no job in the workload", row.line)
        k = used.get(row.tenant, 0)
        if k >= len(by_tenant[row.tenant]):
            raise TraceError(
                path,
                f"tenant {row.tenant!r} has {len(by_tenant[row.tenant])} job(s) in the "
                f"workload but more rows here",
                row.line,
            )
        used[row.tenant] = k + 1
        out[by_tenant[row.tenant][k]] = row
    return out


def scaled(t: float, time_scale: float, path: str | Path, line: int) -> float:
    """A file's time ``t`` [s] times ``time_scale``: a job's arrival, or a TraceError naming
    the file and line when it is later than a job may arrive (the workload's bound on
    ``arrival_s``, which the user did not write: the file and the scale did)."""
    arrival = t * time_scale
    if arrival > MAX_ARRIVAL_S:
        raise TraceError(path, f"{t:g} s x time_scale {time_scale:g} is later than "
                         f"{MAX_ARRIVAL_S:g} s", line)  # fmt: skip
    return arrival


def apply_arrivals(data: dict[str, Any], base_dir: str | Path | None) -> dict[str, Any]:
    """A copy of raw workload data with its ``arrivals`` section applied to its jobs.

    Called by the workload schema before validation. The section's path is resolved against
    ``base_dir`` (the workload file's folder) and stored absolute, so applying it again (after
    ``--set`` overrides) gives the same jobs. A section that does not validate is left alone
    for the schema to report.
    """
    from pydantic import BaseModel, ValidationError

    from marlaas.core.arrivals_spec import ArrivalsSpec

    try:
        spec = ArrivalsSpec.model_validate(data["arrivals"])
    except ValidationError:
        return data
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        return data
    path = Path(spec.path)
    if not path.is_absolute():
        path = Path(base_dir or Path.cwd()) / path
    jobs = [j.model_dump() if isinstance(j, BaseModel) else copy.deepcopy(j) for j in jobs]
    if not all(isinstance(j, dict) for j in jobs):
        return data
    if spec.format == "jobs":
        for i, row in assign(load_arrivals(path), jobs, spec.match, path).items():
            jobs[i]["arrival_s"] = scaled(row.submit_s, spec.time_scale, path, row.line)
            if row.size is not None:
                rl = jobs[i].get("rl") or {}
                rl = rl.model_dump() if isinstance(rl, BaseModel) else dict(rl)
                jobs[i]["rl"] = {**rl, "steps": row.size}
    else:  # a request trace: the k-th job arrives at the k-th request
        for i, (line, t) in enumerate(load_request_times(path, spec.format, len(jobs))):
            jobs[i]["arrival_s"] = scaled(t, spec.time_scale, path, line)
    arrivals = {**spec.model_dump(), "path": str(path.resolve())}
    return {**data, "jobs": jobs, "arrivals": arrivals}
