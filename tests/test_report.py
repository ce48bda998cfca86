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

from marlaas.eventlog import EventLogError, write_event_log
from marlaas.metrics.jobs import train_ops
from marlaas.report import add_report_parser, run_report
from marlaas.report.build import FIGURES
from marlaas.report.load import load_runs
from marlaas.report.trace import trace_events, write_trace
from tests.system_tools import chromium, needs_chromium

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report(two_runs, tmp_path_factory):
    """report.html path of the two synthetic runs."""
    out = tmp_path_factory.mktemp("report")
    return run_report(list(two_runs), out)


# ------------------------------------------------------------------ report files


def _page_text(report: Path) -> str:
    """report.html without the inlined Plotly bundle."""
    text = report.read_text()
    return re.sub(r'<script type="text/javascript">.*?</script>', "", text, count=1, flags=re.S)


def _figures(report: Path) -> dict[str, dict]:
    """Every embedded figure's JSON, by its div id."""
    text = report.read_text()
    found = re.findall(r'<script type="application/json" id="([^"]+)-data">(.*?)</script>', text)
    return {div: json.loads(body) for div, body in found}


def _array(value) -> np.ndarray:
    """A Plotly JSON array: a list, or a typed array ``{"dtype", "bdata"}`` (base64)."""
    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
    return np.asarray(value)


def _table(page: str, caption: str) -> pd.DataFrame:
    """The HTML table under ``<h3>caption</h3>`` as strings (no lxml needed)."""
    body = page.split(f"<h3>{caption}</h3>", 1)[1].split("</table>", 1)[0]
    rows = [
        [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r)]
        for r in re.findall(r"<tr[^>]*>(.*?)</tr>", body, flags=re.S)
    ]
    return pd.DataFrame(rows[1:], columns=rows[0])


def test_report_has_every_section_and_figure(report, two_runs):
    text = report.read_text()
    labels = ["fifo", "fair"]  # the policies of the two runs
    ids = set(re.findall(r'<section id="([^"]+)"', text))
    expected = {"summary", "comparison", *FIGURES}  # one section per figure, both runs in it
    assert ids == expected
    figures = _figures(report)
    assert set(figures) == {f"fig-{i}" for i in expected - {"summary"}}
    assert all(fig["data"] and "layout" in fig for fig in figures.values())
    assert text.count("Plotly.newPlot") == 1 and "window.Plotly" not in _page_text(report)
    assert len(text) > 3_000_000  # the bundle is inlined...
    assert not re.search(r"<script[^>]+src=", text)  # ...and nothing is fetched
    page = _page_text(report)
    assert "makespan [s]" in page and "fair vs fifo" in page
    assert "idle: waiting for rollouts" in page and "max_staleness" in page  # explained
    visible = re.sub(r"<script.*?</script>", "", page, flags=re.S)
    assert "GPU" not in visible and "makespan_s" not in visible, re.findall(".{80}GPU.{40}", page)
    assert not re.search(r"\d\.000<", page), "counts printed with .000"
    out = report.parent
    assert not (out / "figures").exists(), "static figures are only made on demand"
    assert not list(out.glob(".*tmp")), "temporary files left behind"
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == set(labels)


def test_static_figures_on_demand(two_runs, tmp_path):
    report = run_report(list(two_runs), tmp_path / "r", static=True)
    out = report.parent / "figures"
    for name in [f"{f}-{label}" for f in FIGURES for label in ("fifo", "fair")] + ["comparison"]:
        assert (out / f"{name}.png").read_bytes().startswith(PNG_MAGIC), name
        assert "<svg" in (out / f"{name}.svg").read_text()[:2000]
    assert "figures/timeline-fifo.png" in report.read_text()


