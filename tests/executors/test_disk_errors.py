"""A disk that fails a real run (full, over its quota, failing) stops it as a failed write:
one line naming the path where it is known, exit status 1 (README: "a failed write"). Its
work was retried as the workload's failure and the run ended with status 2 ("LoadAdapter
... failed 4 times in a row: OSError: [Errno 28] ..."). No model: the work is faked."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from marlaas.core.work import EnvStep, Sync
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.real import RealExecutor
from marlaas.output.errors import WriteError, disk_error


def full(path: str | None = None, code: int = errno.ENOSPC) -> OSError:
    return OSError(code, os.strerror(code), path)


def raised_while_handling(inner: BaseException, outer: BaseException) -> BaseException:
    """``outer`` raised while ``inner`` was handled (as torch.save through a Python file)."""
    try:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904 (raised while handling: its context is the point)
    except BaseException as err:
        return err


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO])
def test_a_disks_error_is_found_where_it_is_told(code):
    assert disk_error(full("a", code)).errno == code
    torch_save = raised_while_handling(full(code=code), RuntimeError("unexpected pos 704"))
    assert disk_error(torch_save).errno == code
    safetensors = RuntimeError(f"Error while serializing: I/O error: x (os error {code})")
    assert disk_error(safetensors).errno == code


def test_other_errors_are_not_the_disks():
    assert disk_error(full("a", errno.EACCES)) is None
    assert disk_error(RuntimeError("unexpected pos 704")) is None
    assert disk_error(RuntimeError("(os error 13)")) is None
    assert disk_error(KeyboardInterrupt()) is None


def executor_failing(tmp_path: Path, error: Exception) -> RealExecutor:
    """A real executor (never opened: no model) whose Sync and environment steps fail."""
    executor = RealExecutor(None, None, store=AdapterStore(tmp_path / "adapters"), backends=None,
                            model_dir=tmp_path)  # fmt: skip

    async def failing(_decision):
        raise error

    executor._sync = executor._env_step = failing
    return executor


def test_work_on_a_full_disk_stops_the_run_as_a_failed_write(tmp_path):
    adapter = tmp_path / "adapters" / "a" / "v1" / "optimizer.pt"
    executor = executor_failing(tmp_path, full(str(adapter)))
    with pytest.raises(WriteError) as err:
        asyncio.run(executor._work(Sync(7, "a", 1, "t0")))
    assert err.value.exit_status == 1
    assert str(err.value) == (f"Sync of job 'a' could not write ({adapter}: No space left on "
                              "device [ENOSPC]); the run stopped: free space or mend the disk "
                              "(the steps made durable are kept)")  # fmt: skip


def test_a_full_disk_a_library_tells_is_named_by_the_adapter_store(tmp_path):
    told = RuntimeError("Error while serializing: I/O error: No space left (os error 28)")
    executor = executor_failing(tmp_path, told)
    with pytest.raises(WriteError, match=rf"could not write \({tmp_path / 'adapters'}: No space "
                       r"left on device \[ENOSPC\]\)"):  # fmt: skip
        asyncio.run(executor._work(Sync(7, "a", 1, "t0")))


def test_other_failed_work_is_retried_as_before(tmp_path):
    executor = executor_failing(tmp_path, full("x", errno.EACCES))
    done, _ = asyncio.run(executor._work(EnvStep(3, "a", 0, 0, 0, 2, True)))
    assert (done.work_id, done.ok) == (3, False)
    assert done.error == "PermissionError: [Errno 13] Permission denied: 'x'"


def test_an_environments_own_disk_error_is_its_work_failing_not_the_runs_disk(tmp_path):
    """An environment (or generation) writes nothing of the run's: its ENOSPC (its own
    scratch space full) is retried as any failed work, not a stop of the run."""
    executor = executor_failing(tmp_path, full("/tmp/env-scratch"))
    done, _ = asyncio.run(executor._work(EnvStep(3, "a", 0, 0, 0, 2, True)))
    assert (done.work_id, done.ok) == (3, False)
    assert "No space left on device" in done.error


def test_a_run_output_that_cannot_be_written_names_its_file(tmp_path, monkeypatch):
    """pyarrow's error has no strerror: the line read "cannot write the run's outputs (None)"."""
    import pandas as pd

    import marlaas.eventlog as eventlog
    from marlaas.executors import outputs

    def efbig(*_args):
        failed = OSError("Error writing bytes to file. Detail: [errno 27] File too large")
        failed.errno = errno.EFBIG
        raise failed

    monkeypatch.setattr(eventlog.pq, "write_table", efbig)
    with pytest.raises(WriteError) as err:
        outputs.write_real_files(tmp_path, eventlog.records_to_frame([]), {}, pd.DataFrame())
    assert str(err.value).startswith(
        f"{tmp_path}: cannot write the run's outputs ({tmp_path / 'events.parquet'}: Error "
        "writing bytes to file. Detail: [errno 27] File too large [EFBIG]); its adapters"
    )
    assert list(tmp_path.iterdir()) == []
