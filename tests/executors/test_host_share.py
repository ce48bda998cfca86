"""HostShare: a real run's CPU time and what other processes took of the machine meanwhile."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from marlaas.executors.host_share import BUSY_HOST_SHARE, MIN_WALL_S, HostShare, busy_host_note
from marlaas.run_files import RunFileError, check_summary

BURN_S = 1.2


def burn(seconds: float) -> None:
    """Keep this thread busy for ``seconds`` of its own CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_the_runs_own_work_is_counted_as_the_runs():
    with HostShare() as host:
        burn(BURN_S)
    share = host.summary()
    assert share["cpus"] == psutil.cpu_count()
    assert share["run_cpu_s"] >= 0.9 * BURN_S
    assert share["wall_s"] >= BURN_S
    assert 0 <= share["others_share"] <= 1


def test_another_processs_work_is_counted_as_the_others():
    """The run is a sleeping process; this test's own work is another process's."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)  # its start-up's CPU time is before the measurement
        with HostShare(sleeper.pid) as host:
            burn(BURN_S)
        share = host.summary()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert share["run_cpu_s"] < 0.2 * BURN_S
    assert share["other_cpu_s"] >= 0.8 * BURN_S
    assert share["others_share"] >= 0.8 * BURN_S / (share["wall_s"] * share["cpus"])


def test_a_child_process_is_the_runs():
    with HostShare() as host:
        child = subprocess.run(
            [sys.executable, "-c", f"import time\nend = time.process_time() + {BURN_S}\n"
             "while time.process_time() < end: pass"], check=True,
        )  # fmt: skip
    assert child.returncode == 0
    assert host.summary()["run_cpu_s"] >= 0.9 * BURN_S


def test_nothing_is_reported_before_the_run_ends_nor_for_a_span_too_short_to_tell():
    assert HostShare().summary() == {}
    for _ in range(20):  # a tick of other work would be a large share of a few ms
        with HostShare() as host:
            pass
        assert host.summary() == {}
    assert BURN_S > MIN_WALL_S


def test_unreadable_counters_leave_the_run_unmeasured(monkeypatch):
    def denied():
        raise PermissionError("/proc/stat")

    monkeypatch.setattr(psutil, "cpu_times", denied)
    with HostShare() as host:
        burn(BURN_S)
    assert host.summary() == {}


def test_a_grandchild_waited_for_by_its_parent_is_the_runs():
    """The child runs a grandchild that burns CPU and ends, reaped by the child, while the
    child itself lives on: its time is the run's (children_user of the child)."""
    script = (f"import subprocess, sys, time\nsubprocess.run([sys.executable, '-c', 'import time\\n"
              f"end = time.process_time() + {BURN_S}\\nwhile time.process_time() < end: pass'])\n"
              "print('done', flush=True)\ntime.sleep(60)")  # fmt: skip
    with HostShare() as host:
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "done"
    child.kill()
    child.wait()
    assert host.summary()["run_cpu_s"] >= 0.9 * BURN_S


def test_a_busy_host_is_noted_from_its_share_on():
    assert busy_host_note(None) is None
    assert busy_host_note({}) is None
    assert busy_host_note({"others_share": BUSY_HOST_SHARE / 2}) is None
    note = busy_host_note({"others_share": 0.37, "other_cpu_s": 120.4, "steal_s": 3.0})
    assert note.startswith("other processes and the hypervisor took 37% of the machine's")
    assert "120 CPU-s, steal 3 s" in note


@pytest.mark.parametrize("bad", [1.5, -0.1, "high"])
def test_a_summary_with_a_bad_host_share_is_refused(bad):
    with pytest.raises(RunFileError, match=r"host\.others_share"):
        check_summary({"kind": "real", "host": {"others_share": bad}}, "summary.json")
