"""The figures of a report draw exactly the metrics: interactive (Plotly) and static
(matplotlib) versions."""

from __future__ import annotations

import numpy as np
import pytest

from marlaas.metrics.devices import device_table
from marlaas.metrics.idle import idle_breakdown
from marlaas.metrics.jobs import job_table
from marlaas.metrics.staleness import staleness_counts
from marlaas.metrics.utilization import utilization, utilization_over_time
from marlaas.report.gantt import plot_gantt
from marlaas.report.idle import plot_idle as static_idle
from marlaas.report.interactive import charts
from marlaas.report.interactive.timeline import plot_heatmap, plot_timeline
from marlaas.report.jobs import plot_jobs as static_jobs
from marlaas.report.staleness import plot_staleness as static_staleness
from marlaas.report.timeline_data import device_busy_fraction, lane_segments, main_job
from marlaas.report.utilization import plot_utilization as static_utilization
from tests.synthetic import synthetic_log


@pytest.fixture(scope="module")
def wide_log():
    """(frame, arrivals) with 30 devices (26 engines, 4 trainers): drawn as a heatmap."""
    return synthetic_log(n_jobs=10, n_rollout=26, n_train=4, steps=3, groups=4, seed=5)


# ------------------------------------------------------------------ interactive


def test_utilization_traces_are_the_metric(medium_log):
    df, _ = medium_log
    series = utilization_over_time(df)
    traces = {t.meta: t for t in charts.plot_utilization(df).data}
    assert set(traces) == {"rollout", "train", "overall"}
    for pool, trace in traces.items():
        assert np.asarray(trace.y)[:-1] == pytest.approx(series[pool].to_numpy())
        assert np.asarray(trace.x)[:-1] == pytest.approx(series["t_start_s"].to_numpy())


def test_idle_bars_are_the_breakdown(medium_log):
    df, _ = medium_log
    table = idle_breakdown(df)
    fig = charts.plot_idle(df)
    drawn = {t.meta: np.asarray(t.y) for t in fig.data}
    assert set(drawn) == {c for c in table.columns if table[c].any()}
    for cause, values in drawn.items():
        assert values == pytest.approx(table[cause].to_numpy())
    names = {t.name for t in fig.data}
    assert "idle: waiting for rollouts" in names  # human names, not raw keys


def test_jobs_figure_counts_steps_once(medium_log):
    df, arrivals = medium_log
    jobs = job_table(df, arrivals).set_index("job")
    fig = charts.plot_jobs(df, arrivals)
    lines = {t.name: t for t in fig.data if t.type == "scatter"}
    assert set(lines) == set(jobs.index)
    for job, line in lines.items():
        assert line.y[-1] == jobs.loc[job, "steps"]
    (bars,) = [t for t in fig.data if t.type == "bar"]
    assert np.asarray(bars.x) == pytest.approx(jobs["jct_s"].to_numpy())
    assert np.asarray(bars.base) == pytest.approx(jobs["arrival_s"].to_numpy())


def test_staleness_bars_are_shares_of_the_counts(medium_log):
    df, _ = medium_log
    counts = staleness_counts(df)
    fig = charts.plot_staleness(df)
    assert sorted(t.meta for t in fig.data) == sorted(counts.columns)
    total = sum(np.asarray(t.x) for t in fig.data)
    assert total == pytest.approx(1.0)
    for trace in fig.data:
        assert list(trace.customdata) == counts[trace.meta].tolist()


