"""The event log: one row per piece of work, the same schema for simulated and real runs.

Reports, comparisons and replay read event logs only, so everything they need is here.
Rows are made by the scheduler core (:class:`marlaas.core.records.WorkRecord`) and written
as Parquet by :func:`write_event_log`. Columns (times in seconds since the run's start):

========== ======= ==================================================================
column     type    meaning
========== ======= ==================================================================
kind       str     ``generate`` (one turn of one group on an inference engine),
                   ``env`` (one environment step of one group), ``train`` (one
                   training step of one job), ``sync`` (publishing a new adapter
                   version to the engines), ``adapter_load`` (an engine loading an
                   adapter version), ``idle`` (a device with nothing to do, and why)
tenant     str     the tenant that owns the job ("" for idle rows)
job        str     the job's name ("" for idle rows)
step       int     training step the work belongs to (-1 when none)
group      int     prompt group index within the job (-1 when none)
turn       int     turn of a multi-turn episode (-1 when none)
device     str     device name, e.g. ``rollout/3``; "" for environment work
pool       str     pool of the device (``env`` for environment work)
start_s    float   start time [s]
end_s      float   end time [s]
seqs       int     sequences in this piece of work
tokens     int     tokens produced (generate) or trained on (train)
version    int     adapter version used (generate), produced (train), published (sync)
staleness  int     train: the largest lag, in versions, of a sample in the batch; else -1
outcome    str     ``ok``, ``failed``, ``cancelled`` or ``resampled`` (OUTCOMES); for
                   idle rows the cause: ``rollouts``,
                   ``trainer``, ``environment``, ``weight_sync``, ``adapter_load``,
                   ``staleness``, ``barrier`` (the step barrier of ``sync``),
                   ``no_work``
reward     float   mean reward of the group (real runs; NaN in simulation)
prompt_tokens int  generate: context tokens per sequence the turn started from: on
                   the first turn the group's own prompt (every sample of a group
                   shares it; in simulation drawn per group, marlaas.core.prompts;
                   in real runs the tokenized prompt), later the prompt, the earlier
                   turns and observations; train: the repeats of its groups'
                   prompts the trainer did not read (it read each shared
                   beginning once): at most (group size - 1) x each group's
                   prompt, 0 when it read every sample whole; -1 for other kinds,
                   a trainer that does not say, and logs written before it existed
longest_tokens int generate: tokens of the group's longest sample; -1 otherwise
========== ======= ==================================================================
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from marlaas.atomic import replacing
from marlaas.core.records import RecordLog, WorkRecord
from marlaas.output.kinds import other_output

SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("tenant", pa.string()),
        ("job", pa.string()),
        ("step", pa.int32()),
        ("group", pa.int32()),
        ("turn", pa.int32()),
        ("device", pa.string()),
        ("pool", pa.string()),
        ("start_s", pa.float64()),
        ("end_s", pa.float64()),
        ("seqs", pa.int32()),
        ("tokens", pa.int64()),
        ("version", pa.int32()),
        ("staleness", pa.int32()),
        ("outcome", pa.string()),
        ("reward", pa.float64()),
        ("prompt_tokens", pa.int32()),
        ("longest_tokens", pa.int32()),
    ]
)
COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)
KINDS = ("generate", "env", "train", "sync", "adapter_load", "idle")
IDLE_CAUSES = (
    "rollouts",
    "trainer",
    "environment",
    "weight_sync",
    "adapter_load",
    "staleness",
    "barrier",
    "no_work",
)
EVENT_LOG_FILE = "events.parquet"
ADDED_COLUMNS = {"prompt_tokens": -1, "longest_tokens": -1}
"""Columns added after the first schema, with the value older logs read as."""


class EventLogError(ValueError):
    """A file that is not a readable MARLaaS event log (empty, truncated or foreign)."""


def records_to_frame(records: Iterable[WorkRecord]) -> pd.DataFrame:
    """Turn work records into a DataFrame with exactly the event-log columns and types."""
    if isinstance(records, RecordLog):
        columns = records.columns()
    else:
        records = list(records)
        columns = zip(*records, strict=True) if records else [()] * len(WorkRecord._fields)
    by_field = dict(zip(WorkRecord._fields, columns, strict=True))
    arrays = [pa.array(by_field.get(c, ()), type=SCHEMA.field(c).type) for c in COLUMNS]
    return pa.Table.from_arrays(arrays, schema=SCHEMA).to_pandas()


def write_event_log(records: Iterable[WorkRecord] | pd.DataFrame, path: str | Path) -> Path:
    """Write the event log as Parquet atomically (temporary file, then rename)."""
    path = Path(path)
    frame = records if isinstance(records, pd.DataFrame) else records_to_frame(records)
    missing = {c: d for c, d in ADDED_COLUMNS.items() if c not in frame.columns}
    if missing:  # a frame of an older log: its added columns take their defaults
        frame = frame.assign(**missing)
    table = pa.Table.from_pandas(frame[list(COLUMNS)], schema=SCHEMA, preserve_index=False)
    with replacing(path) as tmp:
        pq.write_table(table, tmp)
    return path


def read_event_log(path: str | Path) -> pd.DataFrame:
    """Read an event log written by a simulation or a real run.

    ``path`` is either the Parquet file or a run folder that contains ``events.parquet``.
    Every column is checked before the rows are used (:func:`check_event_log`). Raises
    :class:`EventLogError` naming the file, the column and what is wrong with it.
    """
    path = Path(path)
    if path.is_dir():
        other = other_output(path)
        if other is not None:  # its manifest (or content) says what it is
            raise EventLogError(f"{path}: is {other}, not a run folder; expected a run folder "
                                f"with {EVENT_LOG_FILE} (marlaas simulate, train and replay "
                                "write one)")  # fmt: skip
        path = path / EVENT_LOG_FILE
    if not path.exists():
        raise EventLogError(f"{path}: no such event log")
    if path.stat().st_size == 0:
        raise EventLogError(f"{path}: the file is empty")
    try:
        schema = pq.read_schema(path)
        rows = pq.read_metadata(path).num_rows
        if rows > MAX_EVENT_ROWS:
            raise EventLogError(f"{path}: {rows:,} rows; an event log may have at most "
                                f"{MAX_EVENT_ROWS:,}")  # fmt: skip
        strings = [c for c in COLUMNS if c in schema.names and _is_text(schema.field(c).type)]
        table = pq.read_table(path, columns=[c for c in COLUMNS if c in schema.names],
                              read_dictionary=strings)  # fmt: skip
    except (pa.ArrowException, OSError) as err:
        raise EventLogError(f"{path}: not a Parquet event log ({err})") from err
    for column, default in ADDED_COLUMNS.items():  # logs written before a column existed
        if column not in table.column_names:
            values = pa.array([default] * table.num_rows, type=SCHEMA.field(column).type)
            table = table.append_column(column, values)
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise EventLogError(f"{path}: not a MARLaaS event log (missing columns: {missing})")
    return check_event_log(table.select(list(COLUMNS)), path).to_pandas()


# --------------------------------------------------------------------------- checks

MAX_NAME_CHARS = 256
"""Longest name (tenant, job, device, pool, kind, outcome) an event log may hold
[characters]: a workload's names are at most 128 characters, a device adds its index."""
MAX_EVENT_ROWS = 200_000_000
"""Most rows an event log may have (the footer says, before anything is read)."""
MAX_EVENT_TIME_S = 1e12
"""Latest time an event log may hold [s] (beyond it, sums of times lose all precision)."""
NOT_BELOW = {"step": -1, "group": -1, "turn": -1, "seqs": 0, "tokens": 0, "version": -1,
             "staleness": -1, "prompt_tokens": -1, "longest_tokens": -1}  # fmt: skip
