"""Static timeline (PNG/SVG): device lanes for a few devices, a busy-fraction heatmap for
many, under an environment row with the number of concurrent environment steps per tenant.

It draws what the interactive timeline draws (:mod:`marlaas.report.interactive.timeline`):
lanes for up to ``LANE_LIMIT`` devices with bars coloured by job (a shade of the tenant's
colour), adapter loads as a strip at the top of a lane and weight syncs at the bottom; more
devices become one heatmap row per device. Drawing 1e6 rows stays cheap: bars of one (device,
job, kind, version) less than a pixel apart are merged, widened to at least a pixel, and each
kind is one rasterised PolyCollection.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.collections import PolyCollection
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from marlaas.metrics.devices import device_table, makespan
from marlaas.report.interactive.timeline import HEAT_BINS, HEAT_SCALE, LANE_LIMIT, MAX_BARS
from marlaas.report.palette import job_colors, tenant_colors
from marlaas.report.style import DPI, KIND_STYLE
from marlaas.report.timeline_data import device_busy_fraction, env_concurrency, lane_segments

WIDTH_IN = 16.0
"""Figure width [in]; with DPI this fixes the pixel size used for downsampling."""
PLOT_FRACTION = 0.78
"""Share of the figure width taken by the time axis."""
HEAT_CMAP = LinearSegmentedColormap.from_list("busy", [(v, c) for v, c in HEAT_SCALE])


def gantt_segments(df: pd.DataFrame, pixel_s: float) -> pd.DataFrame:
    """Drawable bars (see :func:`marlaas.report.timeline_data.lane_segments`) merged when less
    than ``pixel_s`` [s] apart, and at least ``pixel_s`` wide."""
    seg = lane_segments(df, gap_s=pixel_s)
    seg["end_s"] = np.maximum(seg["end_s"].to_numpy(), seg["start_s"].to_numpy() + pixel_s)
    return seg


def plot_gantt(df: pd.DataFrame, title: str = "") -> Figure:
    """The timeline figure of one run: time [s] on x, the environment row on top, then one
    lane per device (``LANE_LIMIT`` devices at most) or a busy-fraction heatmap."""
    devs = device_table(df)
    span = max(makespan(df), 1e-9)
    pixel_s = span / (WIDTH_IN * DPI * PLOT_FRACTION)
    n = len(devs)
    seg = gantt_segments(df, pixel_s) if n <= LANE_LIMIT else None
    lanes = seg is not None and len(seg) <= MAX_BARS
    work = df[df["job"] != ""]
    job_tenant = dict(zip(work["job"].astype(object), work["tenant"].astype(object), strict=True))
    tcolors = tenant_colors(job_tenant.values())
    env_in = 1.2
    lanes_in = max((0.24 if lanes else 0.11) * n, 0.8)
    top_in, bottom_in, gap_in = 0.4, 0.6, 0.15
    height_in = env_in + lanes_in + top_in + bottom_in + gap_in
    fig = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI)
    grid = fig.add_gridspec(
        2, 1, height_ratios=[env_in, lanes_in], hspace=gap_in / ((env_in + lanes_in) / 2),
        left=0.08, right=0.08 + PLOT_FRACTION, top=1 - top_in / height_in,
        bottom=bottom_in / height_in,
    )  # fmt: skip
    ax_env = fig.add_subplot(grid[0])
    ax = fig.add_subplot(grid[1], sharex=ax_env)

    edges = np.linspace(0.0, span, int(WIDTH_IN * DPI * PLOT_FRACTION / 2) + 1)
    conc = env_concurrency(df, edges)
    if not conc.empty:
        ax_env.stackplot(
            edges[:-1], conc.to_numpy().T, step="post", linewidth=0,
            colors=[tcolors.get(t, "grey") for t in conc.columns],
        )  # fmt: skip
    ax_env.set_ylabel("env steps\n(concurrent)")
    ax_env.tick_params(labelbottom=False)
    ax_env.set_title(title or "Timeline")
    if lanes:
        _draw_lanes(ax, seg, job_colors(job_tenant))
        handles = [
            Patch(facecolor="#999", label="generate"),
            Patch(facecolor="#999", hatch="////", edgecolor="white", label="train"),
            Patch(facecolor=KIND_STYLE["adapter_load"]["color"], label="adapter load (top)"),
            Patch(facecolor=KIND_STYLE["sync"]["color"], label="weight sync (bottom)"),
        ]
    else:
        _draw_heatmap(ax, df)
        handles = []
    ax.set_xlim(0.0, span)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_yticks(range(n), devs["device"], fontsize=9 if n <= 24 else 6)
    ax.set_xlabel("time [s]")
    ax.grid(axis="x", alpha=0.3)
    handles += [Patch(color=c, label=t) for t, c in tcolors.items()]
    ax_env.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7,
        frameon=False, ncols=1 + len(handles) // 40, title="colour = tenant", title_fontsize=8,
    )  # fmt: skip
    return fig


def _draw_lanes(ax, seg: pd.DataFrame, jcolors: dict[str, str]) -> None:
    for kind, style in KIND_STYLE.items():
        rows = seg[seg["kind"] == kind]
        if rows.empty:
            continue
        y0 = rows["lane"].to_numpy(float) + style["offset"] - style["height"] / 2
        y1 = y0 + style["height"]
        s, e = rows["start_s"].to_numpy(), rows["end_s"].to_numpy()
        verts = np.stack([np.column_stack(p) for p in ((s, y0), (s, y1), (e, y1), (e, y0))], axis=1)
        colors = style["color"] or [jcolors.get(j, "grey") for j in rows["job"]]
        coll = PolyCollection(
            verts, facecolors=colors, edgecolors="none", rasterized=True, label=kind,
            hatch="////" if kind == "train" else None, hatchcolor="white",
        )  # fmt: skip
        coll.set_gid(f"gantt-{kind}")
        ax.add_collection(coll)


def _draw_heatmap(ax, df: pd.DataFrame) -> None:
    devs, edges, busy = device_busy_fraction(df, HEAT_BINS)
    image = ax.imshow(
        busy, aspect="auto", interpolation="nearest", cmap=HEAT_CMAP, vmin=0.0, vmax=1.0,
        extent=(edges[0], edges[-1], len(devs) - 0.5, -0.5), rasterized=True,
    )  # fmt: skip
    image.set_gid("gantt-heatmap")
    bar = ax.figure.colorbar(image, cax=ax.inset_axes((1.01, 0.0, 0.012, 0.25)))
    bar.set_label("busy fraction")
