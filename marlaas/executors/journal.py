"""The journal of a real run: what has happened, appended as it happens, durable per step.

``OUT/journal.jsonl`` holds one JSON object per line:

    {"part": 0, "start": {"offset_s": 0.0, "versions": {"emit-a": 0}, "workload": {...}}}
                                    a part starts (at these versions, for this workload's
                                    jobs: marlaas.executors.resume.identity)
    {"part": 0, "record": {...}}    a work record (event-log row), times and versions absolute
    {"part": 0, "step": {...}}      a training step is durable: its reward point, plus
                                    the part's clock and counters (wall_s, batches, failures)

A step counts as done once its ``step`` line is on disk (fsynced): by then its adapter
version and optimizer state are in the adapter store (the Sync wrote them), and its records
and reward point are in the lines before it. ``marlaas train --resume`` reads the journal
back (:func:`read_journal`): each job continues after its last durable step, a new part's
times continue where the journal ends, and :mod:`marlaas.executors.history` renders every
part as one event log and one reward curve. A last line cut short by a kill is ignored.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

from marlaas import strict_json
from marlaas.core.limits import MAX_STEPS
from marlaas.core.records import WorkRecord
from marlaas.core.validation_message import format_validation_error
from marlaas.eventlog import MAX_EVENT_TIME_S, EventLogError, check_event_log, records_to_frame
from marlaas.executors.episode_runner import RewardPoint
from marlaas.output.errors import OutputError, WriteError, reason
from marlaas.output.manifest import MANIFEST_FILE, read_manifest

JOURNAL_FILE = "journal.jsonl"
MAX_PARTS = 100_000
"""Most parts a journal may name (the first run, then one per --resume)."""


class JournalError(OutputError):
    """A journal that cannot be read back (damaged before its last line)."""


@dataclass
class Journaled:
    """What a journal holds, part by part."""

    parts: int = 0
    """Parts (the first run, then one per --resume) that started."""
    records: list[tuple[int, WorkRecord]] = field(default_factory=list)
    """(part, record) in the order written."""
    steps: list[tuple[int, RewardPoint]] = field(default_factory=list)
    """(part, reward point) of every durable step."""
    counters: dict[int, dict[str, float]] = field(default_factory=dict)
    """Per part, its last counters: wall_s [s], batches, failures."""
    workload: dict | None = None
    """The first part's workload identity (None: a journal from before it was written)."""

    starts: dict[str, int] = field(default_factory=dict)
    """Each job's newest version a part started at (its last durable one then)."""

    @property
    def versions(self) -> dict[str, int]:
        """Each job's newest durable adapter version (steps done): the newest its steps made
        durable, or a part started at (a journal cut to a part's start line, or a run from
        before journals continued, has its versions only there)."""
        done: dict[str, int] = dict(self.starts)
        for _, point in self.steps:
            done[point.job] = max(done.get(point.job, 0), point.step + 1)
        return done

    @property
    def end_s(self) -> float:
        """The journal's last time [s]: where a resumed part's clock starts."""
        ends = [r.end_s for _, r in self.records] + [p.time_s for _, p in self.steps]
        return max(ends, default=0.0)


class Journal:
    """Appends a part of a run to ``path``: records as they complete, steps durably."""

    def __init__(
        self,
        path: Path,
        part: int,
        offset_s: float,
        versions: dict[str, int],
        workload: dict | None = None,
        on_durable: Callable[[], None] | None = None,
    ) -> None:
        self.path, self.part, self.offset_s = Path(path), part, offset_s
        self.versions = dict(versions)
        """The version each job starts this part at (its last durable one)."""
        self.on_durable = on_durable
        """Called after each step is durable (a replaced run's old one may go then)."""
        _drop_cut_line(self.path)
        new = not self.path.exists() or not self.path.stat().st_size
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())
        start = {"offset_s": offset_s, "versions": self.versions}
        if workload is not None:
            start["workload"] = workload
        try:
            self._write({"start": start}, sync=True)
        except WriteError:  # a journal of no whole line would be refused by the next resume
            with suppress(WriteError):  # (the cut line again)
                self.close()
            if new:
                self.path.unlink(missing_ok=True)
            raise

    def records(self, records: list[WorkRecord]) -> None:
        """Append work records (part-local times; shifted here)."""
        for record in records:
            self._write({"record": json_values(self._absolute(record)._asdict())})

    def step(self, point: RewardPoint, wall_s: float, batches: int, failures: int) -> None:
        """Mark a step durable (its point's time is part-local; shifted here) and fsync."""
        shifted = asdict(point) | {"time_s": point.time_s + self.offset_s}
        counters = {"wall_s": wall_s, "batches": batches, "failures": failures}
        self._write({"step": json_values(shifted), "counters": counters}, sync=True)
        if self.on_durable is not None:
            self.on_durable()

    def close(self) -> None:
        """Flush and close the file."""
        if not self._file.closed:
            try:
                with self._failing():
                    self._file.flush()
                    os.fsync(self._file.fileno())
            finally:
                with suppress(OSError):  # what a failed write left unwritten is dropped
                    self._file.close()

    def _absolute(self, record: WorkRecord) -> WorkRecord:
        return record._replace(
            start_s=record.start_s + self.offset_s, end_s=record.end_s + self.offset_s
        )

    def _write(self, line: dict, sync: bool = False) -> None:
        with self._failing():
            self._file.write(json.dumps({"part": self.part, **line}, allow_nan=False) + "\n")
            self._file.flush()
            if sync:
                os.fsync(self._file.fileno())

    @contextmanager
    def _failing(self) -> Iterator[None]:
        """A write that fails (disk full, a file size limit) as one WriteError naming the
        journal: Python's own error names no file ("marlaas: error: File too large")."""
        try:
            yield
        except OSError as err:
            raise WriteError(f"{self.path}: cannot append to the run's journal ({reason(err)}); "
                             "the run stopped: free space or mend the disk, then continue it "
                             "with --resume (its durable steps are kept)") from err  # fmt: skip


