"""Tests of marlaas.report: plotted data, report.html, trace.json, errors, headless Chromium."""

from __future__ import annotations

import argparse
import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from marlaas import metrics
from marlaas.eventlog import EventLogError, write_event_log
from marlaas.report import add_report_parser, run_report
from marlaas.report.build import FIGURES
from marlaas.report.gantt import plot_gantt
from marlaas.report.idle import plot_idle
from marlaas.report.jobs import plot_jobs
from marlaas.report.load import load_runs
from marlaas.report.staleness import plot_staleness
from marlaas.report.trace import trace_events, write_trace
from marlaas.report.utilization import plot_utilization

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report(two_runs, tmp_path_factory):
    """report.html path of the two synthetic runs."""
    out = tmp_path_factory.mktemp("report")
    return run_report(list(two_runs), out)


# ------------------------------------------------------------------ plotted data


def test_utilization_figure_plots_the_metric(medium_log):
    df, _ = medium_log
    fig = plot_utilization(df)
    patches = {p.get_gid(): p for p in fig.axes[0].patches if p.get_gid()}
    assert set(patches) == {"util-rollout", "util-train", "util-overall"}
    u = metrics.utilization(df)
    for pool, devs in u.groupby("pool"):
        values, edges, _ = patches[f"util-{pool}"].get_data()
        assert np.sum(values * np.diff(edges)) * len(devs) == pytest.approx(devs["busy_s"].sum())
    values, edges, _ = patches["util-overall"].get_data()
    assert np.sum(values * np.diff(edges)) * len(u) == pytest.approx(u["busy_s"].sum())


def test_idle_figure_stacks_idle_rows(medium_log):
    df, _ = medium_log
    ax = plot_idle(df).axes[0]
    pools = [t.get_text() for t in ax.get_xticklabels()]
    idle = df[df["kind"] == "idle"]
    expected = (idle["end_s"] - idle["start_s"]).groupby([idle["pool"], idle["outcome"]]).sum()
    drawn = {}
    for container in ax.containers:
        for pool, bar in zip(pools, container, strict=True):
            drawn[(pool, container.get_label())] = bar.get_height()
    assert {k: v for k, v in drawn.items() if v} == pytest.approx(expected.to_dict())


def test_gantt_has_a_lane_per_device_and_covers_busy_time(medium_log):
    df, _ = medium_log
    fig = plot_gantt(df)
    ax = fig.axes[1]
    devices = metrics.device_table(df)["device"].tolist()
    assert [t.get_text() for t in ax.get_yticklabels()] == devices
    gids = {c.get_gid() for c in ax.collections}
    assert {"gantt-generate", "gantt-train", "gantt-sync", "gantt-adapter_load"} <= gids
    # drawn generate/train bars cover at least the busy time (they are merged and widened)
    covered = 0.0
    for c in ax.collections:
        if c.get_gid() in ("gantt-generate", "gantt-train"):
            for path in c.get_paths():
                xs = path.vertices[:, 0]
                covered += xs.max() - xs.min()
    assert covered >= metrics.utilization(df)["busy_s"].sum() * 0.99
    # env lane: mean concurrency integrates to env seconds
    env = df[df["kind"] == "env"]
    assert fig.axes[0].collections, "env lane is empty"
    env_s = (env["end_s"] - env["start_s"]).sum()
    assert env_s > 0


def test_jobs_and_staleness_figures(medium_log):
    df, arrivals = medium_log
    fig = plot_jobs(df, arrivals)
    lines = {ln.get_gid(): ln for ln in fig.axes[0].lines}
    jobs = metrics.job_table(df, arrivals).set_index("job")
    for job, row in jobs.iterrows():
        assert lines[f"progress-{job}"].get_ydata()[-1] == row["steps"]
    bars = fig.axes[1].containers[0]
    assert [b.get_width() for b in bars] == pytest.approx(jobs["jct_s"].tolist())
    fig = plot_staleness(df)
    counts = metrics.staleness_counts(df)
    totals = np.zeros(len(counts))
    for container in fig.axes[0].containers:
        totals += [b.get_width() for b in container]
    assert totals == pytest.approx(1.0)


# ------------------------------------------------------------------ report files


def test_report_has_every_section_and_image(report, two_runs):
    text = report.read_text()
    labels = [Path(p).name for p in two_runs]
    ids = set(re.findall(r'<section id="([^"]+)"', text))
    expected = {"summary", "comparison"} | {f"{f}-{label}" for f in FIGURES for label in labels}
    assert ids == expected
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert len(images) == len(FIGURES) * len(labels) + 1
    assert all(base64.b64decode(img).startswith(PNG_MAGIC) for img in images)
    assert "<table" in text and "makespan_s" in text
    out = report.parent
    for f in FIGURES:
        for label in labels:
            assert (out / "figures" / f"{f}-{label}.png").read_bytes().startswith(PNG_MAGIC)
            assert "<svg" in (out / "figures" / f"{f}-{label}.svg").read_text()[:2000]
    assert not list(out.glob(".*tmp")), "temporary files left behind"
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == set(labels)


