"""A run folder's small files as read back, checked: ``summary.json``, ``rewards.csv``,
``memory.csv``, ``eval.json``, and a sweep folder's ``sweep.csv`` and ``summaries.json`` (the
event log is :mod:`marlaas.eventlog`'s, the workload :mod:`marlaas.workload_file`'s).

Every reader checks what it reads against a schema (pydantic: types, finite numbers, bounds,
name lengths) after a size cap, so a damaged, foreign or hostile file is one
:class:`RunFileError` line naming the file, the row where there are rows, and the field,
never a traceback further on. Fields a reader does not use are kept unchecked. The jobs of
rewards.csv and eval.json are checked against the run's (:func:`check_run_jobs`): a folder
that mixes two runs is refused, as the twin refuses one (marlaas.twin.real_run).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from marlaas import strict_json
from marlaas.core.limits import MAX_JOBS, MAX_SEED, MAX_STEPS
from marlaas.core.validation_message import format_validation_error
from marlaas.eventlog import EVENT_LOG_FILE, MAX_EVENT_TIME_S, MAX_NAME_CHARS, EventLogError
from marlaas.traces.csvrows import first_repeated

SUMMARY_FILE = "summary.json"
EVAL_FILE = "eval.json"
MAX_JSON_BYTES = 64 * 1024 * 1024
"""Largest summary.json or eval.json read [bytes]."""
MAX_TABLE_BYTES = 256 * 1024 * 1024
"""Largest rewards.csv or memory.csv read [bytes]."""


class RunFileError(EventLogError):
    """A run folder's file that is missing, too big, not what it should be, or holds a value
    out of bounds; the message names the file and the field."""


Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
MAX_COUNT = 2**53
"""Largest count a run file may hold (exact as a float; a larger integer cannot be plotted)."""
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Step = Annotated[int, Field(ge=0, le=MAX_STEPS)]
"""A training step's index, or an adapter version."""
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
Clock = Annotated[float, Field(ge=-MAX_EVENT_TIME_S, le=MAX_EVENT_TIME_S, allow_inf_nan=False)]
"""A time on a run's clock [s] (negative: before the run's start, e.g. while models load)."""


class _Checked(BaseModel):
    model_config = ConfigDict(extra="allow")


class SummaryMetrics(_Checked):
    """The metrics a reader of summary.json uses."""

    makespan_s: NonNegative | None = None
    n_jobs: Count | None = None


class HostShareRecord(_Checked):
    """A real run's share of its machine (marlaas.executors.host_share)."""

    cpus: Annotated[int, Field(ge=1)] | None = None
    wall_s: NonNegative | None = None
    run_cpu_s: NonNegative | None = None
    other_cpu_s: NonNegative | None = None
    steal_s: NonNegative | None = None
    others_share: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None


class RunSummary(_Checked):
    """summary.json of a run folder: the keys readers use (reports, calibrate, replay)."""

    kind: Literal["simulation", "real", "replay"] = "simulation"
    workload: Name | None = None
    policy: Name | None = None
    preset: Name | None = None
    seed: Seed | None = None
    variant: Name | None = None
    accelerator: Name | None = None
    backend: Name | None = None
    arrivals: dict[Name, NonNegative] | None = None
    weights: dict[Name, Positive] | None = None
    tenants: dict[Name, Name] | None = None
    resumed_from: dict[Name, Step] | None = None
    host: HostShareRecord | None = None
    engine_yardstick_s_per_token: dict[Name, Positive] | None = None
    engine_yardstick_end_s_per_token: dict[Name, Positive] | None = None
    metrics: SummaryMetrics | None = None


class RewardRow(BaseModel):
    """One row of rewards.csv: a job's training step and its mean reward."""

    job: Name
    tenant: Name = ""
    step: Step
    mean_reward: Finite
    time_s: Clock | None = None


class MemoryRow(BaseModel):
    """One sample of memory.csv [s, MiB]."""

    time_s: Clock
    rss_mb: NonNegative
    peak_rss_mb: NonNegative


