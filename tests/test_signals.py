"""Signals: Ctrl-C and SIGTERM stop a sweep in seconds, and no worker process outlives it,
not even when the sweep is killed outright (SIGKILL); the next run cleans what a kill left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

STOP_TIMEOUT_S = 30
"""Generous bound on stopping (each run of the sweep below takes minutes)."""


def sweep_command(out: Path) -> list[str]:
    return [sys.executable, "-m", "marlaas.cli", "sweep", "traces/paper-32.yaml", "--policies",
            "fifo,fair,srtf", "--set", "jobs.*.rl.steps=60", "--workers", "2", "--quiet",
            "--out", str(out)]  # fmt: skip


def children(pid: int) -> list[int]:
    listed = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                            text=True, check=False).stdout  # fmt: skip
    return [int(p) for p in listed.split()]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def start_sweep(out: Path) -> tuple[subprocess.Popen, list[int]]:
    """A sweep whose two workers are running simulations."""
    proc = subprocess.Popen(sweep_command(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while len(children(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = children(proc.pid)
    assert len(workers) >= 2, proc.stderr.read() if proc.poll() is not None else "no workers"
    time.sleep(1.0)  # the workers have started their runs
    return proc, workers


def wait_gone(pids: list[int], timeout_s: float = STOP_TIMEOUT_S) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sweep_stops_promptly_and_leaves_no_worker(tmp_path, sig, code):
    out = tmp_path / "sweep"
    proc, workers = start_sweep(out)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # Ctrl-C: the terminal signals the whole process group
    else:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=STOP_TIMEOUT_S)
    assert proc.returncode == code, err
    assert err.strip() == f"marlaas: interrupted ({sig.name}); {out} was left as it was"
    assert wait_gone(workers) == []
    assert sorted(os.listdir(tmp_path)) == []  # no staging folder, no lock file


@pytest.mark.slow
def test_workers_die_with_a_killed_sweep_and_the_next_run_cleans_up(tmp_path):
    out = tmp_path / "sweep"
    proc, workers = start_sweep(out)
    proc.kill()
    proc.communicate()
    assert wait_gone(workers) == []
    assert {".sweep.lock", ".sweep.staging"} >= set(os.listdir(tmp_path))
    again = [sys.executable, "-m", "marlaas.cli", "sweep", "traces/small.yaml", "--policies",
             "fifo", "--set", "jobs.*.rl.steps=1", "--quiet", "--out", str(out)]  # fmt: skip
    done = subprocess.run(again, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(tmp_path)) == ["sweep"]
