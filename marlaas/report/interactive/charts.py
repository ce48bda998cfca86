"""Interactive charts of one run: utilization over time, jobs, idle time by cause, staleness.

The data of every trace is a metric of :mod:`marlaas.metrics`, unchanged (tests compare them).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from marlaas.metrics import (
    idle_breakdown,
    job_table,
    staleness_counts,
    train_progress,
    utilization_by_pool,
    utilization_over_time,
)
from marlaas.report.names import IDLE_CAUSES, idle_name
from marlaas.report.palette import job_colors
from marlaas.report.style import CAUSE_COLORS

LAYOUT = {
    "template": "plotly_white",
    "margin": {"l": 70, "r": 20, "t": 50, "b": 50},
    "hoverlabel": {"align": "left"},
}


def plot_utilization(df: pd.DataFrame, title: str = "", devices: str = "device") -> go.Figure:
    """Busy fraction per pool and overall over time: one step line each (trace names are the
    pools and ``overall``; data = :func:`marlaas.metrics.utilization_over_time`)."""
    series = utilization_over_time(df)
    means = utilization_by_pool(df)
    edges = np.r_[series["t_start_s"].to_numpy(), series["t_end_s"].to_numpy()[-1:]]
    fig = go.Figure()
    for pool in [c for c in series.columns if c not in ("t_start_s", "t_end_s")]:
        y = series[pool].to_numpy()
        overall = pool == "overall"
        label = "overall" if overall else f"pool {pool} (mean {means.get(pool, 0):.0%})"
        fig.add_trace(
            go.Scatter(
                x=edges,
                y=np.r_[y, y[-1:]],
                mode="lines",
                line={"shape": "hv", "width": 2.5 if overall else 1.5},
                line_color="black" if overall else None,
                name=label,
                meta=pool,
                hovertemplate=f"{label}<br>t = %{{x:,.0f}} s<br>busy %{{y:.0%}}<extra></extra>",
            )
        )
    fig.update_layout(
        title={"text": title, "x": 0},
        xaxis_title="time [s]",
        yaxis={"title": f"busy fraction of {devices}s", "tickformat": ".0%", "range": [0, 1.05]},
        height=380,
        **LAYOUT,
    )
    return fig


def plot_jobs(
    df: pd.DataFrame, arrivals: Mapping[str, float] | None = None, title: str = ""
) -> go.Figure:
    """Left: training steps completed over time per job (trace name = job). Right: each job's
    bar from arrival to completion [s] (its length is the job completion time)."""
    jobs = job_table(df, arrivals)
    prog = train_progress(df)
    colors = job_colors(dict(zip(jobs["job"], jobs["tenant"], strict=True)))
    fig = make_subplots(
        rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.12,
        subplot_titles=("training steps completed", "arrival to completion"),
    )  # fmt: skip
    for job, rows in prog.groupby("job", sort=False):
        tenant = rows["tenant"].iloc[0]
        fig.add_trace(
            go.Scatter(
                x=np.r_[0.0, rows["t_s"].to_numpy()],
                y=np.r_[0, rows["steps_done"].to_numpy()],
                mode="lines",
                line={"shape": "hv", "color": colors.get(job), "width": 1.5},
                name=job,
                legendgroup=job,
                hovertemplate=f"{job} ({tenant})<br>t = %{{x:,.1f}} s<br>"
                "%{y} steps done<extra></extra>",
            ),
            row=1,
            col=1,
        )
    fig.add_trace(
        go.Bar(
            orientation="h",
            y=jobs["job"],
            base=jobs["arrival_s"],
            x=jobs["jct_s"].fillna(0.0),
            marker_color=[colors.get(j, "#999") for j in jobs["job"]],
            customdata=np.column_stack([jobs["tenant"], jobs["steps"]]),
            text=[f"{v:,.0f} s" if np.isfinite(v) else "" for v in jobs["jct_s"]],
            textposition="outside",
            showlegend=False,
            name="completion",
            hovertemplate="%{y} (tenant %{customdata[0]})<br>arrived %{base:,.1f} s<br>"
            "job completion time %{x:,.1f} s<br>%{customdata[1]} steps<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.update_xaxes(title_text="time [s]")
    end = (jobs["arrival_s"] + jobs["jct_s"].fillna(0.0)).max() if len(jobs) else 1.0
    fig.update_xaxes(range=[0, 1.15 * end], row=1, col=2)  # room for the labels
    most = int(jobs["steps"].max()) if len(jobs) else 1
    fig.update_yaxes(title_text="steps", dtick=max(1, -(-most // 8)), row=1, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=2, tickfont={"size": 9})
    fig.update_layout(
        title={"text": title, "x": 0},
        height=max(380, 16 * len(jobs) + 160),
        showlegend=len(jobs) <= 16,
        **LAYOUT,
    )
    return fig


def plot_idle(df: pd.DataFrame, title: str = "", devices: str = "device") -> go.Figure:
    """Idle device-seconds per pool, stacked by cause (trace ``meta`` = the cause; data =
    :func:`marlaas.metrics.idle_breakdown`)."""
    table = idle_breakdown(df)
    fig = go.Figure()
    pools = [f"pool {p}" for p in table.index]
    for cause in table.columns:
        values = table[cause].to_numpy()
        if not values.any():
            continue
        explain = IDLE_CAUSES.get(cause, ("", ""))[1]
        fig.add_trace(
            go.Bar(
                x=pools,
                y=values,
                name=idle_name(cause),
                meta=cause,
                marker_color=CAUSE_COLORS.get(cause),
                hovertemplate=f"{idle_name(cause)}<br>%{{x}}: %{{y:,.0f}} {devices}-s"
                f"<br><i>{_wrap(explain)}</i><extra></extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        bargap=max(0.2, 0.9 - 0.2 * len(pools)),  # no page-wide bar for one pool
        title={"text": title, "x": 0},
        yaxis_title=f"idle {devices}-seconds [{devices}-s]",
        height=400,
        **LAYOUT,
    )
    return fig


def _wrap(text: str, width: int = 60) -> str:
    """``text`` with ``<br>`` line breaks about every ``width`` characters."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + len(word) > width:
            lines.append(line)
            line = ""
        line = f"{line} {word}".strip()
    return "<br>".join([*lines, line])


def plot_staleness(df: pd.DataFrame, title: str = "") -> go.Figure:
    """Share of each job's training steps per staleness value [versions] (stacked bars; trace
    ``meta`` = the value; data = :func:`marlaas.metrics.staleness_counts`)."""
    counts = staleness_counts(df)
    fig = go.Figure()
    if not counts.empty:
        share = counts.div(counts.sum(axis=1), axis=0)
        values = list(share.columns)
        shades = sample_colorscale("Blues", np.linspace(0.45, 0.95, max(len(values), 2)))
        for i, value in enumerate(values):
            fig.add_trace(
                go.Bar(
                    orientation="h",
                    y=share.index,
                    x=share[value],
                    name=f"{value} behind",
                    meta=int(value),
                    customdata=counts[value].to_numpy(),
                    marker_color=shades[i],
                    hovertemplate="%{y}: %{x:.0%} of steps (%{customdata} steps) "
                    + f"{value} version(s) behind<extra></extra>",
                )
            )
    fig.update_layout(
        barmode="stack",
        title={"text": title, "x": 0},
        xaxis={"title": "share of training steps", "tickformat": ".0%", "range": [0, 1]},
        yaxis={"autorange": "reversed", "tickfont": {"size": 9}},
        legend={"title": {"text": "staleness [versions]"}},
        height=max(300, 16 * len(counts) + 150),
        **LAYOUT,
    )
    return fig
