"""Utilization over time: busy fraction per pool and overall, as step curves."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from marlaas.metrics.utilization import utilization_by_pool, utilization_over_time


def plot_utilization(df: pd.DataFrame, title: str = "", bin_s: float | None = None) -> Figure:
    """Busy fraction [0, 1] per pool and overall over time [s].

    Each curve is a ``StepPatch`` whose gid is ``util-<pool>`` (``util-overall``); its data are
    exactly :func:`marlaas.metrics.utilization.utilization_over_time`.
    """
    series = utilization_over_time(df, bin_s)
    means = utilization_by_pool(df)
    fig = Figure(figsize=(12, 4))
    ax = fig.add_subplot()
    edges = np.r_[series["t_start_s"].to_numpy(), series["t_end_s"].to_numpy()[-1:]]
    pools = [c for c in series.columns if c not in ("t_start_s", "t_end_s")]
    for pool in pools:
        overall = pool == "overall"
        label = f"{pool} (mean {means[pool]:.0%})" if pool in means else "overall"
        style = {"color": "black", "linewidth": 2.0} if overall else {"linewidth": 1.2}
        patch = ax.stairs(series[pool].to_numpy(), edges, label=label, **style)
        patch.set_gid(f"util-{pool}")
    ax.set_ylim(0, 1.05)
    ax.set_xlim(0, edges[-1] if len(edges) else 1)
    ax.set_xlabel("time [s]")
    ax.set_ylabel("busy fraction")
    ax.set_title(title or "Utilization over time")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