def _drop_cut_line(path: Path) -> None:
    """Truncate a last line that a kill cut short, so that new lines start on their own."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)


class _Line(BaseModel):
    """A journal line's part (its other keys are checked where they are read)."""

    model_config = ConfigDict(extra="allow")
    part: Annotated[int, Field(ge=0, le=MAX_PARTS)]


class _StartVersions(RootModel[dict[str, Annotated[int, Field(ge=0, le=MAX_STEPS)]]]):
    """A start line's versions: the version each job started its part at."""


class _Step(BaseModel):
    """A step line's reward point: RewardPoint's fields, typed (null: NaN)."""

    model_config = ConfigDict(extra="allow")
    job: str
    tenant: str
    step: Annotated[int, Field(ge=0, le=MAX_STEPS)]
    mean_reward: float | None
    time_s: Annotated[float, Field(ge=0, le=MAX_EVENT_TIME_S)]
    staleness: int
    max_staleness: int
    mean_ratio: float | None
    clip_fraction: float | None
    loss: float | None
    samples: Annotated[int, Field(ge=0)]
    rss_mb: float | None = None
    trust_clip_fraction: float | None = None
    dropped_groups: Annotated[int, Field(ge=0)] = 0


def read_journal(path: Path) -> Journaled:
    """Read a journal back (an empty one when there is no file), every line checked: its
    part, a step's reward point, and the records as an event log
    (:func:`marlaas.eventlog.check_event_log`); JournalError naming the line otherwise."""
    out = Journaled()
    if not Path(path).exists():
        return out
    try:
        data = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise JournalError(f"{path}: not a readable journal ({err}); cannot resume") from None
    lines = data.split("\n")
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            line = strict_json.loads(text)
        except strict_json.DuplicateKeyError as err:
            raise JournalError(f"{path}: line {number}: {err}; cannot resume") from None
        except ValueError:
            if number >= len(lines) - 1:
                break  # the last line, cut short by a kill
            raise JournalError(f"{path}: line {number} is damaged; cannot resume") from None
        try:
            _add(out, line)
        except ValidationError as err:
            raise JournalError(format_validation_error(err, f"{path}: line {number}")) from None
        except (KeyError, TypeError, ValueError) as err:
            raise JournalError(f"{path}: line {number} is not a journal line ({err})") from None
    try:  # the records as the event log they become
        frame = records_to_frame([record for _, record in out.records])
        check_event_log(pa.Table.from_pandas(frame, preserve_index=False), f"{path}: records")
    except (EventLogError, pa.ArrowException, TypeError, ValueError) as err:
        raise JournalError(f"{err}; cannot resume" if isinstance(err, EventLogError)
                           else f"{path}: records: {err}; cannot resume") from None  # fmt: skip
    return out


def read_run_journal(out: Path) -> Journaled:
    """:func:`read_journal` of the run folder ``out``; JournalError when its journal is
    missing, or holds no whole line (zeroed, emptied), though the run's manifest lists it:
    a run without one resumes as one from before journals, from its store's newest version,
    its history silently gone. (A journal whose first line a failed write cut short is
    removed by :class:`Journal` and not listed.)"""
    path = Path(out) / JOURNAL_FILE
    listed = JOURNAL_FILE in (read_manifest(out) or {}).get("files", [])
    if listed and not (path.exists() or path.is_symlink()):
        raise JournalError(f"{path}: missing, though the run's {MANIFEST_FILE} lists it; "
                           "cannot resume")  # fmt: skip
    journaled = read_journal(path)
    if listed and not journaled.parts:  # its first line, fsynced before any work, is gone
        raise JournalError(f"{path}: holds no whole journal line, though the run's "
                           f"{MANIFEST_FILE} lists it (zeroed or emptied); "
                           "cannot resume")  # fmt: skip
    return journaled


def _add(out: Journaled, line: dict) -> None:
    if not isinstance(line, dict):
        raise TypeError(f"a JSON object, not {type(line).__name__}")
    part = _Line.model_validate(line, strict=True).part
    out.parts = max(out.parts, part + 1)
    start = line.get("start")
    if isinstance(start, dict) and out.workload is None and isinstance(start.get("workload"), dict):
        out.workload = start["workload"]
    if isinstance(start, dict):
        versions = _StartVersions.model_validate(start.get("versions", {}), strict=True).root
        for job, version in versions.items():
            out.starts[job] = max(out.starts.get(job, 0), version)
    if "record" in line:
        out.records.append((part, WorkRecord(**_floats(line["record"]))))
    elif "step" in line:
        _Step.model_validate(line["step"], strict=True)
        step = {"trust_clip_fraction": None, **line["step"]}  # not recorded before 2026-12-03
        out.steps.append((part, RewardPoint(**_floats(step))))
        out.counters[part] = line.get("counters", {})


def json_values(values: dict) -> dict:
    """NaN (a reward of work without one) as null: JSON has no NaN."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in values.items()}


def _floats(values: dict) -> dict:
    return {k: math.nan if v is None else v for k, v in values.items()}