def test_sequential_steps_are_counted_once_in_the_report(tmp_path):
    from marlaas.runs import write_run
    from marlaas.sim.run import simulate_run
    from marlaas.workload_file import load_workload

    small = Path(__file__).resolve().parent.parent / "traces" / "small.yaml"
    workload = load_workload(small).with_overrides(
        {"jobs.*.rl.steps": 2, "jobs.*.rl.prompts_per_step": 2, "scheduling.preset": "sequential"}
    )
    events, summary = simulate_run(workload, "fifo", 0)
    run = write_run(tmp_path / "seq", events, summary)
    report = run_report([run], tmp_path / "out")
    jobs = _table(_page_text(report), "Jobs")
    assert jobs["training steps"].tolist() == ["2"] * len(workload.jobs)
    figure = _figures(report)["fig-jobs-sequential"]
    lines = [_array(t["y"]) for t in figure["data"] if t["type"] == "scatter"]
    assert {int(y[-1]) for y in lines} == {2}


def test_trace_json(report, two_runs):
    trace = json.loads((report.parent / "trace.json").read_text())
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert {"fifo: rollout", "fifo: train", "fifo: env", "fair: train"} <= names
    runs = load_runs(list(two_runs))
    assert len(slices) == sum(len(r.events) for r in runs)
    train_us = sum(e["dur"] for e in slices if e["cat"] == "train")
    train_s = sum((r.events.end_s - r.events.start_s)[r.events.kind == "train"].sum() for r in runs)
    assert train_us == pytest.approx(train_s * 1e6, rel=1e-6)
    # tenants can be told apart by name
    train = [e for e in slices if e["cat"] == "train"]
    assert all(e["name"] == f"train {e['args']['job']} ({e['args']['tenant']})" for e in train)
    # slices on one thread never overlap (Perfetto needs nesting)
    frame = pd.DataFrame(slices).sort_values(["pid", "tid", "ts"], kind="stable")
    frame["end"] = frame["ts"] + frame["dur"]
    prev_end = frame.groupby(["pid", "tid"])["end"].shift()
    overlapping = frame[frame["ts"] < prev_end - 1e-3]
    assert overlapping.empty, overlapping.head()


def test_trace_flows_link_generation_training_and_sync(report, two_runs):
    events = json.loads((report.parent / "trace.json").read_text())["traceEvents"]
    slices = pd.DataFrame([e for e in events if e["ph"] == "X"])
    slices["job"] = slices["args"].map(lambda a: a.get("job", ""))
    slices["step"] = slices["args"].map(lambda a: a.get("step", -1))
    flows = pd.DataFrame([e for e in events if e["ph"] in ("s", "t", "f")])
    steps = sum(len(train_ops(r.events)) for r in load_runs(list(two_runs)))
    assert flows["id"].nunique() == steps  # one flow per training step
    for _, flow in flows.groupby("id"):
        assert flow["ph"].tolist() == ["s", "t", "f"]
        assert flow["ts"].is_monotonic_increasing
        for (_, point), cat in zip(flow.iterrows(), ["generate", "train", "sync"], strict=True):
            # each point lies inside a slice of its kind on its thread, of the same step
            job, step = point["name"].split(" of ")[1], int(point["name"].split()[1])
            inside = slices[
                (slices["pid"] == point["pid"]) & (slices["tid"] == point["tid"])
                & (slices["ts"] <= point["ts"]) & (slices["ts"] + slices["dur"] >= point["ts"])
                & (slices["cat"] == cat) & (slices["job"] == job) & (slices["step"] == step)
            ]  # fmt: skip
            assert len(inside) >= 1, (point.to_dict(), cat)
    assert flows.loc[flows["ph"] == "f", "bp"].eq("e").all()


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
    assert 'id="comparison"' not in text and 'id="timeline-fifo"' in text


def test_cli_parser(two_runs, tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="marlaas")
    add_report_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", str(two_runs[0]), "--out", str(tmp_path / "o")])
    assert args.static is False
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


