"""Static copies (PNG and SVG, matplotlib) of a report's figures, on demand and in parallel.

``marlaas report --static`` asks for them. Each (run, figure) is drawn by a worker process
that reads the run itself, while the main process builds report.html. Workers come from a
fork server that has imported this module once (not a plain fork of a process that runs
Arrow threads).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from pathlib import Path

from marlaas.report.compare import plot_comparison
from marlaas.report.gantt import plot_gantt
from marlaas.report.idle import plot_idle
from marlaas.report.jobs import plot_jobs
from marlaas.report.load import Run, load_run
from marlaas.report.staleness import plot_staleness
from marlaas.report.style import save_figure
from marlaas.report.utilization import plot_utilization

DRAW = {
    "timeline": lambda run: plot_gantt(run.events, f"Timeline: {run.title}"),
    "utilization": lambda run: plot_utilization(run.events, f"Utilization: {run.title}"),
    "jobs": lambda run: plot_jobs(run.events, run.arrivals, f"Jobs: {run.title}"),
    "idle": lambda run: plot_idle(run.events, f"Idle time by cause: {run.title}"),
    "staleness": lambda run: plot_staleness(run.events, f"Staleness: {run.title}"),
}
"""Static figure of each per-run section."""


def draw_run_figure(path: Path, label: str, key: str, name: str, fig_dir: Path) -> list[str]:
    """Draw figure ``name`` of the run at ``path`` (named ``label``, its slug ``key``) into
    ``fig_dir``; returns the file names."""
    run = load_run(path, label=label, key=key)
    saved = save_figure(DRAW[name](run), fig_dir, f"{name}-{run.slug}")
    return [saved.png.name, saved.svg.name]


def draw_comparison(summaries: dict[str, dict], fig_dir: Path) -> list[str]:
    """Draw the comparison figure of several runs; returns the file names."""
    saved = save_figure(plot_comparison(summaries), fig_dir, "comparison")
    return [saved.png.name, saved.svg.name]


def start_exports(
    runs: list[Run], summaries: dict[str, dict], fig_dir: Path, workers: int | None = None
) -> tuple[Executor, dict[str, Future]]:
    """Start drawing every static figure in worker processes.

    Returns the pool and ``{section id: future of its file names}``; the caller waits for the
    futures and shuts the pool down.
    """
    fig_dir.mkdir(parents=True, exist_ok=True)
    jobs = len(runs) * len(DRAW) + (len(runs) > 1)
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        context.set_forkserver_preload([__name__])
    n = max(1, min(workers or os.cpu_count() or 1, jobs))
    pool = ProcessPoolExecutor(max_workers=n, mp_context=context)
    futures = {
        f"{name}-{run.slug}": pool.submit(
            draw_run_figure, run.path, run.label, run.slug, name, fig_dir
        )
        for run in runs
        for name in DRAW
    }
    if len(runs) > 1:
        futures["comparison"] = pool.submit(draw_comparison, summaries, fig_dir)
    return pool, futures
