"""Interactive charts of one run, and of several compared: utilization over time, jobs, idle
time by cause, staleness.

The ``plot_*s`` functions take runs ``(label, events)`` and draw them in one figure: the time
figures as stacked rows on one shared time axis, the others side by side on one value axis.
The data of every trace is a metric of :mod:`marlaas.metrics`, unchanged (tests compare them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from marlaas.metrics.devices import makespan as run_makespan
from marlaas.metrics.idle import idle_breakdown
from marlaas.metrics.jobs import job_table, train_progress
from marlaas.metrics.staleness import staleness_counts
from marlaas.metrics.utilization import utilization_by_pool, utilization_over_time
from marlaas.report.interactive.look import LABEL_PX, LAYOUT, ROW_PX, run_title
from marlaas.report.names import IDLE_CAUSES, idle_name
from marlaas.report.palette import job_colors
from marlaas.report.style import CAUSE_COLORS

Runs = Sequence[tuple[str, pd.DataFrame]]
"""Runs to compare: ``(label, events)`` each."""
POOL_COLORS = ("#2f6db5", "#d9822b", "#3a9e5f", "#c23b3b", "#7d5fb2", "#8c6d31")
"""Line colour of each pool (in order of appearance), the same in every run."""


def _utilization_traces(
    df: pd.DataFrame, colors: dict[str, str], shown: set[str] | None = None
) -> list[go.Scatter]:
    """Step lines of the busy fraction per pool and overall (``meta`` = the pool or
    ``overall``). With ``shown`` (comparing runs), a pool's name is in the legend once."""
    series = utilization_over_time(df)
    means = utilization_by_pool(df)
    edges = np.r_[series["t_start_s"].to_numpy(), series["t_end_s"].to_numpy()[-1:]]
    traces = []
    for pool in [c for c in series.columns if c not in ("t_start_s", "t_end_s")]:
        y = series[pool].to_numpy()
        overall = pool == "overall"
        mean = f" (mean {means.get(pool, 0):.0%})" if not overall else ""
        name = "overall" if overall else f"pool {pool}"
        label = name + mean
        traces.append(
            go.Scatter(
                x=edges,
                y=np.r_[y, y[-1:]],
                mode="lines",
                line={"shape": "hv", "width": 2.5 if overall else 1.5},
                line_color="black" if overall else colors.setdefault(pool, _next_color(colors)),
                name=label if shown is None else name,
                legendgroup=pool,
                showlegend=shown is None or pool not in shown,
                meta=pool,
                hovertemplate=f"{label}<br>t = %{{x:,.0f}} s<br>busy %{{y:.0%}}<extra></extra>",
            )
        )
        if shown is not None:
            shown.add(pool)
    return traces


def _next_color(colors: dict[str, str]) -> str:
    return POOL_COLORS[len(colors) % len(POOL_COLORS)]


def plot_utilization(df: pd.DataFrame, title: str = "", devices: str = "device") -> go.Figure:
    """Busy fraction per pool and overall over time: one step line each (trace names are the
    pools and ``overall``; data = :func:`marlaas.metrics.utilization.utilization_over_time`)."""
    fig = go.Figure(_utilization_traces(df, {}))
    fig.update_layout(
        title={"text": title, "x": 0},
        xaxis_title="time [s]",
        yaxis={"title": f"busy fraction of {devices}s", "tickformat": ".0%", "range": [0, 1.05]},
        height=380,
        **LAYOUT,
    )
    return fig


def plot_utilizations(runs: Runs, devices: str = "device") -> go.Figure:
    """Utilization over time of several runs: one row each, on one shared time axis from 0
    to the longest makespan (data as :func:`plot_utilization`)."""
    titles = [f"{run_title(label)} · mean {_mean_busy(df):.1%}" for label, df in runs]
    fig = make_subplots(rows=len(runs), cols=1, shared_xaxes=True, vertical_spacing=0.5 / (
        2 * len(runs) + 1), subplot_titles=titles)  # fmt: skip
    colors: dict[str, str] = {}
    shown: set[str] = set()
    for row, (_, df) in enumerate(runs, start=1):
        for trace in _utilization_traces(df, colors, shown):
            fig.add_trace(trace, row=row, col=1)
    longest = max(run_makespan(df) for _, df in runs)
    fig.update_yaxes(title_text=f"busy {devices}s", tickformat=".0%", range=[0, 1.05])
    fig.update_xaxes(range=[0, longest], tickfont={"size": LABEL_PX})
    fig.update_xaxes(title_text="time [s]", row=len(runs), col=1)
    fig.update_annotations(x=0, xanchor="left")
    fig.update_layout(height=120 + 240 * len(runs), **LAYOUT)
    return fig