def test_a_report_given_as_a_run_is_named_a_report(report, two_runs, tmp_path):
    with pytest.raises(EventLogError) as err:
        run_report([two_runs[0], report.parent], tmp_path / "out")
    assert str(err.value) == (  # was "REPORT/events.parquet: no such event log"
        f"{report.parent}: is a report, not a run folder; expected a run folder with "
        "events.parquet (marlaas simulate, train and replay write one)"
    )
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ browser

PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message || e.type)), true);
window.addEventListener('unhandledrejection', e => window.__errors.push(String(e.reason)));
const consoleError = console.error;
console.error = (...args) => { window.__errors.push(args.join(' ')); consoleError(...args); };
window.addEventListener('load', () => setTimeout(() => {
  const plots = Array.from(document.querySelectorAll('div.plot'));
  const probe = document.createElement('div');
  probe.id = 'probe';
  probe.dataset.plots = plots.length;
  probe.dataset.drawn = plots.filter(
    p => p.classList.contains('js-plotly-plot') && p.querySelector('svg.main-svg')).length;
  probe.dataset.bars = document.querySelectorAll('#fig-timeline g.point').length;
  probe.dataset.done = document.body.dataset.plotsDone || '0';
  probe.dataset.failed = document.body.dataset.plotsFailed || '-1';
  probe.dataset.errors = window.__errors.length;
  probe.textContent = window.__errors.join(' | ');
  document.body.appendChild(probe);
}, 500));
</script>"""


@needs_chromium
def test_report_renders_in_headless_chromium(report, tmp_path):
    browser = chromium()
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
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=20000",
    ]
    run = subprocess.run(
        [browser, *flags, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    probe = re.search(r'<div id="probe"([^>]*)>(.*?)</div>', run.stdout, flags=re.S)
    assert probe, f"probe missing from DOM: {run.stdout[-500:]}"
    attrs = dict(re.findall(r'data-(\w+)="(-?\d+)"', probe.group(1)))
    assert attrs["errors"] == "0", probe.group(2)
    assert attrs["done"] == "1" and attrs["failed"] == "0"
    assert int(attrs["plots"]) == len(re.findall(r'<div class="plot"', report.read_text()))
    assert attrs["drawn"] == attrs["plots"]  # every figure was drawn by Plotly
    timeline = _figures(report)["fig-timeline"]["data"]
    n_bars = sum(len(_array(t["x"])) for t in timeline if t["type"] == "bar")
    assert int(attrs["bars"]) == n_bars > 50  # every bar of the timeline is in the DOM
    console = [ln for ln in run.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not [ln for ln in console if "rror" in ln or "Uncaught" in ln], console
    shot = tmp_path / "shot.png"
    subprocess.run(
        [browser, *flags, "--window-size=1400,2000", f"--screenshot={shot}", report.as_uri()],
        capture_output=True,
        timeout=180,
        check=True,
    )
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.std() > 0.01, "screenshot is blank"


def test_runs_whose_labels_slug_alike_get_ids_and_figures_of_their_own(two_runs, tmp_path):
    """``a b`` and ``a-b`` (folder names as labels) shared element ids and --static files."""
    from marlaas.report.labels import unique_slugs

    assert unique_slugs(["a b", "a-b", "a-b-2", "x"]) == ["a-b", "a-b-2", "a-b-2-2", "x"]
    runs = []
    for name, source in zip(("a b", "a-b"), two_runs, strict=True):
        (tmp_path / name).mkdir()
        shutil.copy(Path(source) / "events.parquet", tmp_path / name / "events.parquet")
        runs.append(tmp_path / name)
    loaded = load_runs(runs)
    assert [r.slug for r in loaded] == ["a-b", "a-b-2"]
    page = run_report(runs, tmp_path / "rep").read_text()
    ids = re.findall(r'<section id="([^"]+)"', page)
    assert len(ids) == len(set(ids)) and "timeline" in ids
    single = run_report([runs[1]], tmp_path / "one").read_text()
    assert 'id="timeline-a-b"' in single
