"""Staleness distribution per job: share of train steps at each lag [versions]."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from marlaas.metrics.staleness import staleness_counts


def plot_staleness(df: pd.DataFrame, title: str = "") -> Figure:
    """Horizontal stacked bars per job: fraction of its train steps per staleness value."""
    counts = staleness_counts(df)
    fig = Figure(figsize=(10, max(3.0, 0.22 * len(counts) + 1.5)))
    ax = fig.add_subplot()
    if counts.empty:
        ax.text(0.5, 0.5, "no train steps with staleness", ha="center", transform=ax.transAxes)
        return fig
    share = counts.div(counts.sum(axis=1), axis=0)
    cmap = colormaps["viridis"]
    n_values = len(share.columns)
    y = np.arange(len(share))
    left = np.zeros(len(share))
    for i, value in enumerate(share.columns):
        ax.barh(
            y,
            share[value],
            left=left,
            label=f"{value}",
            color=cmap(i / max(n_values - 1, 1)),
        )
        left += share[value].to_numpy()
    ax.set_yticks(y, share.index, fontsize=8 if len(share) > 20 else 9)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of train steps")
    ax.set_title(title or "Staleness per job [versions behind]")
    ax.legend(title="staleness", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    return fig
