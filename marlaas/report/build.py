"""``marlaas report``: report.html, trace.json and summaries for one or more runs, or a sweep."""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from marlaas.atomic import write_durably
from marlaas.eventlog import EventLogError
from marlaas.metrics.summary import summarize
from marlaas.out_folder import claim
from marlaas.output.errors import OutputError
from marlaas.report import fmt
from marlaas.report.compare import difference_table
from marlaas.report.html import RunLine, Section, render_report
from marlaas.report.interactive.compare import plot_comparison
from marlaas.report.labels import base_name, device_noun
from marlaas.report.load import Run, load_runs
from marlaas.report.sections import FIGURES, compared_sections, run_sections
from marlaas.report.sweep_page import is_sweep_folder, write_sweep_report
from marlaas.report.trace import write_trace
from marlaas.run_files import check_distinct

REPORT_FILE = "report.html"
TRACE_FILE = "trace.json"
FIGURES_DIR = "figures"
__all__ = ["FIGURES", "REPORT_FILE", "TRACE_FILE", "run_report"]


def run_report(run_dirs: Sequence[str | Path], out_dir: str | Path, static: bool = False) -> Path:
    """Write the report of one or more runs, or of one sweep folder, to ``out_dir``; returns
    the path of report.html.

    ``out_dir`` must be empty or an earlier report (see :mod:`marlaas.out_folder`); the folder
    is built aside and replaces it whole (no stale files from an earlier report stay).
    ``out_dir`` gets ``report.html`` (self-contained, interactive), ``trace.json``
    (Chrome/Perfetto, all runs), ``summary.json`` (:func:`marlaas.metrics.summary.summarize`
    per run) and, with ``static``, ``figures/*.png|svg``. A sweep folder (with sweep.csv)
    gets the sweep's page instead (see :mod:`marlaas.report.sweep_page`). Raises
    :class:`marlaas.eventlog.EventLogError` when a run is missing, empty, truncated or foreign.
    """
    if not run_dirs:
        raise ValueError("runs: no run folder given (a report needs one run folder at least)")
    sweep = any(is_sweep_folder(p) for p in run_dirs)
    if sweep and len(run_dirs) > 1:
        raise EventLogError("a sweep folder is reported on its own: marlaas report SWEEP_DIR")
    check_distinct(run_dirs)
    with claim(out_dir, "report") as out:  # checked and locked before any work
        if sweep:
            with out.staged() as staging:
                write_sweep_report(Path(run_dirs[0]), staging / REPORT_FILE)
        else:
            runs = load_runs(list(run_dirs))
            with out.staged() as staging:
                _write_report(runs, staging, static)
    return Path(out_dir) / REPORT_FILE


def _write_report(runs: list[Run], out: Path, static: bool) -> Path:
    summaries = {
        r.label: summarize(r.events, r.arrivals, r.weights, (), shared_processor=r.shared_processor)
        for r in runs
    }
    pool, futures = None, {}
    if static:
        from marlaas.report.static import start_exports

        pool, futures = start_exports(runs, summaries, out / FIGURES_DIR)
    try:
        sections = [_overview(runs, summaries)]
        if len(runs) > 1:
            kinds = {r.label: r.kind for r in runs}
            sections.append(
                Section(
                    "comparison",
                    "Comparison of runs",
                    figure=plot_comparison(summaries, kinds),
                    notes=["Relative differences against the first run are in the summary."],
                )
            )
        with tqdm(total=len(runs) + 1, desc="marlaas report", unit="run", disable=None) as bar:
            if len(runs) > 1:  # one section per figure, all runs in it
                bar.set_postfix_str("figures")
                sections += compared_sections(runs, summaries, {})
                bar.update(len(runs))
            else:
                bar.set_postfix_str(runs[0].label)
                sections += run_sections(runs[0], summaries[runs[0].label], {})
                bar.update()
            bar.set_postfix_str("trace")
            write_trace(runs, out / TRACE_FILE)
            bar.update()
        for section in sections:
            names = [section.id] if section.id in futures else _static_ids(section, runs)
            section.static = [f for n in names if n in futures for f in _drawn(futures[n])]
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    write_durably(out / "summary.json", json.dumps(summaries, indent=2))
    title = "MARLaaS report: " + ", ".join(r.label for r in runs)
    lines = [RunLine(r.label, r.kind, str(r.path)) for r in runs]
    return write_durably(out / REPORT_FILE, render_report(title, sections, lines))


def _drawn(future: Future) -> list[str]:
    """The file names of a static figure drawn in a worker process; an OutputError when the
    worker died (the workers of a script import it, as multiprocessing's do: a script that
    calls marlaas.report(static=True) unguarded ran again in each, and stopped them)."""
    try:
        return future.result()
    except BrokenProcessPool:
        raise OutputError(
            "static figures: a worker process stopped before it drew its figure (killed, out "
            "of memory, or a script calling marlaas.report(static=True) outside "
            "if __name__ == '__main__': the workers import the script, and ran it again)"
        ) from None


def _static_ids(section: Section, runs: list[Run]) -> list[str]:
    """The ids of the static figures of a section comparing ``runs`` (one per run)."""
    return [f"{section.id}-{r.slug}" for r in runs] if section.id in FIGURES else []


def _overview(runs: list[Run], summaries: dict[str, dict]) -> Section:
    """Who the runs are, and their headline metrics side by side."""
    info = pd.DataFrame(
        {
            "run": [r.label for r in runs],
            "kind": [r.kind for r in runs],
            "workload": [str(r.meta.get("workload", "-")) for r in runs],
            "preset / policy": [base_name(r.meta, "-") for r in runs],
            "seed": [str(r.meta.get("seed", "-")) for r in runs],
            "devices": [fmt.count(summaries[r.label]["n_devices"]) for r in runs],
            "jobs": [fmt.count(summaries[r.label]["n_jobs"]) for r in runs],
            "event-log rows": [fmt.count(len(r.events)) for r in runs],
        }
    )
    devices = {device_noun(r.meta) for r in runs}
    noun = devices.pop() if len(devices) == 1 else "device"
    notes = []
    if len(runs) > 1:
        notes.append(
            f"The columns '<run> vs {runs[0].label}' are relative differences against the "
            f"first run, {runs[0].label}: (run - {runs[0].label}) / {runs[0].label}."
        )
    kinds = {r.kind for r in runs}
    if len(kinds) > 1:
        notes.append(
            "These runs are of different kinds (" + ", ".join(sorted(kinds)) + "): the "
            "differences show how far they disagree."
        )
    table = difference_table(summaries, noun)
    return Section(
        "summary",
        "Summary",
        tables=[("Runs", info), ("Headline metrics", table.reset_index())],
        notes=notes,
    )
