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
outcome    str     ``ok`` or ``failed``; for idle rows the cause: ``rollouts``,
                   ``trainer``, ``environment``, ``weight_sync``, ``adapter_load``,
                   ``staleness``, ``barrier`` (the step barrier of ``sync``),
                   ``no_work``
reward     float   mean reward of the group (real runs; NaN in simulation)
prompt_tokens int  generate: context tokens per sequence the turn started from: on
                   the first turn the group's own prompt (every sample of a group
                   shares it; in simulation drawn per group, marlaas.core.prompts;
                   in real runs the tokenized prompt), later the prompt, the earlier
                   turns and observations; -1 for other kinds and in logs written
                   before it existed
longest_tokens int generate: tokens of the group's longest sample; -1 otherwise
========== ======= ==================================================================
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from marlaas.core.records import RecordLog, WorkRecord

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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_event_log(path: str | Path) -> pd.DataFrame:
    """Read an event log written by a simulation or a real run.

    ``path`` is either the Parquet file or a run folder that contains ``events.parquet``.
    Raises :class:`EventLogError` naming the file and what is wrong with it.
    """
    path = Path(path)
    if path.is_dir():
        path = path / EVENT_LOG_FILE
    if not path.exists():
        raise EventLogError(f"{path}: no such event log")
    if path.stat().st_size == 0:
        raise EventLogError(f"{path}: the file is empty")
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise EventLogError(f"{path}: not a Parquet event log ({err})") from err
    for column, default in ADDED_COLUMNS.items():  # logs written before a column existed
        if column not in table.column_names:
            values = pa.array([default] * table.num_rows, type=SCHEMA.field(column).type)
            table = table.append_column(column, values)
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise EventLogError(f"{path}: not a MARLaaS event log (missing columns: {missing})")
    return table.select(list(COLUMNS)).to_pandas()
