"""A sweep's worker processes (marlaas.workers): results as they finish, a task's error
raised in the parent, and a worker that dies as it runs a task an error naming the task (a
sweep's run), never a wait for ever."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

from marlaas.workers import RemoteTraceback, WorkerDied, how_it_ended, run_tasks
from tests.child_env import python_path_first
from tests.test_policy_path_checked import WORKLOAD  # a two-job workload
from tests.test_signals import alive

REPO = Path(__file__).resolve().parent.parent

KILL_SELF = """
import os
import signal

from marlaas.core.policies import Policy


class KillSelf(Policy):
    def key(self, job):
        if job.name != "probe":
            os.kill(os.getpid(), signal.SIGKILL)
        return (job.index,)
"""


def square(x: int) -> int:
    return x * x


def die_on_three(x: int) -> int:
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
    return x


def exit_on_two(x: int) -> int:
    if x == 2:
        os._exit(7)
    return x


def fail_on_one(x: int) -> int:
    if x == 1:
        raise ValueError("one is bad")
    return x


class Unrebuilt(Exception):
    """An error that pickles but cannot be made again from its args."""

    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a} and {b}")


def fail_unrebuilt(x: int) -> int:
    raise Unrebuilt("left", "right")


MARK = "as imported"
"""Changed by a test as it runs: a forked worker sees the change, a spawned one does not."""


def mark(x: int) -> str:
    return MARK


def slow(x: int) -> int:
    if x:
        time.sleep(60)
    return x


def all_children() -> set[int]:
    """This process's live children but multiprocessing's resource tracker (a process that
    spawns starts one, which ends with it)."""
    listed = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(os.getpid())],
                            capture_output=True, text=True, check=False).stdout  # fmt: skip
    rows = [line.split(maxsplit=1) for line in listed.splitlines() if line.strip()]
    return {int(r[0]) for r in rows if "resource_tracker" not in r[-1] and alive(int(r[0]))}


@pytest.fixture
def children():
    """This process's live children that the test started (a full run's earlier tests may
    leave helpers of their own)."""
    earlier = all_children()
    return lambda: sorted(all_children() - earlier)


def test_every_result_comes_back_with_its_index(children):
    got = dict(run_tasks(square, [(i, i) for i in range(10)], 3))
    assert got == {i: i * i for i in range(10)}
    assert children() == []


def test_more_workers_than_tasks():
    assert dict(run_tasks(square, [(0, 4)], 4)) == {0: 16}


def test_a_task_error_is_raised_here_with_the_workers_traceback(children):
    with pytest.raises(ValueError, match="one is bad") as err:
        list(run_tasks(fail_on_one, [(i, i) for i in range(4)], 2))
    assert isinstance(err.value.__cause__, RemoteTraceback)
    assert "fail_on_one" in str(err.value.__cause__)
    assert children() == []


def test_an_error_that_does_not_come_back_whole_keeps_its_message_and_traceback(children):
    """It was a TypeError from unpickling in the parent, the task's own error lost."""
    with pytest.raises(RuntimeError, match="Unrebuilt: left and right") as err:
        list(run_tasks(fail_unrebuilt, [(0, 0), (1, 1)], 2))
    assert "fail_unrebuilt" in str(err.value.__cause__)
    assert children() == []


def test_a_process_that_used_ray_spawns_its_workers_instead_of_forking(monkeypatch, children):
    """Ray's gRPC threads outlive ray.shutdown(), and a worker forked after them died of
    SIGSEGV (ci81, a test session that had run Ray's tests): such a process starts its
    workers as fresh interpreters; another forks them (they see what it changed)."""
    monkeypatch.setattr(sys.modules[__name__], "MARK", "changed here")
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    assert set(dict(run_tasks(mark, [(0, 0), (1, 1)], 2)).values()) == {"changed here"}
    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))
    assert set(dict(run_tasks(mark, [(0, 0), (1, 1)], 2)).values()) == {"as imported"}
    assert children() == []


def test_a_trace_error_crosses_from_a_worker_whole():
    from marlaas.traces.errors import TraceError

    again = pickle.loads(pickle.dumps(TraceError("a.csv", "bad row", 3)))
    assert (str(again), again.line) == ("a.csv: line 3: bad row", 3)


@pytest.mark.parametrize(
    ("fn", "index", "ends"),
    [(die_on_three, 3, "was killed by SIGKILL"), (exit_on_two, 2, "exited with status 7")],
)
def test_a_worker_that_dies_is_an_error_naming_its_task(fn, index, ends, children):
    started = time.monotonic()
    with pytest.raises(WorkerDied) as err:
        list(run_tasks(fn, [(i, i) for i in range(6)], 2))
    assert err.value.index == index and ends in str(err.value)
    assert time.monotonic() - started < 30
    assert children() == []


def test_leaving_early_terminates_the_workers_at_once(children):
    started = time.monotonic()
    tasks = run_tasks(slow, [(i, i) for i in range(4)], 2)
    assert next(tasks) == (0, 0)
    assert len(children()) == 2  # the other worker runs a long task
    tasks.close()
    assert children() == []
    assert time.monotonic() - started < 20


def test_how_it_ended():
    assert how_it_ended(-9) == "was killed by SIGKILL"
    assert how_it_ended(3) == "exited with status 3"


def test_a_sweep_whose_worker_dies_names_the_run_and_cleans_up(tmp_path):
    pkg = tmp_path / "pkgs" / "killpol"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "p.py").write_text(textwrap.dedent(KILL_SELF))
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "w.yaml").write_text(WORKLOAD)
    command = [sys.executable, "-m", "marlaas.cli", "sweep", str(tmp_path / "w.yaml"),
               "--policies", "fifo,killpol.p:KillSelf", "--workers", "2", "--quiet",
               "--out", str(work / "sw")]  # fmt: skip
    env = python_path_first(tmp_path / "pkgs", REPO)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=env, check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "marlaas: error: a worker process was killed by SIGKILL while it ran run "
        "jobs2-killpol.p:KillSelf-seed0 (workload tiny, policy killpol.p:KillSelf, seed 0)"
    )
    assert os.listdir(work) == []  # no sweep folder, staging folder or lock left
