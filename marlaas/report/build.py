"""``marlaas report``: figures, report.html, trace.json and summaries for one or more runs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from marlaas import metrics
from marlaas.report.compare import comparison_table, plot_comparison
from marlaas.report.gantt import plot_gantt
from marlaas.report.html import Section, render_report, write_atomic
from marlaas.report.idle import plot_idle
from marlaas.report.jobs import plot_jobs
from marlaas.report.load import Run, load_runs
from marlaas.report.staleness import plot_staleness
from marlaas.report.style import save_figure
from marlaas.report.trace import write_trace
from marlaas.report.utilization import plot_utilization
from marlaas.runs import staged_folder

REPORT_FILE = "report.html"
TRACE_FILE = "trace.json"
FIGURES_DIR = "figures"
FIGURES = ("gantt", "utilization", "jobs", "idle", "staleness")
"""Figure families drawn for every run; section ids are ``<figure>-<run label>``."""


def _summary_table(summaries: dict[str, dict]) -> pd.DataFrame:
    """Metric (rows) x run (columns), nested dicts flattened with dots."""
    flat = {label: pd.json_normalize(s, sep=".").iloc[0] for label, s in summaries.items()}
    return pd.DataFrame(flat)


def _run_sections(run: Run, summary: dict, fig_dir: Path, progress: tqdm) -> list[Section]:
    df, title = run.events, run.title
    figures = {
        "gantt": lambda: plot_gantt(df, f"Timeline: {title}"),
        "utilization": lambda: plot_utilization(df, f"Utilization over time: {title}"),
        "jobs": lambda: plot_jobs(df, run.arrivals, f"Jobs: {title}"),
        "idle": lambda: plot_idle(df, f"Idle time by cause: {title}"),
        "staleness": lambda: plot_staleness(df, f"Staleness: {title}"),
    }
    tables = {
        "utilization": [("Utilization per device", metrics.utilization(df))],
        "jobs": [("Jobs", metrics.job_table(df, run.arrivals))],
        "idle": [("Idle device-seconds [s] by pool and cause", metrics.idle_breakdown(df))],
        "staleness": [("Staleness per job [versions]", metrics.staleness_table(df))],
    }
    notes = {
        "gantt": [
            "Lanes are devices; colour = tenant; faint = generate, solid = train, "
            "black-edged = sync, short black-edged bar = adapter_load. Top: mean number "
            "of concurrent environment steps per tenant."
        ],
        "utilization": [
            f"Mean utilization {summary['utilization']:.1%} over "
            f"{summary['n_devices']} devices, makespan "
            f"{summary['makespan_s']:.1f} s."
        ],
    }
    sections = []
    for name, draw in figures.items():
        progress.set_postfix_str(f"{run.label}: {name}")
        saved = save_figure(draw(), fig_dir, f"{name}-{run.label}")
        sections.append(
            Section(
                id=f"{name}-{run.label}",
                title=f"{name.capitalize()}: {title}",
                figure=saved,
                tables=tables.get(name, []),
                notes=notes.get(name, []),
            )
        )
        progress.update()
    return sections


def run_report(run_dirs: Sequence[str | Path], out_dir: str | Path) -> Path:
    """Write the report of one or more runs to ``out_dir``; returns the path of report.html.

    The folder is built aside and replaces ``out_dir`` whole (no stale figures from an
    earlier report stay). ``out_dir`` gets ``report.html`` (self-contained), ``trace.json``
    (Chrome/Perfetto, all runs), ``summary.json`` (metrics.summarize per run) and
    ``figures/*.png|svg``. Raises
    :class:`marlaas.eventlog.EventLogError` when a run is missing, empty, truncated or foreign.
    """
    if not run_dirs:
        raise ValueError("run_report needs at least one run folder")
    runs = load_runs(list(run_dirs))
    with staged_folder(out_dir, REPORT_FILE) as staging:
        _write_report(runs, staging)
    return Path(out_dir) / REPORT_FILE


def _write_report(runs: list[Run], out: Path) -> Path:
    fig_dir = out / FIGURES_DIR
    summaries = {r.label: metrics.summarize(r.events, r.arrivals, r.weights) for r in runs}
    total = len(runs) * len(FIGURES) + (len(runs) > 1) + 1
    sections = [
        Section(
            "summary",
            "Summary",
            tables=[("Headline metrics", _summary_table(summaries))],
            notes=[f"{r.label}: {r.path}" for r in runs],
        )
    ]
    with tqdm(total=total, desc="marlaas report", unit="fig", disable=None) as progress:
        for run in runs:
            sections += _run_sections(run, summaries[run.label], fig_dir, progress)
        if len(runs) > 1:
            saved = save_figure(plot_comparison(summaries), fig_dir, "comparison")
            sections.append(
                Section(
                    "comparison",
                    "Comparison of runs",
                    figure=saved,
                    tables=[("Per run", comparison_table(summaries))],
                )
            )
            progress.update()
        progress.set_postfix_str("trace")
        write_trace(runs, out / TRACE_FILE)
        progress.update()
    write_atomic(out / "summary.json", json.dumps(summaries, indent=2))
    title = "MARLaaS report: " + ", ".join(r.label for r in runs)
    return write_atomic(out / REPORT_FILE, render_report(title, sections))