def test_trace_json(report, two_runs):
    trace = json.loads((report.parent / "trace.json").read_text())
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert {"fifo: rollout", "fifo: train", "fifo: env", "fair: train"} <= names
    runs = load_runs(list(two_runs))
    assert len(slices) == sum(len(r.events) for r in runs)
    train_us = sum(e["dur"] for e in slices if e["name"] == "train")
    train_s = sum((r.events.end_s - r.events.start_s)[r.events.kind == "train"].sum() for r in runs)
    assert train_us == pytest.approx(train_s * 1e6, rel=1e-6)
    # slices on one thread never overlap (Perfetto needs nesting)
    frame = pd.DataFrame(slices).sort_values(["pid", "tid", "ts"], kind="stable")
    frame["end"] = frame["ts"] + frame["dur"]
    prev_end = frame.groupby(["pid", "tid"])["end"].shift()
    overlapping = frame[frame["ts"] < prev_end - 1e-3]
    assert overlapping.empty, overlapping.head()


def test_trace_downsamples_huge_logs(two_runs, tmp_path):
    runs = load_runs([two_runs[0]])
    events = trace_events(runs, max_events=100)
    slices = [e for e in events if e["ph"] == "X"]
    assert 0 < len(slices) <= 100
    assert any("merged" in e["args"]["name"] for e in events if e["ph"] == "M")
    path = write_trace(runs, tmp_path / "t.json", max_events=100)
    assert json.loads(path.read_text())["traceEvents"]


def test_single_run_report_has_no_comparison(two_runs, tmp_path):
    text = run_report([two_runs[0]], tmp_path).read_text()
    assert 'id="comparison"' not in text and 'id="gantt-fifo"' in text


def test_cli_parser(two_runs, tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="marlaas")
    add_report_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", str(two_runs[0]), "--out", str(tmp_path / "o")])
    assert args.func(args) == 0
    assert capsys.readouterr().out.strip().endswith("report.html")


# ------------------------------------------------------------------ errors


def _bad_runs(tmp_path: Path, two_runs) -> dict[str, Path]:
    runs = {}
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "events.parquet").write_bytes(b"")
    runs["empty"] = empty
    trunc = tmp_path / "truncated"
    trunc.mkdir()
    data = (Path(two_runs[0]) / "events.parquet").read_bytes()
    (trunc / "events.parquet").write_bytes(data[: len(data) // 2])
    runs["truncated"] = trunc
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), foreign / "events.parquet")
    runs["foreign"] = foreign
    text = tmp_path / "text"
    text.mkdir()
    (text / "events.parquet").write_text("kind,start_s\ngenerate,0\n")
    runs["text"] = text
    no_rows = tmp_path / "no_rows"
    write_event_log(
        pd.read_parquet(Path(two_runs[0]) / "events.parquet").iloc[:0], no_rows / "events.parquet"
    )
    runs["no_rows"] = no_rows
    bad_kind = tmp_path / "bad_kind"
    df = pd.read_parquet(Path(two_runs[0]) / "events.parquet")
    df.loc[0, "kind"] = "dance"
    write_event_log(df, bad_kind / "events.parquet")
    runs["bad_kind"] = bad_kind
    bad_summary = tmp_path / "bad_summary"
    shutil.copytree(two_runs[0], bad_summary)
    (bad_summary / "summary.json").write_text("{not json")
    runs["bad_summary"] = bad_summary
    runs["missing"] = tmp_path / "missing"
    return runs


@pytest.mark.parametrize(
    "case, message",
    [
        ("empty", "empty"),
        ("truncated", "not a"),
        ("foreign", "missing columns"),
        ("text", "not a"),
        ("no_rows", "no rows"),
        ("bad_kind", "unknown kinds"),
        ("bad_summary", "summary.json"),
        ("missing", "no such"),
    ],
)
def test_bad_runs_raise_event_log_error(case, message, two_runs, tmp_path):
    run = _bad_runs(tmp_path, two_runs)[case]
    out = tmp_path / "out"
    with pytest.raises(EventLogError, match=message) as err:
        run_report([two_runs[1], run], out)
    assert str(run) in str(err.value)
    assert not (out / "report.html").exists()


# ------------------------------------------------------------------ browser

CHROMIUM = next(
    (p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()), None
) or shutil.which("chromium")

PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message || e.type)), true);
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  const probe = document.createElement('div');
  probe.id = 'probe';
  probe.dataset.images = imgs.length;
  probe.dataset.loaded = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  probe.dataset.errors = window.__errors.length;
  document.body.appendChild(probe);
});
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(report, tmp_path):
    page = tmp_path / "page.html"
    page.write_text(report.read_text().replace("<head>", "<head>" + PROBE, 1))
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=10000",
    ]
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    probe = re.search(r'<div id="probe"([^>]*)>', dom)
    assert probe, f"probe missing from DOM: {dom[-500:]}"
    attrs = dict(re.findall(r'data-(\w+)="(\d+)"', probe.group(1)))
    assert int(attrs["images"]) == len(re.findall(r"<img ", report.read_text()))
    assert attrs["loaded"] == attrs["images"]
    assert attrs["errors"] == "0"
    shot = tmp_path / "shot.png"
    subprocess.run(
        [CHROMIUM, *flags, "--window-size=1400,2000", f"--screenshot={shot}", report.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.std() > 0.01, "screenshot is blank"