def _mean_busy(df: pd.DataFrame) -> float:
    """Mean busy fraction of all devices over the run (the ``overall`` line's mean)."""
    series = utilization_over_time(df)
    width = (series["t_end_s"] - series["t_start_s"]).to_numpy()
    return float(np.sum(series["overall"].to_numpy() * width) / max(width.sum(), 1e-12))


def _job_traces(
    df: pd.DataFrame, arrivals: Mapping[str, float] | None, colors: dict[str, str]
) -> tuple[list[go.Scatter], go.Bar]:
    """Training steps completed over time per job (trace name = job) and one bar per job
    from arrival to completion [s] (its length is the job completion time)."""
    jobs = job_table(df, arrivals)
    lines = []
    for job, rows in train_progress(df).groupby("job", sort=False):
        tenant = rows["tenant"].iloc[0]
        lines.append(
            go.Scatter(
                x=np.r_[0.0, rows["t_s"].to_numpy()],
                y=np.r_[0, rows["steps_done"].to_numpy()],
                mode="lines",
                line={"shape": "hv", "color": colors.get(job), "width": 1.5},
                name=job,
                legendgroup=job,
                hovertemplate=f"{job} ({tenant})<br>t = %{{x:,.1f}} s<br>"
                "%{y} steps done<extra></extra>",
            )
        )
    bar = go.Bar(
        orientation="h",
        y=jobs["job"],
        base=jobs["arrival_s"],
        x=jobs["jct_s"].fillna(0.0),
        marker_color=[colors.get(j, "#999") for j in jobs["job"]],
        customdata=np.column_stack([jobs["tenant"], jobs["steps"]]),
        text=[f"{v:,.0f} s" if np.isfinite(v) else "" for v in jobs["jct_s"]],
        textposition="outside",
        textfont={"size": LABEL_PX},
        showlegend=False,
        name="completion",
        hovertemplate="%{y} (tenant %{customdata[0]})<br>arrived %{base:,.1f} s<br>"
        "job completion time %{x:,.1f} s<br>%{customdata[1]} steps<extra></extra>",
    )
    return lines, bar


def _job_end(df: pd.DataFrame, arrivals: Mapping[str, float] | None) -> float:
    """The latest completion [s] of a job of the run (1 when none)."""
    jobs = job_table(df, arrivals)
    return float((jobs["arrival_s"] + jobs["jct_s"].fillna(0.0)).max()) if len(jobs) else 1.0


def _job_colors(runs: Sequence[pd.DataFrame]) -> dict[str, str]:
    """One colour per job over all ``runs`` (shades of its tenant's)."""
    pairs: dict[str, str] = {}
    for df in runs:
        work = df[df["job"] != ""]
        pairs.update(zip(work["job"].astype(object), work["tenant"].astype(object), strict=True))
    return job_colors(pairs)


def plot_jobs(
    df: pd.DataFrame, arrivals: Mapping[str, float] | None = None, title: str = ""
) -> go.Figure:
    """Left: training steps completed over time per job (trace name = job). Right: each job's
    bar from arrival to completion [s] (its length is the job completion time)."""
    return plot_jobs_compared([(title, df, arrivals)], title)


