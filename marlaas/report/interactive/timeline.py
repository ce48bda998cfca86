"""The interactive timeline of a run: device lanes for a few devices, heatmaps for many.

Both have an environment row on top (mean concurrent environment steps per tenant) and share
the time axis [s]; drag to zoom, double-click to reset, hover for details.

- Lanes (up to :data:`LANE_LIMIT` devices): one lane per device. Generate and train work are
  bars in the middle of the lane, coloured by job (a shade of its tenant's colour; train bars
  hatched); adapter loads are a thin strip at the top of the lane, weight syncs one at the
  bottom. Hover: job, tenant, kind, version, start, duration. Click a tenant in the legend to
  hide it.
- Heatmaps (more devices, or more than :data:`MAX_BARS` bars): the busy fraction of every pool
  and of every device per time bin; hover names the job that used the device most in the bin.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from marlaas.metrics import device_table, makespan
from marlaas.report.names import WORK_KINDS
from marlaas.report.palette import job_colors, tenant_colors
from marlaas.report.timeline_data import (
    device_busy_fraction,
    env_concurrency,
    lane_segments,
    main_job,
)

LANE_LIMIT = 24
"""Most devices drawn as lanes; more are drawn as heatmaps."""
MAX_BARS = 25_000
"""Most bars drawn as lanes (after merging); more are drawn as heatmaps."""
MERGE_PIXELS = 4_000
"""Bars of one (device, job, kind, version) closer than makespan / this are merged."""
HEAT_BINS = 300
"""Time bins of the heatmaps."""
ENV_BINS = 400
"""Time bins of the environment row."""
LANE_SHAPE = {
    # kind: (offset from the lane centre [lanes], thickness [lanes], hatch pattern)
    "adapter_load": (-0.36, 0.18, ""),
    "generate": (0.0, 0.5, ""),
    "train": (0.0, 0.5, "/"),
    "sync": (0.36, 0.18, ""),
}
"""Where each kind of work sits in a lane (the y axis points down)."""
STRIP_COLOR = {"adapter_load": "#8c8c8c", "sync": "#303030"}
"""Strips are neutral: their job is in the hover."""
HEAT_SCALE = [[0.0, "#ffffff"], [0.25, "#c6dbef"], [0.6, "#4a90c8"], [1.0, "#08306b"]]
"""Busy fraction 0 (white, idle) to 1 (dark blue)."""


def uses_lanes(n_devices: int) -> bool:
    """Whether the timeline draws device lanes (else heatmaps)."""
    return 0 < n_devices <= LANE_LIMIT


def plot_timeline(df: pd.DataFrame, title: str = "") -> go.Figure:
    """The timeline figure: lanes for up to :data:`LANE_LIMIT` devices, else heatmaps."""
    if uses_lanes(len(device_table(df))):
        seg = lane_segments(df, gap_s=max(makespan(df), 1e-9) / MERGE_PIXELS)
        if len(seg) <= MAX_BARS:
            return plot_lanes(df, seg, title)
    return plot_heatmap(df, title)


def _env_row(fig: go.Figure, df: pd.DataFrame, colors: dict[str, str], legend: bool) -> None:
    """Stacked areas of concurrent environment steps per tenant in row 1 (in the legend when
    ``legend``)."""
    span = max(makespan(df), 1e-9)
    edges = np.linspace(0.0, span, ENV_BINS + 1)
    conc = env_concurrency(df, edges)
    for tenant in conc.columns:
        fig.add_trace(
            go.Scatter(
                x=edges[:-1],
                y=conc[tenant].to_numpy(),
                mode="lines",
                line={"width": 0, "shape": "hv", "color": colors.get(tenant, "#999")},
                fillcolor=colors.get(tenant, "#999"),
                stackgroup="env",
                name=tenant,
                legendgroup=tenant,
                showlegend=legend,
                hovertemplate=f"{tenant}: %{{y:.1f}} env steps<extra></extra>",
            ),
            row=1,
            col=1,
        )
    fig.update_yaxes(title_text="env steps", row=1, col=1)


def plot_lanes(df: pd.DataFrame, seg: pd.DataFrame, title: str = "") -> go.Figure:
    """Device lanes (see the module docstring) from :func:`lane_segments` bars ``seg``."""
    devices = seg.drop_duplicates("lane").sort_values("lane")["device"].tolist()
    job_tenant = dict(zip(seg["job"], seg["tenant"], strict=True))
    tcolors, jcolors = tenant_colors(job_tenant.values()), job_colors(job_tenant)
    n = len(devices)
    lanes_px = max(26 * n, 120)
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.03,
        row_heights=[110 / (110 + lanes_px), lanes_px / (110 + lanes_px)],
    )  # fmt: skip
    _env_row(fig, df, tcolors, legend=False)
    shown: set[str] = set()
    for kind, (offset, thickness, hatch) in LANE_SHAPE.items():
        rows = seg[seg["kind"] == kind]
        for tenant, part in rows.groupby("tenant", sort=False):
            if kind in STRIP_COLOR:
                color = STRIP_COLOR[kind]
            else:
                color = part["job"].map(jcolors).to_numpy()
            duration = (part["end_s"] - part["start_s"]).to_numpy()
            custom = np.column_stack(
                [
                    part["job"].to_numpy(),
                    part["tenant"].to_numpy(),
                    np.full(len(part), WORK_KINDS[kind][0], dtype=object),
                    part["version"].to_numpy(),
                    part["start_s"].round(3).to_numpy(),
                    part["device"].to_numpy(),
                    part["rows"].to_numpy(),
                ]
            )
            legend = kind not in STRIP_COLOR and tenant not in shown
            if legend:
                shown.add(tenant)
            fig.add_trace(
                go.Bar(
                    orientation="h",
                    y=part["lane"].to_numpy() + offset,
                    base=part["start_s"].to_numpy(),
                    x=duration,
                    width=thickness,
                    marker={
                        "color": color,
                        "line": {"width": 0},
                        "pattern": {"shape": hatch, "fgcolor": "rgba(255,255,255,0.7)"},
                    },
                    name=tenant,
                    legendgroup=tenant,
                    showlegend=legend,
                    customdata=custom,
                    hovertemplate=(
                        "<b>%{customdata[0]}</b> (tenant %{customdata[1]})<br>"
                        "%{customdata[2]}, adapter version %{customdata[3]}<br>"
                        "start %{customdata[4]:,.2f} s, duration %{x:,.2f} s<br>"
                        "%{customdata[5]} (%{customdata[6]} event-log rows)<extra></extra>"
                    ),
                ),
                row=2,
                col=1,
            )
    fig.update_yaxes(
        tickmode="array", tickvals=list(range(n)), ticktext=devices, autorange=False,
        range=[n - 0.5, -0.5], row=2, col=1, tickfont={"size": 10},
    )  # fmt: skip
    fig.update_xaxes(title_text="time [s]", row=2, col=1)
    fig.update_xaxes(range=[0, makespan(df)])
    fig.update_layout(
        barmode="overlay",
        bargap=0,
        height=110 + lanes_px + 130,
        title={"text": title, "x": 0},
        legend={"title": {"text": "tenant"}, "tracegroupgap": 0},
        margin={"l": 90, "r": 20, "t": 50, "b": 50},
        hoverlabel={"align": "left"},
        template="plotly_white",
        plot_bgcolor="#fafafa",
    )
    return fig


def plot_heatmap(df: pd.DataFrame, title: str = "", bins: int = HEAT_BINS) -> go.Figure:
    """Busy fraction per pool and per device over time (see the module docstring)."""
    devs, edges, busy = device_busy_fraction(df, bins)
    jobs = main_job(df, devs, edges)
    work = df[df["job"] != ""]
    tenant_of = dict(zip(work["job"].astype(object), work["tenant"].astype(object), strict=True))
    tenants = np.vectorize(lambda j: tenant_of.get(j, ""), otypes=[object])(jobs)
    pools = list(dict.fromkeys(devs["pool"]))
    pool_busy = np.array([busy[(devs["pool"] == p).to_numpy()].mean(axis=0) for p in pools])
    centers = (edges[:-1] + edges[1:]) / 2
    n = len(devs)
    pools_px, devices_px = 28 * len(pools) + 20, max(9 * n, 150)
    total = 110 + pools_px + devices_px
    fig = make_subplots(
        rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.025,
        row_heights=[110 / total, pools_px / total, devices_px / total],
    )  # fmt: skip
    _env_row(fig, df, tenant_colors(tenant_of.values()), legend=True)
    heat = {"colorscale": HEAT_SCALE, "zmin": 0.0, "zmax": 1.0, "x": centers}
    fig.add_trace(
        go.Heatmap(
            z=pool_busy,
            y=[f"pool {p}" for p in pools],
            showscale=False,
            hovertemplate="%{y}<br>t = %{x:,.0f} s<br>busy %{z:.0%}<extra></extra>",
            **heat,
        ),
        row=2,
        col=1,
    )
    fig.add_trace(
        go.Heatmap(
            z=busy,
            y=devs["device"].tolist(),
            customdata=np.dstack([jobs, tenants]),
            colorbar={
                "title": {"text": "busy"},
                "tickformat": ".0%",
                "len": devices_px / total,
                "y": 0.0,
                "yanchor": "bottom",
                "thickness": 14,
            },
            hovertemplate=(
                "%{y}<br>t = %{x:,.0f} s<br>busy %{z:.0%}<br>"
                "mostly %{customdata[0]} (tenant %{customdata[1]})<extra></extra>"
            ),
            **heat,
        ),
        row=3,
        col=1,
    )
    fig.update_yaxes(autorange="reversed", row=2, col=1)
    fig.update_yaxes(autorange="reversed", tickfont={"size": 8 if n > 40 else 10}, row=3, col=1)
    fig.update_xaxes(title_text="time [s]", row=3, col=1)
    fig.update_xaxes(range=[edges[0], edges[-1]])
    bin_s = float(edges[1] - edges[0]) if len(edges) > 1 else 0.0
    fig.update_layout(
        height=total + 200,
        title={"text": f"{title}<br><sup>busy fraction per {bin_s:,.1f} s bin</sup>", "x": 0},
        margin={"l": 110, "r": 20, "t": 70, "b": 50},
        hoverlabel={"align": "left"},
        template="plotly_white",
        legend={
            "orientation": "h",
            "y": -0.06,
            "yanchor": "top",
            "x": 0,
            "title": {"text": "tenant (environment row)"},
            "font": {"size": 10},
        },
    )
    return fig