"""Least value of each integer column (-1: none)."""
OUTCOMES = ("ok", "failed", "cancelled", "resampled")
"""Outcomes of work (idle rows name a cause of IDLE_CAUSES instead): ``cancelled`` is work of a
job cancelled while it ran; ``resampled`` an episode's last environment step whose group was
dropped as all alike and drawn again (rl.resample_alike: the work was done, not trained on)."""
DONE_OUTCOMES = ("ok", "resampled")
"""Outcomes of work that finished and took its time (a dropped group's last step did)."""


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def check_event_log(table: pa.Table, source: str | Path) -> pa.Table:
    """``table`` with every column in its schema type, after checking that it is a usable
    event log: the column types, no missing values (but rewards), names of at most
    MAX_NAME_CHARS, known kinds and outcomes, work naming its job and tenant (one tenant per
    job) and idle rows neither, finite times in 0..MAX_EVENT_TIME_S that end
    no earlier than they start, integers within bounds, rewards finite or missing.
    Raises :class:`EventLogError` naming ``source`` and the column."""
    columns = []
    for name in COLUMNS:
        column = _typed(table.column(name), SCHEMA.field(name).type, name, source)
        nulls = column.null_count
        if nulls and name != "reward":
            raise EventLogError(f"{source}: column {name!r} has {nulls:,} missing value(s)")
        columns.append(column)
    table = pa.Table.from_arrays(columns, schema=SCHEMA)
    kinds = set(pc.unique(table.column("kind")).to_pylist())
    unknown = sorted(kinds - set(KINDS))
    if unknown:
        raise EventLogError(f"{source}: unknown kinds {unknown[:5]} (expected one of {KINDS})")
    idle = pc.equal(table.column("kind"), "idle")
    outcome = table.column("outcome")
    allowed = pc.if_else(idle, pc.is_in(outcome, pa.array(IDLE_CAUSES)),
                         pc.is_in(outcome, pa.array(OUTCOMES)))  # fmt: skip
    if not pc.all(allowed, min_count=0).as_py():
        bad = sorted(set(pc.filter(outcome, pc.invert(allowed)).to_pylist()))
        raise EventLogError(f"{source}: column 'outcome': unknown values {bad[:5]} (work is "
                            f"{OUTCOMES}, idle rows name a cause of {IDLE_CAUSES})")  # fmt: skip
    _check_times(table, source)
    _check_owners(table, source)
    for name, least in NOT_BELOW.items():
        low = pc.min(table.column(name)).as_py()
        if low is not None and low < least:
            raise EventLogError(f"{source}: column {name!r}: {low} is below {least}")
    reward = table.column("reward")
    if not pc.all(pc.fill_null(pc.is_finite(reward), True), min_count=0).as_py():
        raise EventLogError(f"{source}: column 'reward': infinite values (a reward is finite, "
                            "or missing)")  # fmt: skip
    return table