def plot_jobs_compared(
    runs: Sequence[tuple[str, pd.DataFrame, Mapping[str, float] | None]], title: str = ""
) -> go.Figure:
    """:func:`plot_jobs` of several runs ``(label, events, arrivals)``: one row each; the
    columns share their time axis over all rows."""
    several = len(runs) > 1
    counts = [max(len(job_table(df, arr)), 1) for _, df, arr in runs]
    heights = [max(220, ROW_PX * n + 40) for n in counts]
    total = sum(heights)
    titles = []
    for label, _, _ in runs:
        head = f"{run_title(label)}: " if several else ""
        titles += [head + "training steps completed", "arrival to completion"]
    fig = make_subplots(
        rows=len(runs), cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.12,
        shared_xaxes=True, vertical_spacing=min(0.3, 60 / total) if several else 0.0,
        row_heights=[h / total for h in heights], subplot_titles=titles,
    )  # fmt: skip
    colors = _job_colors([df for _, df, _ in runs])
    for row, (_, df, arrivals) in enumerate(runs, start=1):
        lines, bar = _job_traces(df, arrivals, colors)
        for line in lines:
            line.showlegend = row == 1 and sum(counts) <= 16
            fig.add_trace(line, row=row, col=1)
        fig.add_trace(bar, row=row, col=2)
        steps = int(job_table(df, arrivals)["steps"].max()) if counts[row - 1] else 1
        fig.update_yaxes(title_text="steps", dtick=max(1, -(-steps // 8)), row=row, col=1)
        fig.update_yaxes(autorange="reversed", row=row, col=2, tickfont={"size": LABEL_PX})
    end = max(_job_end(df, arr) for _, df, arr in runs)
    longest = max(run_makespan(df) for _, df, _ in runs)
    fig.update_xaxes(range=[0, longest], col=1)
    fig.update_xaxes(range=[0, 1.15 * end], col=2)  # room for the labels
    fig.update_xaxes(title_text="time [s]", row=len(runs))
    fig.update_annotations(font={"size": 13})
    fig.update_layout(title={"text": title if not several else "", "x": 0},
                      height=total + 150, showlegend=sum(counts) <= 16, **LAYOUT)  # fmt: skip
    return fig


def _idle_bars(table: pd.DataFrame, x, devices: str, shown: set[str]) -> list[go.Bar]:
    """Bars of idle device-seconds per cause (``meta`` = the cause) at ``x`` (one per row of
    ``table``, :func:`marlaas.metrics.idle.idle_breakdown`); a cause is in the legend once."""
    bars = []
    for cause in table.columns:
        values = table[cause].to_numpy()
        if not values.any():
            continue
        explain = IDLE_CAUSES.get(cause, ("", ""))[1]
        bars.append(
            go.Bar(
                x=x,
                y=values,
                name=idle_name(cause),
                meta=cause,
                legendgroup=cause,
                showlegend=cause not in shown,
                marker_color=CAUSE_COLORS.get(cause),
                hovertemplate=f"{idle_name(cause)}<br>%{{x}}: %{{y:,.0f}} {devices}-s"
                f"<br><i>{_wrap(explain)}</i><extra></extra>",
            )
        )
        shown.add(cause)
    return bars


def plot_idle(df: pd.DataFrame, title: str = "", devices: str = "device") -> go.Figure:
    """Idle device-seconds per pool, stacked by cause (trace ``meta`` = the cause; data =
    :func:`marlaas.metrics.idle.idle_breakdown`)."""
    table = idle_breakdown(df)
    fig = go.Figure(_idle_bars(table, [f"pool {p}" for p in table.index], devices, set()))
    _idle_layout(fig, title, devices, len(table))
    return fig


def plot_idles(runs: Runs, devices: str = "device") -> go.Figure:
    """Idle device-seconds of several runs side by side on one axis: bars grouped by pool,
    one per run in each group, stacked by cause (``x`` is [pools, runs])."""
    fig = go.Figure()
    shown: set[str] = set()
    tables = [(label, idle_breakdown(df)) for label, df in runs]
    causes = list(dict.fromkeys(c for _, t in tables for c in t.columns))
    pools = list(dict.fromkeys(p for _, t in tables for p in t.index))
    for label, table in tables:
        table = table.reindex(columns=causes, fill_value=0.0)
        x = [[f"pool {p}" for p in table.index], [label] * len(table)]
        for bar in _idle_bars(table, x, devices, shown):
            fig.add_trace(bar)
    fig.update_xaxes(tickfont={"size": LABEL_PX})
    _idle_layout(fig, "", devices, len(pools) * len(runs))
    return fig


def _idle_layout(fig: go.Figure, title: str, devices: str, n_bars: int) -> None:
    fig.update_layout(
        barmode="stack",
        bargap=max(0.2, 0.9 - 0.2 * n_bars),  # no page-wide bar for one pool
        title={"text": title, "x": 0},
        yaxis_title=f"idle {devices}-seconds [{devices}-s]",
        height=420,
        **LAYOUT,
    )


def _wrap(text: str, width: int = 60) -> str:
    """``text`` with ``<br>`` line breaks about every ``width`` characters."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + len(word) > width:
            lines.append(line)
            line = ""
        line = f"{line} {word}".strip()
    return "<br>".join([*lines, line])


def _staleness_bars(df: pd.DataFrame, shades: dict[int, str], shown: set[int]) -> list[go.Bar]:
    """Per staleness value [versions] (``meta``), the share of each job's training steps at
    it (data = :func:`marlaas.metrics.staleness.staleness_counts`); segments are labelled with their
    value where they fit; a value is in the legend once."""
    counts = staleness_counts(df)
    if counts.empty:
        return []
    share = counts.div(counts.sum(axis=1), axis=0)
    bars = []
    for value in share.columns:
        value = int(value)
        bars.append(
            go.Bar(
                orientation="h",
                y=share.index,
                x=share[value],
                name=f"{value} behind",
                meta=value,
                legendgroup=str(value),
                showlegend=value not in shown,
                customdata=counts[value].to_numpy(),
                text=[f"{value} behind" if v >= 0.15 else "" for v in share[value]],
                textposition="inside",
                insidetextanchor="middle",
                textfont={"size": LABEL_PX},
                marker_color=shades[value],
                hovertemplate="%{y}: %{x:.0%} of steps (%{customdata} steps) "
                + f"{value} version(s) behind<extra></extra>",
            )
        )
        shown.add(value)
    return bars


def _shades(values) -> dict[int, str]:
    """A colour per staleness value: light (0, on-policy) to dark (the largest)."""
    values = sorted({int(v) for v in values} | {0})
    top = max(values[-1], 1)
    return {v: sample_colorscale("Blues", [0.4 + 0.55 * v / top])[0] for v in values}


def _staleness_note(df: pd.DataFrame) -> str:
    """What a run's staleness amounts to, for the figure: the mean and the largest."""
    counts = staleness_counts(df)
    steps = int(counts.to_numpy().sum())
    if not steps:
        return "no training steps"
    values = np.asarray(counts.columns, dtype=float)
    mean = float((counts.sum(axis=0).to_numpy() * values).sum() / steps)
    if values.max() == 0:
        return f"all {steps:,} training steps on-policy (0 versions behind)"
    return f"{steps:,} training steps, mean {mean:.2f}, max {int(values.max())} versions behind"


def plot_staleness(df: pd.DataFrame, title: str = "") -> go.Figure:
    """Share of each job's training steps per staleness value [versions] (stacked bars; trace
    ``meta`` = the value; data = :func:`marlaas.metrics.staleness.staleness_counts`)."""
    return plot_stalenesses([(title, df)], title)


def plot_stalenesses(runs: Runs, title: str = "") -> go.Figure:
    """:func:`plot_staleness` of several runs side by side, one column each, sharing the job
    axis; each column says its mean and largest staleness."""
    several = len(runs) > 1
    notes = [_staleness_note(df) for _, df in runs]
    titles = [f"{run_title(label)}<br><sup>{n}</sup>" if several else f"<sup>{n}</sup>"
              for (label, _), n in zip(runs, notes, strict=True)]  # fmt: skip
    fig = make_subplots(rows=1, cols=len(runs), shared_yaxes=True, subplot_titles=titles,
                        horizontal_spacing=0.04)  # fmt: skip
    shades = _shades(v for _, df in runs for v in staleness_counts(df).columns)
    shown: set[int] = set()
    for col, (_, df) in enumerate(runs, start=1):
        for bar in _staleness_bars(df, shades, shown):
            fig.add_trace(bar, row=1, col=col)
    n_jobs = max(len(staleness_counts(df)) for _, df in runs)
    fig.update_xaxes(title_text="share of training steps", tickformat=".0%", range=[0, 1])
    fig.update_yaxes(autorange="reversed", tickfont={"size": LABEL_PX}, row=1, col=1)
    fig.update_layout(
        barmode="stack",
        title={"text": title, "x": 0},
        legend={"title": {"text": "staleness [versions]"}, "traceorder": "normal"},
        showlegend=True,
        uniformtext={"minsize": LABEL_PX, "mode": "hide"},
        height=max(320, ROW_PX * n_jobs + 190),
        **LAYOUT,
    )
    return fig