def test_lanes_cover_busy_time_and_hover_names_the_work(medium_log):
    df, _ = medium_log
    fig = plot_timeline(df)
    bars = [t for t in fig.data if t.type == "bar"]
    assert bars, "8 devices are drawn as lanes"
    busy = {"generate", "train"}
    covered = sum(float(np.sum(t.x)) for t in bars if {row[2] for row in t.customdata} <= busy)
    # merged bars may bridge sub-pixel gaps; never less than the busy time
    assert covered >= utilization(df)["busy_s"].sum() * 0.999
    kinds = {row[2] for t in bars for row in t.customdata}
    assert kinds == {"generate", "train", "weight sync", "adapter load"}
    first = bars[0].customdata[0]
    assert first[0].startswith("job") and first[1].startswith("t")  # job, tenant
    assert "%{customdata[3]}" in bars[0].hovertemplate  # adapter version
    assert "duration" in bars[0].hovertemplate
    legend = {t.name for t in fig.data if t.showlegend}
    assert legend == set(df.loc[df["tenant"] != "", "tenant"])
    assert not any(getattr(t.marker.line, "width", 0) for t in bars)  # no black edges


def test_lane_segments_keep_every_row():
    df, _ = synthetic_log(n_jobs=3, n_rollout=2, steps=3, seed=2)
    seg = lane_segments(df)
    work = df[df["kind"].isin(["generate", "train", "sync", "adapter_load"])]
    assert seg["rows"].sum() == len(work)
    per_kind = seg.groupby("kind")["rows"].sum().to_dict()
    assert per_kind == work["kind"].value_counts().to_dict()


def test_many_devices_become_heatmaps_that_integrate_to_busy_seconds(wide_log):
    df, _ = wide_log
    fig = plot_timeline(df)
    heatmaps = [t for t in fig.data if t.type == "heatmap"]
    assert len(heatmaps) == 2 and not [t for t in fig.data if t.type == "bar"]
    pools, devices = heatmaps
    z = np.asarray(devices.z)
    x = np.asarray(devices.x)
    width = x[1] - x[0]
    u = utilization(df)
    assert list(devices.y) == u["device"].tolist()
    assert z.sum(axis=1) * width == pytest.approx(u["busy_s"].to_numpy(), rel=1e-9)
    for i, pool in enumerate(pools.y):
        rows = (u["pool"] == pool.removeprefix("pool ")).to_numpy()
        assert np.asarray(pools.z)[i] == pytest.approx(z[rows].mean(axis=0))
    # hover: the job that used the device most in the bin, blank where it was idle
    jobs = np.asarray(devices.customdata)[..., 0]
    assert ((jobs == "") == (z <= 1e-9)).mean() > 0.99


def test_more_devices_than_heatmap_rows_are_grouped_within_their_pools(wide_log, monkeypatch):
    """One row per device made a 65,000-device report 370 MB: past MAX_DEVICE_ROWS,
    consecutive devices of a pool share a row, with their mean busy fraction."""
    from marlaas.report.interactive import timeline

    df, _ = wide_log
    monkeypatch.setattr(timeline, "MAX_DEVICE_ROWS", 8)
    devices = [t for t in plot_timeline(df).data if t.type == "heatmap"][-1]
    u = utilization(df)  # 26 rollout engines, then 4 trainers: groups of 4, none across pools
    labels = list(devices.y)
    assert len(labels) == 8 and labels[0] == "rollout/0 .. rollout/3 (4)"
    assert labels[-2:] == ["rollout/24 .. rollout/25 (2)", "train/0 .. train/3 (4)"]
    z, width = np.asarray(devices.z), np.diff(np.asarray(devices.x))[0]
    sizes = np.array([int(label.rsplit("(", 1)[1][:-1]) for label in labels])
    assert (z.sum(axis=1) * width * sizes).sum() == pytest.approx(u["busy_s"].sum(), rel=1e-9)
    jobs = np.asarray(devices.customdata)[..., 0]
    assert ((jobs == "") == (z <= 1e-9)).mean() > 0.99  # the busiest device's job, if any


def test_main_job_is_the_only_job_on_a_device():
    df, _ = synthetic_log(n_jobs=1, n_rollout=1, steps=2, seed=1)
    devs, edges, busy = device_busy_fraction(df, bins=50)
    jobs = main_job(df, devs, edges)
    assert set(jobs[busy > 0]) == {"job0"}


def test_heatmap_with_one_pool(small_log):
    df, _ = small_log
    fig = plot_heatmap(df, bins=20)
    assert np.asarray(fig.data[-1].z).shape == (4, 20)


