"""Per-job progress (train steps completed over time) and completion times."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from marlaas.metrics.jobs import job_table, train_progress
from marlaas.report.palette import job_colors


def plot_jobs(
    df: pd.DataFrame, arrivals: Mapping[str, float] | None = None, title: str = ""
) -> Figure:
    """Left: steps completed [count] over time [s] per job (colour = tenant). Right: each
    job's span from arrival to completion [s], labelled with its completion time (JCT)."""
    jobs = job_table(df, arrivals)
    prog = train_progress(df)
    colors = job_colors(dict(zip(jobs["job"], jobs["tenant"], strict=True)))
    fig = Figure(figsize=(14, max(4.0, 0.2 * len(jobs) + 1.5)))
    ax_p, ax_j = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for job, rows in prog.groupby("job", sort=False):
        t = np.r_[0.0, rows["t_s"].to_numpy()]
        n = np.r_[0, rows["steps_done"].to_numpy()]
        line = ax_p.step(t, n, where="post", color=colors.get(job), lw=1)
        line[0].set_gid(f"progress-{job}")
    ax_p.set_xlabel("time [s]")
    ax_p.set_ylabel("train steps completed")
    ax_p.set_title("Progress per job (colour = job, shades of its tenant's)")
    ax_p.grid(alpha=0.3)

    y = np.arange(len(jobs))
    ax_j.barh(
        y,
        jobs["jct_s"].fillna(0.0),
        left=jobs["arrival_s"],
        color=[colors.get(j, "grey") for j in jobs["job"]],
    )
    for i, (jct, end) in enumerate(zip(jobs["jct_s"], jobs["completion_s"], strict=True)):
        if np.isfinite(jct):
            ax_j.text(end, i, f" {jct:.0f} s", va="center", fontsize=7)
    ax_j.set_yticks(y, jobs["job"], fontsize=8 if len(jobs) > 20 else 9)
    ax_j.invert_yaxis()
    ax_j.set_xlabel("time [s] (bar: arrival to completion)")
    ax_j.set_title("Job completion times")
    ax_j.grid(axis="x", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
