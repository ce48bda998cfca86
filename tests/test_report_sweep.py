"""``marlaas report SWEEP_DIR``: a page comparing every run of a sweep."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from marlaas.cli import main
from marlaas.eventlog import EventLogError
from marlaas.report import run_report
from marlaas.report.interactive.sweep import plot_scaling, scaling_points
from marlaas.report.sweep_page import load_sweep, scaling_table

SMALL = Path(__file__).resolve().parent.parent / "traces" / "small.yaml"
FAST = ["jobs.*.rl.steps=2", "jobs.*.rl.prompts_per_step=2"]


def _sweep(out: Path, *args: str) -> Path:
    argv = ["sweep", str(SMALL), "--presets", "sequential", "--policies", "fair", "--jobs", "1,2",
            "--workers", "1", "--quiet", "--out", str(out), *args]  # fmt: skip
    assert main([*argv, *[f"--set={s}" for s in FAST]]) == 0
    return out


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    """A sweep of 2 schedules (the sequential preset, fair) x 2 job counts that kept its runs'
    event logs; small.yaml's policy is fair, so both schedules order by fair."""
    return _sweep(tmp_path_factory.mktemp("sweep") / "cmp")


def test_sweep_runs_are_labelled_and_found(sweep_dir):
    table = load_sweep(sweep_dir)
    assert table["label"].tolist() == [
        "sequential (1 job)", "fair (1 job)", "sequential (2 jobs)", "fair (2 jobs)",
    ]  # fmt: skip
    assert all(folder is not None and folder.is_dir() for folder in table["folder"])
    people = scaling_table(table)
    assert people["utilization"].str.endswith("%").all()
    assert "seed" not in people and "variant" not in people  # they do not vary


def test_scaling_figure_plots_the_sweep_table(sweep_dir):
    table = load_sweep(sweep_dir)
    fig = plot_scaling(table)
    csv = pd.read_csv(sweep_dir / "sweep.csv")
    for trace in fig.data:
        schedule, _ = trace.meta
        rows = csv[csv["schedule"] == schedule].sort_values("jobs")
        column = {"utilization": "utilization", "job completion": "jct_mean_s"}
        panel = trace.hovertemplate.split("<br>")[2].split(":")[0]
        col = next((c for k, c in column.items() if panel.startswith(k)), "makespan_s")
        assert list(trace.x) == rows["jobs"].tolist()
        assert np.asarray(trace.y) == pytest.approx(rows[col].to_numpy())
    assert len(scaling_points(table)) == 4


def test_sweep_report_compares_all_runs(sweep_dir, tmp_path):
    report = run_report([sweep_dir], tmp_path / "out")
    text = report.read_text()
    ids = re.findall(r'<section id="([^"]+)"', text)
    assert ids == ["scaling", "idle", "overtime"]
    assert text.count("<tr") == 5  # header + one row per run
    for label in ("sequential (1 job)", "fair (2 jobs)"):
        assert label in text
    assert "utilization, pool colocated" in text and "time saved vs baseline" in text
    with pytest.raises(EventLogError, match="on its own"):
        run_report([sweep_dir, sweep_dir], tmp_path / "two")


def test_sweep_without_event_logs_still_reports(tmp_path):
    bare = _sweep(tmp_path / "bare", "--no-events")
    text = run_report([bare], tmp_path / "out").read_text()
    assert re.findall(r'<section id="([^"]+)"', text) == ["scaling", "idle"]
    assert "--no-events" in text


def test_overtime_rows_are_each_runs_utilization(sweep_dir):
    from marlaas.metrics.devices import makespan
    from marlaas.metrics.utilization import utilization_over_time
    from marlaas.report.interactive.sweep import plot_overtime
    from marlaas.report.load import load_run
    from marlaas.report.sweep_page import _overtime

    table = load_sweep(sweep_dir)
    (heat,) = plot_overtime(_overtime(table)).data
    folders = zip(table["label"], table["folder"], strict=True)
    events = {label: load_run(folder).events for label, folder in folders}
    longest = max(makespan(e) for e in events.values())
    for row, label in zip(np.asarray(heat.z), heat.y, strict=True):
        expected = utilization_over_time(events[label], longest / 200)["overall"].to_numpy()
        n = min(len(expected), 200)
        assert row[:n] == pytest.approx(expected[:n])
        assert np.isnan(row[n:]).all()