# ------------------------------------------------------------------ static (--static)


def test_static_utilization_plots_the_metric(medium_log):
    df, _ = medium_log
    fig = static_utilization(df)
    patches = {p.get_gid(): p for p in fig.axes[0].patches if p.get_gid()}
    assert set(patches) == {"util-rollout", "util-train", "util-overall"}
    u = utilization(df)
    for pool, devs in u.groupby("pool"):
        values, edges, _ = patches[f"util-{pool}"].get_data()
        assert np.sum(values * np.diff(edges)) * len(devs) == pytest.approx(devs["busy_s"].sum())


def test_static_idle_stacks_idle_rows(medium_log):
    df, _ = medium_log
    ax = static_idle(df).axes[0]
    pools = [t.get_text() for t in ax.get_xticklabels()]
    idle = df[df["kind"] == "idle"]
    expected = (idle["end_s"] - idle["start_s"]).groupby([idle["pool"], idle["outcome"]]).sum()
    drawn = {}
    for container in ax.containers:
        for pool, bar in zip(pools, container, strict=True):
            drawn[(pool, container.get_label())] = bar.get_height()
    assert {k: v for k, v in drawn.items() if v} == pytest.approx(expected.to_dict())


def test_static_gantt_lanes_or_heatmap(medium_log, wide_log):
    df, _ = medium_log
    ax = plot_gantt(df).axes[1]
    assert [t.get_text() for t in ax.get_yticklabels()] == device_table(df)["device"].tolist()
    gids = {c.get_gid() for c in ax.collections}
    assert {"gantt-generate", "gantt-train", "gantt-sync", "gantt-adapter_load"} <= gids
    covered = 0.0
    for c in ax.collections:
        if c.get_gid() in ("gantt-generate", "gantt-train"):
            for path in c.get_paths():
                covered += np.ptp(path.vertices[:, 0])
    assert covered >= utilization(df)["busy_s"].sum() * 0.99
    wide, _ = wide_log
    images = plot_gantt(wide).axes[1].images
    assert [i.get_gid() for i in images] == ["gantt-heatmap"]
    busy = device_busy_fraction(wide)[2]
    assert np.asarray(images[0].get_array()) == pytest.approx(busy)


def test_static_jobs_and_staleness(medium_log):
    df, arrivals = medium_log
    fig = static_jobs(df, arrivals)
    lines = {ln.get_gid(): ln for ln in fig.axes[0].lines}
    jobs = job_table(df, arrivals).set_index("job")
    for job, row in jobs.iterrows():
        assert lines[f"progress-{job}"].get_ydata()[-1] == row["steps"]
    fig = static_staleness(df)
    totals = np.zeros(len(staleness_counts(df)))
    for container in fig.axes[0].containers:
        totals += [b.get_width() for b in container]
    assert totals == pytest.approx(1.0)


def test_a_figure_whose_write_fails_midway_leaves_the_old_one_whole(tmp_path, monkeypatch):
    """``report --static`` wrote each figure's PNG and SVG in place: a write that failed
    midway (a full disk) left half an SVG where the old one was. Each is now written beside
    and renamed: the old file stays whole, nothing half-written is left, the error names the
    file."""
    import errno
    import io

    from matplotlib.figure import Figure

    from marlaas.report.style import save_figure

    fig = Figure()
    fig.add_subplot().plot([0, 1], [1, 0])
    save_figure(fig, tmp_path, "line")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    savefig = Figure.savefig

    def full_disk_on_svg(self, target, *args, **kwargs):
        if kwargs.get("format") != "svg":
            return savefig(self, target, *args, **kwargs)
        buf = io.BytesIO()
        savefig(self, buf, *args, **kwargs)
        with open(target, "wb") as handle:
            handle.write(buf.getvalue()[: len(buf.getvalue()) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk_on_svg)
    with pytest.raises(OSError) as err:
        save_figure(fig, tmp_path, "line")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert err.value.filename == str(tmp_path / "line.svg")
