"""Idle time by cause: stacked bars of device-seconds per pool."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from marlaas.metrics.idle import idle_breakdown
from marlaas.report.style import CAUSE_COLORS


def plot_idle(df: pd.DataFrame, title: str = "") -> Figure:
    """Idle device-seconds [s] per pool, stacked by cause (bar container labels = causes)."""
    table = idle_breakdown(df)
    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot()
    x = np.arange(len(table.index))
    bottom = np.zeros(len(x))
    for cause in table.columns:
        values = table[cause].to_numpy()
        if not values.any():
            continue
        ax.bar(x, values, bottom=bottom, label=cause, color=CAUSE_COLORS.get(cause))
        bottom += values
    ax.set_xticks(x, table.index)
    ax.set_ylabel("idle device-seconds [s]")
    ax.set_title(title or "Idle time by cause")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig
