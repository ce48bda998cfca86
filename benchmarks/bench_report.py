"""Report speed on a big synthetic run (32 jobs, 64 GPUs, 100 steps, ~4e5 rows).

Run: ``python -m pytest benchmarks/bench_report.py --benchmark-enable -s``. The baseline is
reading the same Parquet file in the same session; the ratio report/read is printed and stored
in the benchmark's ``extra_info``, so it stays comparable across machines.
"""

from __future__ import annotations

import statistics
import time

import pytest

from marlaas.eventlog import read_event_log
from marlaas.report import run_report
from tests.synthetic import write_run

BIG = dict(n_jobs=32, n_rollout=48, n_train=16, steps=100, groups=32, turns=2, seed=1)
"""32 jobs x 64 devices (48 rollout engines, 16 trainers) x 100 steps."""


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    """A run folder with the big synthetic log."""
    return write_run(tmp_path_factory.mktemp("bench") / "big", **BIG)


def _seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def test_report_vs_read(benchmark, big_run, tmp_path):
    read_s = _seconds(lambda: read_event_log(big_run), repeat=5)
    out = tmp_path / "report"
    benchmark.pedantic(run_report, args=([big_run], out), rounds=3, iterations=1)
    report_s = (
        benchmark.stats.stats.median
        if benchmark.stats
        else _seconds(lambda: run_report([big_run], out), repeat=1)
    )
    rows = len(read_event_log(big_run))
    benchmark.extra_info.update(
        rows=rows, read_s=read_s, report_s=report_s, ratio=report_s / read_s
    )
    print(
        f"\n{rows} rows: read {read_s:.3f} s, report {report_s:.2f} s, "
        f"ratio {report_s / read_s:.0f}x"
    )
    assert (out / "report.html").exists()