class EvalRow(_Checked):
    """One row of eval.json: a job's model (``base`` or ``trained``) on held-out prompts."""

    job: Name
    model: Name
    accuracy: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    mean_reward: Finite | None = None
    tenant: Name | None = None
    env: Name | None = None
    version: Annotated[int, Field(ge=-1, le=MAX_STEPS)] | None = None
    """The adapter version scored (-1: the base model)."""
    prompts: Annotated[int, Field(ge=1, le=MAX_COUNT)] | None = None
    correct: Count | None = None
    ci_low: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    ci_high: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    """The accuracy's 95% Wilson interval."""
    time_s: Clock | None = None
    """When the run made this adapter version [s on the run's clock]; 0 for the base model."""
    outcomes: Annotated[str, Field(pattern="^[01]+$")] | None = None
    """Each held-out problem's outcome in order: ``1`` right, ``0`` wrong."""

    @model_validator(mode="after")
    def _outcomes_counted(self) -> EvalRow:
        if self.outcomes is not None and (
            (self.prompts is not None and len(self.outcomes) != self.prompts)
            or (self.correct is not None and self.outcomes.count("1") != self.correct)
        ):
            raise ValueError(f"outcomes: {len(self.outcomes)} problems, "
                             f"{self.outcomes.count('1')} right, against prompts "
                             f"{self.prompts} and correct {self.correct}")  # fmt: skip
        return self


class SweepRow(_Checked):
    """One row of sweep.csv: a run's identity and the metrics the sweep's report plots (its
    other columns are numbers, see :func:`read_sweep_table`)."""

    workload: Name
    jobs: Annotated[int, Field(ge=1, le=MAX_JOBS)]
    variant: Name
    schedule: Name
    policy: Name
    seed: Seed
    makespan_s: NonNegative
    jct_mean_s: NonNegative
    utilization: NonNegative


# --------------------------------------------------------------------------- reading


