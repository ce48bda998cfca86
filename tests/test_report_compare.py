"""A report of several runs compares them side by side: one figure per section, the time
figures on one shared time axis; labels readable; staleness and sweep ticks labelled right;
the terminal tables show every job and fit their content."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from marlaas.metrics.devices import makespan
from marlaas.metrics.idle import idle_breakdown
from marlaas.metrics.staleness import staleness_counts
from marlaas.report import run_report
from marlaas.report.interactive import charts
from marlaas.report.interactive.look import LABEL_PX
from marlaas.report.interactive.sweep import plot_scaling
from marlaas.report.interactive.timeline import plot_timelines
from marlaas.report.load import load_runs
from tests.synthetic import synthetic_log


def _figures(report) -> dict[str, dict]:
    text = report.read_text()
    found = re.findall(r'<script type="application/json" id="([^"]+)-data">(.*?)</script>', text)
    return {div: json.loads(body) for div, body in found}


def _x_axes(layout: dict) -> dict[str, dict]:
    return {k: v for k, v in layout.items() if re.fullmatch(r"xaxis\d*", k)}


@pytest.fixture(scope="module")
def compared(two_runs, tmp_path_factory):
    """report.html of the two synthetic runs."""
    return run_report(list(two_runs), tmp_path_factory.mktemp("compared"))


def test_two_runs_get_one_section_per_figure(compared):
    ids = re.findall(r'<section id="([^"]+)"', compared.read_text())
    assert ids == ["summary", "comparison", "timeline", "utilization", "jobs", "idle", "staleness"]
    text = compared.read_text()
    for caption in ("Jobs: fifo", "Jobs: fair", "Staleness per job [versions]: fair"):
        assert f"<h3>{caption}</h3>" in text


def test_timeline_has_one_shared_time_axis_over_both_runs_lanes(compared, two_runs):
    layout = _figures(compared)["fig-timeline"]["layout"]
    axes = _x_axes(layout)
    bottom = [k for k, v in axes.items() if "matches" not in v]
    assert len(bottom) == 1, "one x axis; every other row matches it"
    anchor = bottom[0].replace("axis", "")
    assert all(v.get("matches") == anchor for k, v in axes.items() if k != bottom[0])
    longest = max(makespan(r.events) for r in load_runs(list(two_runs)))
    assert axes[bottom[0]]["range"] == pytest.approx([0, longest])
    data = _figures(compared)["fig-timeline"]["data"]
    lanes_of = {t["yaxis"] for t in data if t["type"] == "bar"}
    assert len(lanes_of) == 2, "each run's lanes are a row of the one figure"
    titles = [a["text"] for a in layout["annotations"]]
    assert any("fifo" in t for t in titles) and any("fair" in t for t in titles)


@pytest.mark.parametrize("section", ["utilization", "jobs"])
def test_time_figures_share_their_time_axis(compared, section):
    layout = _figures(compared)[f"fig-{section}"]["layout"]
    axes = _x_axes(layout)
    assert sum("matches" in v for v in axes.values()) == len(axes) - (
        1 if section == "utilization" else 2
    )  # utilization: one column; jobs: two, each shared down the runs


def test_labels_are_readable_at_paper_32_size():
    df, _ = synthetic_log(n_jobs=32, n_rollout=40, n_train=24, steps=2, groups=2, seed=4)
    other, _ = synthetic_log(n_jobs=32, n_rollout=6, n_train=2, steps=2, groups=2, seed=5)
    fig = plot_timelines([("many", df), ("few", other)])
    sizes = [ax.tickfont.size for ax in fig.select_yaxes()]
    assert min(sizes) >= LABEL_PX >= 11
    devices = [t for t in fig.data if t.type == "heatmap"][-1]
    assert len(devices.y) == 64
    for chart in (charts.plot_jobs(df), charts.plot_staleness(df)):
        assert min(ax.tickfont.size or 0 for ax in chart.select_yaxes()
                   if ax.tickfont.size is not None) >= 11  # fmt: skip
        per_job = chart.layout.height / 32
        assert per_job >= 14, "a job's row is higher than its label"


def test_staleness_labels_show_the_values_of_a_run_with_staleness(medium_log):
    df, _ = medium_log
    counts = staleness_counts(df)
    assert counts.columns.max() > 0, "the fixture has staleness"
    fig = charts.plot_staleness(df)
    labels = {text for t in fig.data for text in t.text if text}
    assert {f"{v} behind" for v in counts.columns if v > 0} & labels
    note = fig.layout.annotations[0].text
    assert f"max {counts.columns.max()} versions behind" in note
    assert fig.layout.showlegend is True  # the values are named even for one value


def test_staleness_of_an_on_policy_run_says_so():
    df, _ = synthetic_log(n_jobs=2, n_rollout=2, steps=3, staleness_bound=0, seed=1)
    fig = charts.plot_stalenesses([("a", df), ("b", df)])
    assert "on-policy" in fig.layout.annotations[0].text
    assert fig.layout.yaxis2.matches == "y" or fig.layout.yaxis2.matches is None


def test_idle_runs_side_by_side_are_the_breakdowns(medium_log, small_log):
    runs = [("m", medium_log[0]), ("s", small_log[0])]
    fig = charts.plot_idles(runs)
    for label, df in runs:
        table = idle_breakdown(df)
        for cause in table.columns[table.any()]:
            drawn = [t for t in fig.data if t.meta == cause and t.x[1][0] == label]
            assert len(drawn) == 1
            assert np.asarray(drawn[0].y) == pytest.approx(table[cause].to_numpy())


def test_sweep_log_axis_labels_every_job_count_in_full(sweep_table):
    fig = plot_scaling(sweep_table)
    axis = fig.layout.xaxis
    assert axis.type == "log"
    assert list(axis.ticktext) == ["1", "8", "32"]
    assert list(axis.tickvals) == [1, 8, 32]


@pytest.fixture
def sweep_table():
    """A sweep.csv-like table with job counts 1, 8 and 32."""
    import pandas as pd

    rows = [
        {"schedule": s, "variant": "", "jobs": j, "utilization": 0.5, "jct_mean_s": 10.0 * j,
         "makespan_s": 20.0 * j}
        for s in ("fifo", "fair") for j in (1, 8, 32)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_simulate_prints_the_job_table_of_17_and_more_jobs(capsys):
    from marlaas.table import MAX_JOB_LINES, print_summary

    for n in (17, MAX_JOB_LINES + 5):
        summary = _summary(n)
        print_summary(summary, "t")
        out = capsys.readouterr().out
        shown = [ln for ln in out.splitlines() if ln.startswith("job-")]
        assert len(shown) == min(n, MAX_JOB_LINES)
        if n > MAX_JOB_LINES:
            assert "... and 5 more jobs; see summary.json" in out


def _summary(n: int) -> dict:
    jobs = [f"job-{i:02d}" for i in range(n)]
    metrics_ = {"makespan_s": 10.0, "utilization": 0.5, "utilization_by_pool": {},
                "jct_mean_s": 1.0, "jct_p90_s": 1.0, "staleness_mean": 0.0,
                "staleness_max": 0, "adapter_swaps": 0, "idle_by_cause_device_s": {}}  # fmt: skip
    return {
        "metrics": metrics_,
        "job_finish_s": {j: 5.0 for j in jobs},
        "arrivals": {j: 0.0 for j in jobs},
        "tenants": {j: "t" for j in jobs},
    }


def test_calibrate_table_lines_fit_their_content():
    from marlaas.twin.calibrate import Calibration, Fitted

    long = "not fitted: " + "x" * 120
    cal = Calibration(cost=None, fitted=[Fitted("a", 1.0, "s", 3, "R² 0.99"),
                                         Fitted("b", 2.0, "s", 0, long)])  # fmt: skip
    lines = cal.table().splitlines()
    assert all(line == line.rstrip() for line in lines)
    assert len(lines[0]) < 40 and len(lines[2]) < 40  # not padded to the long note
    assert lines[3].endswith(long)
