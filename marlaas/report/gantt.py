"""Gantt timeline: one lane per device coloured by tenant, the stage shown by style, plus an
environment lane with the number of concurrent environment steps per tenant.

Drawing 1e6 rows is made cheap by merging, per (device, tenant, kind), intervals less than a
pixel apart, widening what is left to at least a pixel, and drawing each kind as one
rasterised PolyCollection.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from marlaas.metrics import cumulative_overlap, device_table, makespan, merge_intervals
from marlaas.report.style import DPI, KIND_STYLE, tenant_colors

WIDTH_IN = 16.0
"""Figure width [in]; with DPI this fixes the pixel size used for downsampling."""
PLOT_FRACTION = 0.83
"""Share of the figure width taken by the time axis."""


def gantt_segments(df: pd.DataFrame, pixel_s: float) -> pd.DataFrame:
    """Drawable segments: columns ``lane`` (device index), ``device``, ``tenant``, ``kind``,
    ``start_s``, ``end_s`` [s]. Intervals of one (device, tenant, kind) closer than
    ``pixel_s`` [s] are merged, and segments are at least ``pixel_s`` wide."""
    devs = device_table(df)
    span = makespan(df)
    kinds = list(KIND_STYLE)
    work = df[df["kind"].isin(kinds) & (df["device"] != "")]
    lane = pd.Index(devs["device"]).get_indexer(work["device"].astype(object))
    tenant_code, tenants = pd.factorize(work["tenant"].astype(object))
    kind_code = pd.Index(kinds).get_indexer(work["kind"].astype(object))
    n_t, n_k = max(len(tenants), 1), len(kinds)
    key = (lane.astype(np.int64) * n_t + tenant_code) * n_k + kind_code
    start = np.clip(work["start_s"].to_numpy(float), 0.0, span)
    end = np.clip(work["end_s"].to_numpy(float), 0.0, span)
    k, s, e = merge_intervals(key, start, end, gap=pixel_s)
    e = np.maximum(e, s + pixel_s)
    return pd.DataFrame(
        {
            "lane": k // (n_t * n_k),
            "device": devs["device"].to_numpy()[k // (n_t * n_k)] if len(k) else [],
            "tenant": np.asarray(tenants, dtype=object)[(k // n_k) % n_t] if len(k) else [],
            "kind": np.asarray(kinds, dtype=object)[k % n_k] if len(k) else [],
            "start_s": s,
            "end_s": e,
        }
    )


def env_concurrency(df: pd.DataFrame, edges: np.ndarray) -> pd.DataFrame:
    """Mean number of concurrent environment steps per tenant in each bin of ``edges`` [s]."""
    env = df[df["kind"] == "env"]
    width = np.diff(edges)
    out = {}
    for tenant, rows in env.groupby(env["tenant"].astype(object), sort=False):
        s, e = rows["start_s"].to_numpy(float), rows["end_s"].to_numpy(float)
        out[tenant] = np.diff(cumulative_overlap(s, e, edges)) / width
    return pd.DataFrame(out, index=edges[:-1])


def plot_gantt(df: pd.DataFrame, title: str = "") -> Figure:
    """The Gantt figure of one run (time [s] on x, one lane per device, env lane on top)."""
    devs = device_table(df)
    span = max(makespan(df), 1e-9)
    pixel_s = span / (WIDTH_IN * DPI * PLOT_FRACTION)
    seg = gantt_segments(df, pixel_s)
    colors = tenant_colors(df["tenant"].unique())
    n = len(devs)
    env_in, lanes_in, top_in, bottom_in, gap_in = 1.3, max(0.22 * n, 0.8), 0.4, 0.6, 0.15
    height_in = env_in + lanes_in + top_in + bottom_in + gap_in
    fig = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI)
    grid = fig.add_gridspec(
        2,
        1,
        height_ratios=[env_in, lanes_in],
        hspace=gap_in / ((env_in + lanes_in) / 2),
        left=0.07,
        right=0.07 + PLOT_FRACTION,
        top=1 - top_in / height_in,
        bottom=bottom_in / height_in,
    )
    ax_env = fig.add_subplot(grid[0])
    ax = fig.add_subplot(grid[1], sharex=ax_env)

    edges = np.linspace(0.0, span, int(WIDTH_IN * DPI * PLOT_FRACTION / 2) + 1)
    conc = env_concurrency(df, edges)
    if not conc.empty:
        ax_env.stackplot(
            edges[:-1],
            conc.to_numpy().T,
            step="post",
            linewidth=0,
            colors=[colors.get(t, "grey") for t in conc.columns],
        )
    ax_env.set_ylabel("env steps\n(concurrent)")
    ax_env.tick_params(labelbottom=False)
    ax_env.set_title(title or "Timeline")

    for kind, style in KIND_STYLE.items():
        rows = seg[seg["kind"] == kind]
        if rows.empty:
            continue
        y0 = rows["lane"].to_numpy(float) + 0.4 - style["height"]
        y1 = y0 + style["height"]
        s, e = rows["start_s"].to_numpy(), rows["end_s"].to_numpy()
        verts = np.stack([np.column_stack(p) for p in ((s, y0), (s, y1), (e, y1), (e, y0))], axis=1)
        coll = PolyCollection(
            verts,
            facecolors=[colors.get(t, "grey") for t in rows["tenant"]],
            alpha=style["alpha"],
            edgecolors="black" if style["edge"] else "none",
            linewidths=style["edge"],
            rasterized=True,
            label=kind,
        )
        coll.set_gid(f"gantt-{kind}")
        ax.add_collection(coll)
    ax.set_xlim(0.0, span)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_yticks(range(n), devs["device"], fontsize=7 if n > 24 else 9)
    ax.set_xlabel("time [s]")
    ax.grid(axis="x", alpha=0.3)
    kind_handles = [
        Patch(facecolor="grey", alpha=st["alpha"], edgecolor="black", linewidth=st["edge"], label=k)
        for k, st in KIND_STYLE.items()
    ]
    tenant_handles = [Patch(color=c, label=t) for t, c in list(colors.items())[:20]]
    ax.legend(
        handles=kind_handles + tenant_handles,
        loc="upper left",
        bbox_to_anchor=(1.005, 1.0),
        fontsize=7,
        frameon=False,
        title="kind / tenant",
        title_fontsize=8,
    )
    return fig