def read_text(path: Path, what: str, limit: int = MAX_JSON_BYTES) -> str:
    """The file's text, size-capped, as UTF-8 (RunFileError naming ``what`` it should be)."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise RunFileError(f"{path}: {size:,} bytes; a {what} may have at most {limit:,}")
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise RunFileError(f"{path}: not a readable {what} (not UTF-8 text: "
                           f"{err.reason})") from None  # fmt: skip
    except OSError as err:
        raise RunFileError(f"{path}: not a readable {what} ({err.strerror or err})") from None


def check_distinct(runs: Iterable[str | Path]) -> None:
    """RunFileError when two of ``runs`` (run folders, or event-log files) are one run: the
    same folder by another spelling or through a link, or a folder and its event log."""
    seen: dict[str, str | Path] = {}
    for run in runs:
        key = os.path.realpath(run)  # never raises: a link loop stays a path
        if os.path.isdir(key):
            key = os.path.join(key, EVENT_LOG_FILE)
        if key in seen:
            raise RunFileError(f"{run}: the same run as {seen[key]}, given twice; give each "
                               "run once")  # fmt: skip
        seen[key] = run


def read_json(path: Path, what: str) -> Any:
    """The file's JSON value (RunFileError when it is not JSON, names a key twice or nests
    too deeply)."""
    text = read_text(path, what)
    try:
        return strict_json.loads(text)
    except ValueError as err:
        raise RunFileError(f"{path}: not a readable {what} (not JSON: {err})") from None


def check_summary(data: Any, source: str, require: tuple[str, ...] = ()) -> dict:
    """``data`` when it is a run summary (see :class:`RunSummary`) with the keys ``require``."""
    if not isinstance(data, dict):
        raise RunFileError(f"{source}: expected a JSON object, got {type(data).__name__}")
    try:
        RunSummary.model_validate(data, strict=True)
    except ValidationError as err:
        raise RunFileError(format_validation_error(err, source)) from None
    missing = [key for key in require if data.get(key) is None]
    if missing:
        raise RunFileError(f"{source}: {missing[0]}: missing (a run's summary names it)")
    return data


def read_summary(run_dir: str | Path, require: tuple[str, ...] = ()) -> dict:
    """The checked summary.json of a run folder; {} when it has none (unless ``require``
    names keys it must have)."""
    path = Path(run_dir) / SUMMARY_FILE
    if not path.exists():
        if require:
            raise RunFileError(f"{run_dir}: no {SUMMARY_FILE}; not a run folder")
        return {}
    return check_summary(read_json(path, "JSON summary"), str(path), require)


def read_rewards(path: Path) -> pd.DataFrame:
    """rewards.csv: job, tenant, step, mean_reward, time_s per row (checked)."""
    return _read_rows(path, "rewards table", RewardRow, {"job", "step", "mean_reward"})


def read_memory(path: Path) -> pd.DataFrame:
    """memory.csv: time_s, rss_mb, peak_rss_mb per sample (checked)."""
    return _read_rows(path, "memory timeline", MemoryRow, {"time_s", "rss_mb", "peak_rss_mb"})


def read_evaluation(path: Path) -> pd.DataFrame:
    """eval.json: one checked row per job and model (see :class:`EvalRow`)."""
    data = read_json(path, "evaluation")
    if not isinstance(data, list) or not all(isinstance(row, dict) for row in data):
        raise RunFileError(f"{path}: not a readable evaluation (expected a JSON list of "
                           "objects, one per job and model)")  # fmt: skip
    missing = {"job", "model", "accuracy"} - set().union(*data) if data else set()
    if missing:
        raise RunFileError(f"{path}: missing keys {sorted(missing)}")
    try:
        TypeAdapter(list[EvalRow]).validate_python(data, strict=True)
    except ValidationError as err:
        raise RunFileError(_row_error(err, path, first=0, unit="item")) from None
    return pd.DataFrame(data)


def check_run_jobs(
    rows: pd.DataFrame, path: Path, jobs: dict[str, str], unit: str, first: int
) -> pd.DataFrame:
    """``rows`` of a run's file (rewards.csv, eval.json: row 0 is ``unit`` ``first``) when each
    names one of the run's ``jobs`` (job -> tenant) and, where a row names a tenant, the job's
    tenant; else RunFileError naming the file, the row and the jobs: the folder mixes two runs
    (its rows would be drawn as jobs of this one)."""
    unknown = ~rows["job"].isin(list(jobs))
    if unknown.any():
        at = int(np.flatnonzero(unknown.to_numpy())[0])
        names = sorted(set(rows.loc[unknown, "job"]))
        are = "jobs {} are" if len(names) > 1 else "job {} is"
        raise RunFileError(f"{path}: {unit} {at + first}: {are.format(_listed(names))} not of "
                           f"this run (its jobs: {_listed(sorted(jobs))}); the folder mixes two "
                           "runs")  # fmt: skip
    if "tenant" in rows:
        named = rows["tenant"].fillna("").astype(str).ne("")
        moved = named & rows["tenant"].ne(rows["job"].map(jobs))
        if moved.any():
            at = int(np.flatnonzero(moved.to_numpy())[0])
            job, tenant = rows["job"].iloc[at], rows["tenant"].iloc[at]
            raise RunFileError(f"{path}: {unit} {at + first}: job {_short(job)} of tenant "
                               f"{_short(tenant)}, but of {_short(jobs[job])} in this run; the "
                               "folder mixes two runs")  # fmt: skip
    return rows


def is_evaluation(path: Path) -> bool:
    """Whether ``path`` is an evaluation ``marlaas evaluate`` wrote (a checked eval.json)."""
    try:
        read_evaluation(path)
    except RunFileError:
        return False
    return True


def read_sweep_table(path: Path) -> pd.DataFrame:
    """sweep.csv: the identity and metrics of :class:`SweepRow` checked per row, every other
    column numbers (finite, or empty)."""
    frame = _read_csv(path, "sweep table", set(SweepRow.model_fields))
    typed = _checked_rows(frame, path, SweepRow)
    for column in frame.columns:
        if column not in typed:
            typed[column] = _numbers(frame[column], path, column)
    return typed[list(frame.columns)]


def read_sweep_summaries(path: Path, rows: int) -> list[dict]:
    """summaries.json: one checked run summary per row of sweep.csv (``rows`` of them)."""
    data = read_json(path, "sweep's summaries")
    if not isinstance(data, list):
        raise RunFileError(f"{path}: expected a JSON list of run summaries, got "
                           f"{type(data).__name__}")  # fmt: skip
    if len(data) != rows:
        raise RunFileError(f"{path}: {len(data)} summaries, but {rows} rows in sweep.csv")
    return [check_summary(s, f"{path}: item {i}") for i, s in enumerate(data)]


def _read_csv(path: Path, what: str, required: set[str]) -> pd.DataFrame:
    """The CSV file as text cells ("" where empty), with the ``required`` columns."""
    text = read_text(path, what, MAX_TABLE_BYTES)
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (ValueError, pd.errors.ParserError) as err:
        reason = " ".join(str(err).split())
        raise RunFileError(f"{path}: not a readable {what} ({reason})") from None
    try:
        repeated = first_repeated(next(csv.reader(io.StringIO(text)), []))
    except csv.Error as err:  # a header cell past the csv module's field size
        raise RunFileError(f"{path}: not a readable {what} (header: {err})") from None
    if repeated is not None:  # pandas would read it as two columns, the second renamed
        raise RunFileError(f"{path}: the header names column {_short(repeated)} more than once")
    missing = required - set(frame.columns)
    if missing:
        raise RunFileError(f"{path}: missing columns {sorted(missing)}")
    return frame


def _checked_rows(frame: pd.DataFrame, path: Path, row: type[BaseModel]) -> pd.DataFrame:
    """The columns of ``row``'s fields, each cell checked and converted to its field's type."""
    fields = [c for c in row.model_fields if c in frame.columns]
    records = frame[fields].replace("", None).to_dict("records")
    try:
        rows = TypeAdapter(list[row]).validate_python(records)
    except ValidationError as err:
        raise RunFileError(_row_error(err, path, first=2, unit="line")) from None
    dumped = [r.model_dump(include=set(fields)) for r in rows]
    return pd.DataFrame(dumped, columns=fields, index=frame.index)


def _numbers(cells: pd.Series, path: Path, column: str) -> pd.Series:
    """A column of text cells as floats (empty: NaN); anything else, or an infinite number,
    is an error naming the line."""
    values = pd.to_numeric(cells.replace("", None), errors="coerce").astype(float)
    bad = (values.isna() & cells.ne("")) | values.isin([np.inf, -np.inf])
    if bad.any():
        line = int(np.flatnonzero(bad.to_numpy())[0])
        raise RunFileError(f"{path}: line {line + 2}: {column}: not a finite number (got "
                           f"{_short(cells.iloc[line])})")  # fmt: skip
    return values


def _read_rows(path: Path, what: str, row: type[BaseModel], required: set[str]) -> pd.DataFrame:
    return _checked_rows(_read_csv(path, what, required), path, row)


def _row_error(err: ValidationError, path: Path, first: int, unit: str) -> str:
    """One line for the first problem of a list of rows: the file, the row (line ``first``
    for the first row), the field, what is wrong and the value."""
    problem = err.errors()[0]
    index, *where = problem["loc"]
    field = ".".join(str(w) for w in where) or "row"
    value = problem.get("input")
    got = "" if isinstance(value, dict | list) else f" (got {_short(value)})"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    message = problem["msg"].removeprefix("Value error, ")
    return f"{path}: {unit} {int(index) + first}: {field}: {message}{got}{more}"


def _listed(names: list[str], shown: int = 3) -> str:
    """The first ``shown`` names quoted, then how many more."""
    text = ", ".join(_short(n) for n in names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