def _typed(column: pa.ChunkedArray, kind: pa.DataType, name: str, source) -> pa.ChunkedArray:
    """``column`` cast to ``kind``, refusing another family of type (a string of numbers, a
    struct) and values that do not fit; text is length-checked before it is decoded."""
    found = column.type
    dictionary = pa.types.is_dictionary(found)
    values = found.value_type if dictionary else found
    if _is_text(kind):
        fits = _is_text(values)
    elif pa.types.is_integer(kind):
        fits = pa.types.is_integer(values)
    else:
        fits = pa.types.is_integer(values) or pa.types.is_floating(values)
    if not fits:
        raise EventLogError(f"{source}: column {name!r} holds {values}, expected {kind}")
    if _is_text(kind):
        texts = pa.chunked_array([c.dictionary for c in column.chunks], values) if dictionary \
            else column  # fmt: skip
        longest = pc.max(pc.utf8_length(texts)).as_py() if len(texts) else 0
        if longest and longest > MAX_NAME_CHARS:
            raise EventLogError(f"{source}: column {name!r}: a value of {longest:,} characters; "
                                f"at most {MAX_NAME_CHARS}")  # fmt: skip
    try:
        return column.cast(kind)
    except pa.ArrowInvalid as err:
        raise EventLogError(f"{source}: column {name!r}: values do not fit {kind} "
                            f"({err})") from None  # fmt: skip


def _check_owners(table: pa.Table, source) -> None:
    """Work names its job and tenant, an idle row neither, and a job has one tenant."""
    kind, tenant, job = (table.column(c) for c in ("kind", "tenant", "job"))
    idle = pc.equal(kind, "idle")
    named = pc.and_(pc.not_equal(job, ""), pc.not_equal(tenant, ""))
    unnamed = pc.and_(pc.equal(job, ""), pc.equal(tenant, ""))
    bad = np.flatnonzero(pc.if_else(idle, pc.invert(unnamed), pc.invert(named)).to_numpy())
    if len(bad):
        row = bad[0]
        raise EventLogError(f"{source}: row {row}: kind {kind[row].as_py()!r} with job "
                            f"{job[row].as_py()!r}, tenant {tenant[row].as_py()!r} (work "
                            "names its job and tenant, an idle row neither)")  # fmt: skip
    owners = table.filter(pc.invert(idle)).group_by("job").aggregate([("tenant", "count_distinct")])
    shared = pc.greater(owners.column("tenant_count_distinct"), 1)
    if pc.any(shared, min_count=0).as_py():
        name = pc.filter(owners.column("job"), shared)[0].as_py()
        tenants = sorted(set(pc.filter(tenant, pc.equal(job, name)).to_pylist()))
        raise EventLogError(f"{source}: job {name!r} has rows of tenants {tenants[:3]}; a "
                            "job has one tenant")  # fmt: skip


def _check_times(table: pa.Table, source) -> None:
    start = table.column("start_s").to_numpy()
    end = table.column("end_s").to_numpy()
    if not (np.isfinite(start).all() and np.isfinite(end).all()):
        raise EventLogError(f"{source}: start_s/end_s contain NaN or infinite times")
    bad = np.flatnonzero(end < start)
    if len(bad):
        raise EventLogError(f"{source}: {len(bad)} row(s) end before they start (row {bad[0]})")
    if (start < 0).any() or (end > MAX_EVENT_TIME_S).any():
        raise EventLogError(f"{source}: times must lie in 0..{MAX_EVENT_TIME_S:g} s")
