"""The sections of report.html: timeline, utilization, jobs, idle time, staleness, and for a
real run its rewards and evaluation. Each pairs an interactive figure with tables formatted
for people and explanations of what it shows.

One run gets its own sections (:func:`run_sections`). Several runs are compared in one section
per figure (:func:`compared_sections`): one figure of all runs (time figures stacked on one
shared time axis, the others side by side), then each run's tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pandas as pd
import plotly.graph_objects as go

from marlaas.metrics.idle import idle_breakdown
from marlaas.metrics.jobs import job_table
from marlaas.metrics.staleness import staleness_table
from marlaas.metrics.utilization import utilization
from marlaas.report import fmt
from marlaas.report.html import Section
from marlaas.report.interactive import charts, real
from marlaas.report.interactive.timeline import LANE_LIMIT, plot_timeline, plot_timelines
from marlaas.report.labels import device_noun
from marlaas.report.load import Run
from marlaas.report.names import IDLE_CAUSES, WORK_KINDS, idle_name

FIGURES = ("timeline", "utilization", "jobs", "idle", "staleness")
"""Sections of every run; their ids are ``<figure>-<run slug>`` (one run) or ``<figure>``
(several runs compared)."""
FIGURE: dict[str, Callable[[Run], go.Figure]] = {
    "timeline": lambda r: plot_timeline(r.events, r.label),
    "utilization": lambda r: charts.plot_utilization(r.events, r.label, device_noun(r.meta)),
    "jobs": lambda r: charts.plot_jobs(r.events, r.arrivals, r.label),
    "idle": lambda r: charts.plot_idle(r.events, r.label, device_noun(r.meta)),
    "staleness": lambda r: charts.plot_staleness(r.events, r.label),
}
"""The figure of each FIGURES section of one run."""
COMPARED_TITLES = {
    "timeline": "Timeline, all runs on one time axis",
    "utilization": "Utilization over time, all runs on one time axis",
    "jobs": "Jobs, all runs on one time axis",
    "idle": "Idle time by cause, all runs",
    "staleness": "Staleness, all runs",
}
"""Headings of the sections that compare runs."""


def run_sections(
    run: Run, summary: dict, static: dict[str, list[str]], draw: bool = True
) -> list[Section]:
    """The sections of ``run`` (``summary``: :func:`marlaas.metrics.summary.summarize` of it;
    ``static``: static file names per section id, when exported; ``draw``: with the figures)."""
    sections = [
        replace(section, id=f"{name}-{run.slug}", nav=name)
        for name, section in _figure_sections(run, summary, draw).items()
    ]
    for section in sections:
        section.static = static.get(section.id, [])
    for section in _real(run):
        section.nav = section.id.split("-", 1)[0]
        sections.append(section)
    for section in sections:
        section.group = run.label
    return sections


def _figure_sections(run: Run, summary: dict, draw: bool) -> dict[str, Section]:
    """The FIGURES sections of ``run`` (with their figures when ``draw``)."""
    df, title, devices = run.events, run.title, device_noun(run.meta)
    builders: dict[str, Callable[[], Section]] = {
        "timeline": lambda: _timeline(df, title, run.label, summary, devices),
        "utilization": lambda: _utilization(df, title, run.label, summary, devices),
        "jobs": lambda: _jobs(run, title),
        "idle": lambda: _idle(df, title, run.label, devices),
        "staleness": lambda: _staleness(df, title, run.label),
    }
    sections = {name: build() for name, build in builders.items()}
    if draw:
        for name, section in sections.items():
            section.figure = FIGURE[name](run)
    return sections


def compared_sections(
    runs: list[Run], summaries: dict[str, dict], static: dict[str, list[str]]
) -> list[Section]:
    """One section per FIGURES entry comparing ``runs``: one figure of all of them, each run's
    notes and tables (captions end with the run's label), its static copies; then each run's
    real-run sections (rewards, memory, evaluation)."""
    per_run = {r.label: _figure_sections(r, summaries[r.label], draw=False) for r in runs}
    sections = []
    for name, draw in _compared_figures(runs).items():
        parts = [(r, per_run[r.label][name]) for r in runs]
        notes = list(dict.fromkeys(n for _, part in parts for n in part.notes))
        if len(notes) > 1:  # they differ: say whose each is
            notes = [f"{r.label}: {n}" for r, part in parts for n in part.notes]
        sections.append(
            Section(
                id=name,
                title=COMPARED_TITLES[name],
                nav=name,
                figure=draw(),
                notes=notes,
                glossary=list(dict.fromkeys(g for _, part in parts for g in part.glossary)),
                tables=[(f"{cap}: {r.label}", t) for r, part in parts for cap, t in part.tables],
                static=[f for r in runs for f in static.get(f"{name}-{r.slug}", [])],
            )
        )
    curves = [(r.label, r.rewards()) for r in runs]
    curves = [(label, rewards) for label, rewards in curves if rewards is not None and len(rewards)]
    if len(curves) > 1:
        sections.append(
            Section(
                id="rewards",
                title="Rewards compared",
                nav="rewards",
                figure=real.plot_rewards_compared(curves),
                notes=["From each run's rewards.csv: the mean reward of each training step's "
                       "samples, one panel per job, one line per run."],
            )
        )  # fmt: skip
    for run in runs:
        for section in _real(run):
            section.nav = section.id.split("-", 1)[0]
            section.group = run.label
            sections.append(section)
    return sections


def _compared_figures(runs: list[Run]) -> dict[str, Callable[[], go.Figure]]:
    """The figure of each FIGURES section comparing ``runs``."""
    pairs = [(r.label, r.events) for r in runs]
    nouns = {device_noun(r.meta) for r in runs}
    devices = nouns.pop() if len(nouns) == 1 else "device"
    return {
        "timeline": lambda: plot_timelines(pairs),
        "utilization": lambda: charts.plot_utilizations(pairs, devices),
        "jobs": lambda: charts.plot_jobs_compared([(r.label, r.events, r.arrivals) for r in runs]),
        "idle": lambda: charts.plot_idles(pairs, devices),
        "staleness": lambda: charts.plot_stalenesses(pairs),
    }


def _timeline(df: pd.DataFrame, title: str, label: str, summary: dict, devices: str) -> Section:
    n = summary["n_devices"]
    if n <= LANE_LIMIT:
        how = (
            f"One lane per {devices}. Bars are coloured by job (shades of the tenant's colour); "
            "train bars are hatched; the thin strip at the top of a lane is an adapter load, at "
            "the bottom a weight sync. Drag to zoom, double-click to reset, hover for job, "
            "tenant, kind, adapter version and duration; click a tenant in the legend to hide it."
        )
    else:
        how = (
            f"{fmt.count(n)} {devices}s are too many for lanes: each row is a {devices} (grouped "
            "by pool, with one row per pool above), coloured by how busy it was in each time "
            "bin (white = idle). Hover names the job that used it most in the bin. Drag to "
            "zoom, double-click to reset."
        )
    return Section(
        id="timeline",
        title=f"Timeline: {title}",
        notes=[how + " Top: concurrent environment steps per tenant."],
        glossary=[(name, text) for name, text in WORK_KINDS.values()],
    )


def _utilization(df: pd.DataFrame, title: str, label: str, summary: dict, devices: str) -> Section:
    u = utilization(df)
    per_pool = u.groupby("pool", sort=False).agg(
        devices=("device", "size"), busy_s=("busy_s", "sum"), utilization=("utilization", "mean")
    )
    pools = fmt.table(per_pool.reset_index()).rename(
        columns={"devices": f"{devices}s", "busy [s]": f"busy [{devices}-s]"}
    )
    tables = [(f"Utilization per pool (mean over its {devices}s)", pools)]
    if len(u) <= LANE_LIMIT:
        tables.append((f"Utilization per {devices}", fmt.table(u)))
    return Section(
        id="utilization",
        title=f"Utilization: {title}",
        notes=[
            f"Mean utilization {fmt.percent(summary['utilization'])} over "
            f"{fmt.count(summary['n_devices'])} {devices}s, makespan "
            f"{fmt.seconds(summary['makespan_s'])}. Busy = generating or training."
        ],
        tables=tables,
    )


def _jobs(run: Run, title: str) -> Section:
    jobs = job_table(run.events, run.arrivals)
    return Section(
        id="jobs",
        title=f"Jobs: {title}",
        notes=[
            "A training step counts once however many devices its trainer has; job completion "
            "time = completion (end of the last weight sync) - arrival."
        ],
        tables=[("Jobs", fmt.table(jobs))],
    )


def _idle(df: pd.DataFrame, title: str, label: str, devices: str) -> Section:
    table = idle_breakdown(df)
    shown = [c for c in table.columns if table[c].any()]
    human = table[shown].rename(columns=lambda c: f"{idle_name(c)} [{devices}-s]")
    formatted = fmt.table(human.reset_index())
    return Section(
        id="idle",
        title=f"Idle time: {title}",
        notes=[
            f"Every second a {devices} is not generating or training is logged with the reason "
            "it waits; the causes are explained under the figure."
        ],
        glossary=[(idle_name(c), IDLE_CAUSES.get(c, (c, "(unknown cause)"))[1]) for c in shown],
        tables=[(f"Idle {devices}-seconds by pool and cause", formatted)],
    )


def _staleness(df: pd.DataFrame, title: str, label: str) -> Section:
    return Section(
        id="staleness",
        title=f"Staleness: {title}",
        notes=[
            "Staleness of a training step: how many adapter versions its oldest sample lags "
            "the trainer (0 = on-policy); bounded per job by rl.max_staleness."
        ],
        tables=[("Staleness per job [versions]", fmt.table(staleness_table(df)))],
    )


def _real(run: Run) -> list[Section]:
    """Reward curves and evaluation of a real run, when its folder has them."""
    out = []
    rewards = run.rewards()
    if rewards is not None and len(rewards):
        last = rewards.sort_values("step").groupby("job").tail(1).set_index("job")
        first = rewards.sort_values("step").groupby("job").head(1).set_index("job")
        curve = pd.DataFrame(
            {
                "first step": first["step"].map(fmt.count),
                "reward at first step": first["mean_reward"].map(lambda v: f"{v:.3f}"),
                "last step": last["step"].map(fmt.count),
                "reward at last step": last["mean_reward"].map(lambda v: f"{v:.3f}"),
            }
        ).reset_index()
        out.append(
            Section(
                id=f"rewards-{run.slug}",
                title=f"Rewards: {run.title}",
                figure=real.plot_rewards(rewards, run.label),
                notes=["From rewards.csv: the mean reward of each training step's samples."],
                tables=[("Reward per job", curve)],
            )
        )
    memory = run.memory()
    if memory is not None and len(memory):
        top, at = real.memory_peak(memory)
        out.append(
            Section(
                id=f"memory-{run.slug}",
                title=f"Memory: {run.title}",
                figure=real.plot_memory(memory, run.label),
                notes=[
                    "From memory.csv: the resident memory of the run's processes, sampled every "
                    f"0.25 s, on the event log's clock; the process peaked at {top:,.0f} MiB, "
                    f"first seen at {at:,.1f} s (see the timeline for what ran then)."
                ],
            )
        )
    evaluation = run.evaluation()
    if evaluation is not None and len(evaluation):
        table = real.accuracy_pivot(evaluation)
        for col in ("base", "trained"):
            if col in table:
                table[col] = table[col].map(fmt.percent)
        if "change" in table:
            table["change"] = table["change"].map(lambda v: f"{v * 100:+.1f} points")
        out.append(
            Section(
                id=f"evaluation-{run.slug}",
                title=f"Evaluation: {run.title}",
                figure=real.plot_evaluation(evaluation, run.label),
                notes=[
                    "From eval.json (marlaas evaluate): greedy accuracy on held-out prompts, "
                    "base model vs the job's newest evaluated adapter."
                ],
                tables=[("Held-out accuracy", table)],
            )
        )
        timed = evaluation[evaluation["model"] == "trained"]
        if "time_s" in timed and timed["time_s"].notna().any():
            out.append(
                Section(
                    id=f"accuracy-time-{run.slug}",
                    title=f"Accuracy over training time: {run.title}",
                    figure=real.plot_accuracy_over_time(evaluation, run.label),
                    notes=[
                        "From eval.json (marlaas evaluate --versions ...): held-out accuracy "
                        "of each evaluated adapter version at the run's time it was made (the "
                        "base model at 0 s); bars: 95% Wilson intervals."
                    ],
                    tables=[("Every evaluated version", real.accuracy_rows(evaluation))],
                )
            )
    return out
