"""A disk that fails a real run's write (full, over its quota, failing) stops the run as a
failed write: one line naming the path where it is known, exit status 1 (the machine's failure,
not the workload's), its durable steps kept."""

from __future__ import annotations

from pathlib import Path

from marlaas.core.work import Decision, EnvStep, Generate
from marlaas.output.errors import WriteError, disk_error, reason


def disk_write_error(what: str, err: BaseException, where: Path) -> WriteError | None:
    """The one-line WriteError (exit status 1: the machine's failure, not the workload's)
    for ``err`` when it is a disk's, full, over its quota or failing
    (:func:`marlaas.output.errors.disk_error`), raised while ``what`` (e.g. ``Sync of job
    'a'``) wrote under ``where`` (named when the error names no file); None otherwise."""
    failed = disk_error(err) if isinstance(err, Exception) else None  # Ctrl-C stays Ctrl-C
    if failed is None:
        return None
    told = reason(failed) if failed.filename else f"{where}: {reason(failed)}"
    return WriteError(f"{what} could not write ({told}); the run stopped: free space or mend "
                      "the disk (the steps made durable are kept)")  # fmt: skip


def raise_if_disk_failed(d: Decision, exc: Exception, where: Path) -> None:
    """Raise :func:`disk_write_error` when ``exc`` is a disk's and ``d`` writes (loads,
    swaps, training, syncs) under ``where`` (the adapter store): work retried on a full
    disk failed again and the run ended as a bad workload (status 2, "LoadAdapter ...
    failed 4 times in a row: OSError: [Errno 28] ..."). The run stops; its durable steps
    are kept."""
    if isinstance(d, Generate | EnvStep):  # they write nothing: an environment's own
        return  # failed read, say, is its work's failure, retried as any other
    failed = disk_write_error(f"{type(d).__name__} of job {d.job!r}", exc, where)
    if failed is not None:
        raise failed from exc
