"""Interactive figures of a sweep: scaling per schedule over job counts, idle shares per run,
utilization over time of every run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from marlaas.eventlog import IDLE_CAUSES
from marlaas.report.interactive.timeline import HEAT_SCALE
from marlaas.report.names import idle_name
from marlaas.report.style import CAUSE_COLORS

LAYOUT = {
    "template": "plotly_white",
    "margin": {"l": 70, "r": 20, "t": 60, "b": 60},
    "hoverlabel": {"align": "left"},
}
PANELS = (
    ("utilization", "utilization, all devices", ".1%"),
    ("jct_mean_s", "job completion time, mean [s]", ",.0f"),
    ("makespan_s", "makespan [s]", ",.0f"),
)
"""(sweep.csv column, panel title, number format) of the scaling panels."""
POLICY_COLORS = ("#2f6db5", "#d9822b", "#3a9e5f", "#c23b3b", "#7d5fb2", "#8c6d31", "#d66fb2",
                 "#5b5b5b", "#b5b52f", "#2fb5b5")  # fmt: skip


def _series_name(row: pd.Series, show_variant: bool) -> str:
    return f"{row['schedule']} ({row['variant']})" if show_variant else str(row["schedule"])


def scaling_points(table: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds of each panel's column per (schedule, variant, jobs): the plotted data."""
    cols = [c for c, _, _ in PANELS]
    return table.groupby(["schedule", "variant", "jobs"], sort=False)[cols].mean().reset_index()


def plot_scaling(table: pd.DataFrame) -> go.Figure:
    """One panel per PANELS entry: x = jobs in the run, one line per schedule (and variant);
    trace ``meta`` = (schedule, variant); data = :func:`scaling_points`."""
    points = scaling_points(table)
    show_variant = table["variant"].nunique() > 1
    fig = make_subplots(rows=1, cols=len(PANELS), subplot_titles=[p[1] for p in PANELS])
    groups = list(points.groupby(["schedule", "variant"], sort=False))
    for i, ((schedule, variant), rows) in enumerate(groups):
        rows = rows.sort_values("jobs")
        name = _series_name(rows.iloc[0], show_variant)
        color = POLICY_COLORS[i % len(POLICY_COLORS)]
        for j, (col, title, number) in enumerate(PANELS):
            fig.add_trace(
                go.Scatter(
                    x=rows["jobs"],
                    y=rows[col],
                    mode="lines+markers",
                    name=name,
                    legendgroup=name,
                    showlegend=j == 0,
                    meta=[schedule, variant],
                    line={"color": color},
                    hovertemplate=f"{name}<br>%{{x}} jobs<br>{title}: %{{y:{number}}}"
                    "<extra></extra>",
                ),
                row=1,
                col=j + 1,
            )
    fig.update_xaxes(title_text="jobs in the run", **job_axis(table))
    fig.update_yaxes(tickformat=".0%", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=420, legend={"title": {"text": "schedule"}}, **LAYOUT)
    return fig


def job_axis(table: pd.DataFrame) -> dict:
    """The x axis of job counts: logarithmic when they spread (see :func:`_spread`), with a
    tick labelled in full at every job count of the sweep (Plotly's own log ticks label
    20 and 50 as "2" and "5")."""
    if not _spread(table):
        return {"type": "linear"}
    jobs = sorted({int(j) for j in table["jobs"]})
    return {
        "type": "log",
        "tickmode": "array",
        "tickvals": jobs,
        "ticktext": [str(j) for j in jobs],
    }


def _spread(table: pd.DataFrame) -> bool:
    """Whether job counts span a factor of 8 or more (then x is logarithmic)."""
    jobs = table["jobs"]
    return jobs.min() > 0 and jobs.max() / jobs.min() >= 8


def plot_idle_shares(table: pd.DataFrame) -> go.Figure:
    """Stacked bars per run (x = run label): busy share and each idle cause's share of all
    device-time (trace ``meta`` = the cause, ``busy`` for utilization)."""
    fig = go.Figure()
    fig.add_trace(
        go.Bar(x=table["label"], y=table["utilization"], name="busy", meta="busy",
               marker_color="#2b2b2b", hovertemplate="%{x}<br>busy %{y:.1%}<extra></extra>")
    )  # fmt: skip
    for cause in IDLE_CAUSES:
        col = f"idle_{cause}"
        if col not in table or not table[col].fillna(0).any():
            continue
        fig.add_trace(
            go.Bar(
                x=table["label"],
                y=table[col],
                name=idle_name(cause),
                meta=cause,
                marker_color=CAUSE_COLORS.get(cause),
                hovertemplate=f"%{{x}}<br>{idle_name(cause)}: %{{y:.1%}}<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        yaxis={"title": "share of device-time", "tickformat": ".0%", "range": [0, 1.0]},
        xaxis={"tickangle": -30},
        height=460,
        **LAYOUT,
    )
    return fig


def plot_overtime(series: dict[str, pd.DataFrame]) -> go.Figure:
    """Busy fraction of all devices over time, one heatmap row per run (y = run label; data =
    the ``overall`` column of each run's
    :func:`marlaas.metrics.utilization.utilization_over_time` on a common bin width; blank
    after a run ends)."""
    labels = list(series)
    width = max((s["t_end_s"].iloc[-1] for s in series.values() if len(s)), default=1.0) / 200
    z = np.full((len(labels), 200), np.nan)
    for i, s in enumerate(series.values()):
        values = s["overall"].to_numpy()[:200]
        z[i, : len(values)] = values
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=(np.arange(200) + 0.5) * width,
            y=labels,
            colorscale=HEAT_SCALE,
            zmin=0.0,
            zmax=1.0,
            colorbar={"title": {"text": "busy"}, "tickformat": ".0%"},
            hovertemplate="%{y}<br>t = %{x:,.0f} s<br>busy %{z:.0%}<extra></extra>",
        )
    )
    fig.update_layout(
        xaxis_title="time [s]",
        yaxis={"autorange": "reversed"},
        height=max(260, 22 * len(labels) + 120),
        title={"text": f"<sup>busy fraction of all devices per {width:,.1f} s bin</sup>", "x": 0},
        **LAYOUT,
    )
    return fig
