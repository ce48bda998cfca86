"""The sections of one run in report.html: timeline, utilization, jobs, idle time, staleness,
and for a real run its rewards and evaluation. Each pairs an interactive figure with tables
formatted for people and explanations of what it shows."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from marlaas import metrics
from marlaas.report import fmt
from marlaas.report.html import Section
from marlaas.report.interactive import charts, real
from marlaas.report.interactive.timeline import LANE_LIMIT, plot_timeline
from marlaas.report.labels import device_noun
from marlaas.report.load import Run
from marlaas.report.names import IDLE_CAUSES, WORK_KINDS, idle_name

FIGURES = ("timeline", "utilization", "jobs", "idle", "staleness")
"""Sections of every run; their ids are ``<figure>-<run slug>``."""


def run_sections(run: Run, summary: dict, static: dict[str, list[str]]) -> list[Section]:
    """The sections of ``run`` (``summary``: metrics.summarize of it; ``static``: static file
    names per section id, when exported)."""
    df, title, devices = run.events, run.title, device_noun(run.meta)
    builders: dict[str, Callable[[], Section]] = {
        "timeline": lambda: _timeline(df, title, run.label, summary, devices),
        "utilization": lambda: _utilization(df, title, run.label, summary, devices),
        "jobs": lambda: _jobs(run, title),
        "idle": lambda: _idle(df, title, run.label, devices),
        "staleness": lambda: _staleness(df, title, run.label),
    }
    sections = []
    for name, build in builders.items():
        section = build()
        section.id = f"{name}-{run.slug}"
        section.static = static.get(section.id, [])
        section.nav = name
        sections.append(section)
    for section in _real(run):
        section.nav = section.id.split("-", 1)[0]
        sections.append(section)
    for section in sections:
        section.group = run.label
    return sections


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
        figure=plot_timeline(df, label),
        notes=[how + " Top: concurrent environment steps per tenant."],
        glossary=[(name, text) for name, text in WORK_KINDS.values()],
    )


def _utilization(df: pd.DataFrame, title: str, label: str, summary: dict, devices: str) -> Section:
    u = metrics.utilization(df)
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
        figure=charts.plot_utilization(df, label, devices),
        notes=[
            f"Mean utilization {fmt.percent(summary['utilization'])} over "
            f"{fmt.count(summary['n_devices'])} {devices}s, makespan "
            f"{fmt.seconds(summary['makespan_s'])}. Busy = generating or training."
        ],
        tables=tables,
    )


def _jobs(run: Run, title: str) -> Section:
    jobs = metrics.job_table(run.events, run.arrivals)
    return Section(
        id="jobs",
        title=f"Jobs: {title}",
        figure=charts.plot_jobs(run.events, run.arrivals, run.label),
        notes=[
            "A training step counts once however many devices its trainer has; job completion "
            "time = completion (end of the last weight sync) - arrival."
        ],
        tables=[("Jobs", fmt.table(jobs))],
    )


def _idle(df: pd.DataFrame, title: str, label: str, devices: str) -> Section:
    table = metrics.idle_breakdown(df)
    shown = [c for c in table.columns if table[c].any()]
    human = table[shown].rename(columns=lambda c: f"{idle_name(c)} [{devices}-s]")
    formatted = fmt.table(human.reset_index())
    return Section(
        id="idle",
        title=f"Idle time: {title}",
        figure=charts.plot_idle(df, label, devices),
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
        figure=charts.plot_staleness(df, label),
        notes=[
            "Staleness of a training step: how many adapter versions its oldest sample lags "
            "the trainer (0 = on-policy); bounded per job by rl.max_staleness."
        ],
        tables=[("Staleness per job [versions]", fmt.table(metrics.staleness_table(df)))],
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
                    "base model vs the job's trained adapter."
                ],
                tables=[("Held-out accuracy", table)],
            )
        )
    return out
