"""The interactive timeline of one run or of several on one time axis: device lanes for a few
devices, heatmaps for many.

Each run is a block of rows: an environment row on top (mean concurrent environment steps per
tenant), then its lanes or heatmaps. All rows of all runs share the time axis [s] (one x
range, zoom one and all follow); drag to zoom, double-click to reset, hover for details. A
tenant has one colour in every run.

- Lanes (up to :data:`LANE_LIMIT` devices): one lane per device. Generate and train work are
  bars in the middle of the lane, coloured by job (a shade of its tenant's colour; train bars
  hatched); adapter loads are a thin strip at the top of the lane, weight syncs one at the
  bottom. Hover: job, tenant, kind, version, start, duration. Click a tenant in the legend to
  hide it.
- Heatmaps (more devices, or more than :data:`MAX_BARS` bars): the busy fraction of every pool
  and of every device per time bin; hover names the job that used the device most in the bin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from marlaas.metrics.devices import device_table, makespan
from marlaas.report.interactive.look import LABEL_PX, run_title
from marlaas.report.names import WORK_KINDS
from marlaas.report.palette import job_colors, tenant_colors
from marlaas.report.timeline_data import (
    device_busy_fraction,
    env_concurrency,
    grouped_rows,
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
ENV_PX = 110
"""Height of the environment row [px]."""
LANE_PX = 26
"""Height of one device lane [px]."""
MAX_DEVICE_ROWS = 200
"""Most device rows of a heatmap: more devices are grouped, consecutive devices of a pool per
row (a report of 65,000 devices was 370 MB)."""
DEVICE_PX = 12
"""Height of one device's heatmap row [px] (Plotly thins the labels where they would touch)."""
GAP_PX = 34
"""Space between two rows [px] (room for a run's heading above its first row)."""
HEAT_SCALE = [[0.0, "#ffffff"], [0.25, "#c6dbef"], [0.6, "#4a90c8"], [1.0, "#08306b"]]
"""Busy fraction 0 (white, idle) to 1 (dark blue)."""


@dataclass
class Block:
    """One run's rows in a timeline figure."""

    label: str
    df: pd.DataFrame
    seg: pd.DataFrame | None
    """Lane bars (:func:`lane_segments`); None: the run is drawn as heatmaps."""
    heights: list[int]
    """Height of each of its rows [px]: environment, then lanes or pools and devices."""


def uses_lanes(n_devices: int) -> bool:
    """Whether the timeline draws device lanes (else heatmaps)."""
    return 0 < n_devices <= LANE_LIMIT


def block(label: str, df: pd.DataFrame, lanes: bool | None = None) -> Block:
    """The rows of run ``label``: lanes when it has few devices and bars (or ``lanes``)."""
    devices = device_table(df)
    seg = None
    if lanes is not False and uses_lanes(len(devices)):
        seg = lane_segments(df, gap_s=max(makespan(df), 1e-9) / MERGE_PIXELS)
        if lanes is None and len(seg) > MAX_BARS:
            seg = None
    if seg is not None:
        return Block(label, df, seg, [ENV_PX, max(LANE_PX * len(devices), 120)])
    pools = devices["pool"].nunique()
    rows = max(DEVICE_PX * min(len(devices), MAX_DEVICE_ROWS + pools), 150)
    return Block(label, df, None, [ENV_PX, 28 * pools + 20, rows])


def plot_timeline(df: pd.DataFrame, title: str = "") -> go.Figure:
    """The timeline of one run: lanes for up to :data:`LANE_LIMIT` devices, else heatmaps."""
    return plot_blocks([block(title, df)], title)


def plot_timelines(runs: Sequence[tuple[str, pd.DataFrame]], title: str = "") -> go.Figure:
    """The timelines of several runs ``(label, events)`` in one figure, stacked, on one time
    axis (``shared_xaxes``: every row's x axis follows the bottom one)."""
    return plot_blocks([block(label, df) for label, df in runs], title)


def plot_lanes(df: pd.DataFrame, seg: pd.DataFrame, title: str = "") -> go.Figure:
    """Device lanes (see the module docstring) from :func:`lane_segments` bars ``seg``."""
    rows = max(LANE_PX * int(seg["lane"].nunique()), 120)
    return plot_blocks([Block(title, df, seg, [ENV_PX, rows])], title)


