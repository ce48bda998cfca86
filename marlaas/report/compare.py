"""Side-by-side comparison of several runs: the headline table with relative differences
against the first run, and a static figure (makespan, utilization, mean and p90 JCT)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from marlaas.report import fmt
from marlaas.report.names import metric


def comparison_table(summaries: Mapping[str, dict]) -> pd.DataFrame:
    """One row per run: makespan_s, utilization (overall and ``util_<pool>``), jct_mean_s,
    jct_p90_s, staleness_mean, adapter_swaps, jain_slowdown (from
    :func:`marlaas.metrics.summary.summarize`)."""
    rows = {}
    for label, s in summaries.items():
        row = {
            "makespan_s": s["makespan_s"],
            "utilization": s["utilization"],
            **{f"util_{p}": v for p, v in s["utilization_by_pool"].items()},
            "jct_mean_s": s["jct_mean_s"],
            "jct_p90_s": s["jct_p90_s"],
            "staleness_mean": s["staleness_mean"],
            "adapter_swaps": s["adapter_swaps"],
            "jain_slowdown": s["fairness"]["jain_slowdown"],
        }
        rows[label] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "run"
    return table


def relative_difference(value, reference) -> float:
    """(value - reference) / |reference|; NaN when either is missing or the reference is 0."""
    try:
        v, r = float(value), float(reference)
    except (TypeError, ValueError):
        return float("nan")
    if not (np.isfinite(v) and np.isfinite(r)) or r == 0:
        return float("nan")
    return (v - r) / abs(r)


ORDER = (
    "makespan_s", "utilization", "utilization_by_pool", "jct_", "staleness_", "adapter_swaps",
    "idle_by_cause_device_s", "fairness", "n_",
)  # fmt: skip
"""Order of the headline metrics: by the first of these prefixes their key starts with."""


def _metric_order(key: str) -> int:
    return next((i for i, p in enumerate(ORDER) if key.startswith(p)), len(ORDER))


def difference_table(summaries: Mapping[str, dict], devices: str = "device") -> pd.DataFrame:
    """Headline metrics for people: one row per metric (human name with unit), one column
    per run (formatted values), and for every run after the first a column ``<run> vs
    <first>`` with the relative difference (``+12.3%``). ``summaries`` maps run labels to
    :func:`marlaas.metrics.summary.summarize` dicts, the reference run first."""
    flat = {label: pd.json_normalize(s, sep=".").iloc[0] for label, s in summaries.items()}
    keys = sorted(dict.fromkeys(k for f in flat.values() for k in f.index), key=_metric_order)
    labels = list(flat)
    rows = {}
    for key in keys:
        name, formatter = metric(key, devices)
        values = [flat[label].get(key) for label in labels]
        row = {label: formatter(v) for label, v in zip(labels, values, strict=True)}
        for label, v in zip(labels[1:], values[1:], strict=True):
            row[f"{label} vs {labels[0]}"] = fmt.relative(relative_difference(v, values[0]))
        rows[name] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "metric"
    return table


def plot_comparison(summaries: Mapping[str, dict]) -> Figure:
    """Four bar panels, one bar (group) per run: makespan [s], utilization per pool and
    overall, mean JCT [s], p90 JCT [s]."""
    table = comparison_table(summaries).astype(float)
    runs = list(table.index)
    x = np.arange(len(runs))
    fig = Figure(figsize=(12, 7))
    axes = fig.subplots(2, 2).ravel()
    panels = [
        ("makespan_s", "makespan [s]"),
        (None, "utilization"),
        ("jct_mean_s", "mean JCT [s]"),
        ("jct_p90_s", "p90 JCT [s]"),
    ]
    for ax, (col, name) in zip(axes, panels, strict=True):
        if col is None:
            cols = ["utilization"] + [c for c in table.columns if c.startswith("util_")]
            width = 0.8 / len(cols)
            for i, c in enumerate(cols):
                bars = ax.bar(
                    x + (i - (len(cols) - 1) / 2) * width,
                    table[c],
                    width,
                    label="overall" if c == "utilization" else c[5:],
                )
            ax.set_ylim(0, 1.05)
            ax.legend(fontsize=8)
        else:
            bars = ax.bar(x, table[col].fillna(0.0), color="#4c72b0", label=col)
            ax.bar_label(bars, fmt="%.0f", fontsize=8)
        ax.set_xticks(x, runs, rotation=15 if len(runs) > 3 else 0, fontsize=8)
        ax.set_title(name)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Run comparison")
    fig.tight_layout()
    return fig