def plot_heatmap(df: pd.DataFrame, title: str = "", bins: int = HEAT_BINS) -> go.Figure:
    """Busy fraction per pool and per device over time (see the module docstring)."""
    return plot_blocks([block(title, df, lanes=False)], title, bins)


def plot_blocks(blocks: list[Block], title: str = "", bins: int = HEAT_BINS) -> go.Figure:
    """The figure of ``blocks`` stacked on one time axis from 0 to the longest makespan;
    heatmap bins are ``longest / bins`` wide in every run."""
    heights = [h for b in blocks for h in b.heights]
    total = sum(heights) + GAP_PX * (len(heights) - 1)
    several = len(blocks) > 1
    titles = [run_title(b.label) if several and i == 0 else "" for b in blocks
              for i in range(len(b.heights))]  # fmt: skip
    fig = make_subplots(
        rows=len(heights), cols=1, shared_xaxes=True, vertical_spacing=GAP_PX / total,
        row_heights=[h / total for h in heights], subplot_titles=titles if several else None,
    )  # fmt: skip
    longest = max(max(makespan(b.df) for b in blocks), 1e-9)
    job_tenant = _job_tenants(blocks)
    tcolors, jcolors = tenant_colors(job_tenant.values()), job_colors(job_tenant)
    shown: set[str] = set()
    any_heat = any(b.seg is None for b in blocks)
    row, bin_s = 1, longest / bins
    for b in blocks:
        span = makespan(b.df)
        _env_row(fig, b.df, tcolors, shown if b.seg is None else None, row, span / longest)
        if b.seg is not None:
            _lanes(fig, b.seg, jcolors, shown, row + 1)
        else:
            n_bins = max(1, round(bins * span / longest))
            _heatmaps(fig, b.df, n_bins, row + 1, colorbar=row == 1 or not several, total=total)
        row += len(b.heights)
    fig.update_xaxes(title_text="time [s]", row=len(heights), col=1)
    fig.update_xaxes(range=[0, longest], tickfont={"size": LABEL_PX})
    fig.update_annotations(font={"size": 14}, x=0, xanchor="left")
    subtitle = f"<br><sup>busy fraction per {bin_s:,.1f} s bin</sup>" if any_heat else ""
    _layout(fig, title + subtitle, total, any_heat)
    return fig


def _job_tenants(blocks: list[Block]) -> dict[str, str]:
    """``{job: tenant}`` over every run of ``blocks`` (one colour per job in all runs)."""
    out: dict[str, str] = {}
    for b in blocks:
        work = b.df[b.df["job"] != ""]
        out.update(zip(work["job"].astype(object), work["tenant"].astype(object), strict=True))
    return out


def _layout(fig: go.Figure, title: str, total: int, heat: bool) -> None:
    """Size, title, legend and look of a timeline figure ``total`` px of rows high."""
    legend = {"title": {"text": "tenant"}, "tracegroupgap": 0, "font": {"size": LABEL_PX}}
    if heat:  # the colour bar is on the right: the legend goes under the figure
        legend |= {"orientation": "h", "y": -80 / total, "yanchor": "top", "x": 0}
        legend["title"] = {"text": "tenant (environment row)"}
    fig.update_layout(
        barmode="overlay",
        bargap=0,
        height=total + (230 if heat else 130),
        title={"text": title, "x": 0},
        legend=legend,
        margin={"l": 110, "r": 20, "t": 70 if heat else 50, "b": 50},
        hoverlabel={"align": "left"},
        template="plotly_white",
        plot_bgcolor="#fafafa",
    )


def _env_row(
    fig: go.Figure,
    df: pd.DataFrame,
    colors: dict[str, str],
    shown: set[str] | None,
    row: int,
    share: float = 1.0,
) -> None:
    """Stacked areas of concurrent environment steps per tenant in ``row``; tenants not yet
    ``shown`` go in the legend (none when ``shown`` is None). ``share``: this run's makespan
    over the figure's, so that bins are as wide in every run."""
    span = max(makespan(df), 1e-9)
    edges = np.linspace(0.0, span, max(1, round(ENV_BINS * share)) + 1)
    conc = env_concurrency(df, edges)
    for tenant in conc.columns:
        legend = shown is not None and tenant not in shown
        if legend:
            shown.add(tenant)
        fig.add_trace(
            go.Scatter(
                x=edges[:-1],
                y=conc[tenant].to_numpy(),
                mode="lines",
                line={"width": 0, "shape": "hv", "color": colors.get(tenant, "#999")},
                fillcolor=colors.get(tenant, "#999"),
                stackgroup=f"env{row}",
                name=tenant,
                legendgroup=tenant,
                showlegend=legend,
                hovertemplate=f"{tenant}: %{{y:.1f}} env steps<extra></extra>",
            ),
            row=row,
            col=1,
        )
    fig.update_yaxes(title_text="env steps", tickfont={"size": LABEL_PX}, row=row, col=1)


def _lanes(
    fig: go.Figure, seg: pd.DataFrame, jcolors: dict[str, str], shown: set[str], row: int
) -> None:
    """Device lanes from :func:`lane_segments` bars ``seg`` in ``row``."""
    devices = seg.drop_duplicates("lane").sort_values("lane")["device"].tolist()
    lane_of = {lane: i for i, lane in enumerate(sorted(seg["lane"].unique()))}
    for kind, (offset, thickness, hatch) in LANE_SHAPE.items():
        rows = seg[seg["kind"] == kind]
        for tenant, part in rows.groupby("tenant", sort=False):
            legend = kind not in STRIP_COLOR and tenant not in shown
            if legend:
                shown.add(tenant)
            lanes = part["lane"].map(lane_of).to_numpy()
            fig.add_trace(_lane_bars(kind, tenant, part, lanes + offset, thickness, hatch,
                                     jcolors, legend), row=row, col=1)  # fmt: skip
    n = len(devices)
    fig.update_yaxes(
        tickmode="array", tickvals=list(range(n)), ticktext=devices, autorange=False,
        range=[n - 0.5, -0.5], row=row, col=1, tickfont={"size": LABEL_PX},
    )  # fmt: skip


def _lane_bars(kind, tenant, part, y, thickness, hatch, jcolors, legend) -> go.Bar:
    """The bars of one kind of work of one tenant's jobs on the lanes."""
    color = STRIP_COLOR[kind] if kind in STRIP_COLOR else part["job"].map(jcolors).to_numpy()
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
    return go.Bar(
        orientation="h",
        y=y,
        base=part["start_s"].to_numpy(),
        x=(part["end_s"] - part["start_s"]).to_numpy(),
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
    )


def _heatmaps(
    fig: go.Figure, df: pd.DataFrame, bins: int, row: int, colorbar: bool, total: int
) -> None:
    """Busy fraction per pool (``row``) and per device (the row below) in ``bins`` bins."""
    devs, edges, busy = device_busy_fraction(df, bins)
    labels, rows, jobs = grouped_rows(devs, busy, main_job(df, devs, edges), MAX_DEVICE_ROWS)
    work = df[df["job"] != ""]
    tenant_of = dict(zip(work["job"].astype(object), work["tenant"].astype(object), strict=True))
    tenants = np.vectorize(lambda j: tenant_of.get(j, ""), otypes=[object])(jobs)
    pools = list(dict.fromkeys(devs["pool"]))
    pool_busy = np.array([busy[(devs["pool"] == p).to_numpy()].mean(axis=0) for p in pools])
    heat = {"colorscale": HEAT_SCALE, "zmin": 0.0, "zmax": 1.0, "x": (edges[:-1] + edges[1:]) / 2}
    fig.add_trace(
        go.Heatmap(
            z=pool_busy,
            y=[f"pool {p}" for p in pools],
            showscale=False,
            hovertemplate="%{y}<br>t = %{x:,.0f} s<br>busy %{z:.0%}<extra></extra>",
            **heat,
        ),
        row=row,
        col=1,
    )
    bar = {"title": {"text": "busy"}, "tickformat": ".0%", "thickness": 14,
           "len": min(1.0, 400 / total), "y": 1.0, "yanchor": "top"}  # fmt: skip
    fig.add_trace(
        go.Heatmap(
            z=rows,
            y=labels,
            customdata=np.dstack([jobs, tenants]),
            showscale=colorbar,
            colorbar=bar,
            hovertemplate=(
                "%{y}<br>t = %{x:,.0f} s<br>busy %{z:.0%}<br>"
                "mostly %{customdata[0]} (tenant %{customdata[1]})<extra></extra>"
            ),
            **heat,
        ),
        row=row + 1,
        col=1,
    )
    fig.update_yaxes(autorange="reversed", tickfont={"size": LABEL_PX}, row=row, col=1)
    fig.update_yaxes(autorange="reversed", tickfont={"size": LABEL_PX}, row=row + 1, col=1)
