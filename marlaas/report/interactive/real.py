"""Interactive figures of a real run: reward curves (rewards.csv), resident memory over the
run (memory.csv) and held-out evaluation (eval.json)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from marlaas.report.palette import job_colors

LAYOUT = {
    "template": "plotly_white",
    "margin": {"l": 70, "r": 20, "t": 50, "b": 50},
    "hoverlabel": {"align": "left"},
}
MODEL_COLORS = {"base": "#b0b0b0", "trained": "#2f6db5"}


def plot_rewards(rewards: pd.DataFrame, title: str = "") -> go.Figure:
    """Mean reward per training step, one line per job (trace name = job; data = the
    ``mean_reward`` column of rewards.csv, unchanged)."""
    tenant = rewards["tenant"] if "tenant" in rewards else pd.Series("", index=rewards.index)
    colors = job_colors(dict(zip(rewards["job"], tenant.astype(str), strict=True)))
    fig = go.Figure()
    for job, rows in rewards.sort_values(["job", "step"]).groupby("job", sort=True):
        who = f"{job} ({rows['tenant'].iloc[0]})" if "tenant" in rows else str(job)
        fig.add_trace(
            go.Scatter(
                x=rows["step"],
                y=rows["mean_reward"],
                mode="lines+markers",
                marker={"size": 5},
                line={"color": colors.get(job)},
                name=who,
                meta=str(job),
                hovertemplate=f"{who}<br>step %{{x}}<br>mean reward %{{y:.3f}}<extra></extra>",
            )
        )
    last = int(rewards["step"].max()) if len(rewards) else 1
    fig.update_layout(
        title={"text": title, "x": 0},
        xaxis={"title": "training step", "dtick": max(1, -(-last // 10))},
        yaxis_title="mean reward",
        height=380,
        **LAYOUT,
    )
    return fig


def plot_rewards_compared(curves: list[tuple[str, pd.DataFrame]]) -> go.Figure:
    """Several runs' reward curves side by side: one panel per job, one line per run
    (``curves``: (run label, its rewards.csv frame); trace name = the run's label, meta = the
    job; x = training step, the run's time of each step in the hover)."""
    jobs = sorted({str(j) for _, rewards in curves for j in rewards["job"]})
    fig = make_subplots(rows=1, cols=max(len(jobs), 1), subplot_titles=jobs, shared_yaxes=True)
    palette = ["#2f6db5", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    for i, (label, rewards) in enumerate(curves):
        color = palette[i % len(palette)]
        for col, job in enumerate(jobs, start=1):
            rows = rewards[rewards["job"].astype(str) == job].sort_values("step")
            if not len(rows):
                continue
            times = rows["time_s"] if "time_s" in rows else pd.Series(float("nan"), rows.index)
            fig.add_trace(
                go.Scatter(
                    x=rows["step"], y=rows["mean_reward"], customdata=times,
                    mode="lines+markers", marker={"size": 4}, line={"color": color},
                    name=label, meta=job, legendgroup=label, showlegend=col == 1,
                    hovertemplate=f"{label}<br>{job} step %{{x}} (at %{{customdata:,.0f}} s)"
                                  "<br>mean reward %{y:.3f}<extra></extra>",
                ),
                row=1, col=col,
            )  # fmt: skip
        fig.update_xaxes(title_text="training step")
    fig.update_yaxes(title_text="mean reward", row=1, col=1)
    fig.update_layout(height=380, **LAYOUT)
    return fig


def newest(evaluation: pd.DataFrame) -> pd.DataFrame:
    """The rows of each job's base model and of its newest evaluated adapter version."""
    if "version" not in evaluation:
        return evaluation
    version = evaluation["version"].fillna(-1)
    return evaluation[version == version.groupby([evaluation["job"], evaluation["model"]])
                      .transform("max")]  # fmt: skip


def accuracy_pivot(evaluation: pd.DataFrame) -> pd.DataFrame:
    """job x model (``base``, ``trained``: its newest version) accuracy in [0, 1], with
    ``change`` when both."""
    index = [c for c in ("job", "tenant") if c in evaluation]
    table = newest(evaluation).pivot_table(index=index, columns="model", values="accuracy")
    table.columns.name = None
    if {"base", "trained"} <= set(table.columns):
        table["change"] = table["trained"] - table["base"]
    return table.reset_index()


def memory_peak(memory: pd.DataFrame) -> tuple[float, float]:
    """(the process's peak [MiB], the run time [s] of the first sample that saw it) of a
    memory.csv frame with rows."""
    top = float(memory["peak_rss_mb"].max())
    return top, float(memory.loc[memory["peak_rss_mb"] >= top, "time_s"].iloc[0])


def plot_memory(memory: pd.DataFrame, title: str = "") -> go.Figure:
    """The run's resident memory over its clock [MiB] (``rss_mb``, sampled) and the process's
    high-water mark so far (``peak_rss_mb``), the peak marked where it was first seen."""
    memory = memory.sort_values("time_s")
    fig = go.Figure()
    for column, name, line in (
        ("rss_mb", "resident (all processes)", {"color": "#2f6db5", "width": 1}),
        ("peak_rss_mb", "peak so far (this process)", {"color": "#d62728", "dash": "dash"}),
    ):
        fig.add_trace(
            go.Scatter(
                x=memory["time_s"], y=memory[column], mode="lines", line=line, name=name,
                hovertemplate=f"{name}<br>%{{x:.1f}} s<br>%{{y:,.0f}} MiB<extra></extra>",
            )
        )  # fmt: skip
    if len(memory):
        top, at = memory_peak(memory)
        fig.add_annotation(x=at, y=top, text=f"peak {top:,.0f} MiB at {at:,.1f} s", ay=-30)
    fig.update_layout(
        title={"text": title, "x": 0},
        xaxis_title="run time [s] (negative: loading the models)",
        yaxis_title="resident memory [MiB]",
        height=380,
        **LAYOUT,
    )
    return fig


def accuracy_rows(evaluation: pd.DataFrame) -> pd.DataFrame:
    """job, model, version, time [s], accuracy and its 95% interval, as text, one row per
    evaluated model."""
    rows = evaluation.sort_values(["job", "version"])
    out = pd.DataFrame({
        "job": rows["job"], "model": rows["model"],
        "version": [("-" if pd.isna(v) or v < 0 else str(int(v))) for v in rows["version"]],
        "time [s]": [("-" if pd.isna(t) else f"{t:,.0f}") for t in rows["time_s"]],
        "accuracy": [f"{a * 100:.1f}%" for a in rows["accuracy"]],
    })  # fmt: skip
    if {"ci_low", "ci_high"} <= set(rows.columns):
        out["95% interval"] = [
            "-" if pd.isna(lo) else f"{lo * 100:.1f}-{hi * 100:.1f}%"
            for lo, hi in zip(rows["ci_low"], rows["ci_high"], strict=True)
        ]
    return out.reset_index(drop=True)


def plot_accuracy_over_time(evaluation: pd.DataFrame, title: str = "") -> go.Figure:
    """Held-out accuracy against the run's time each adapter version was made (the base
    model at 0 s), one line per job, the 95% interval as error bars (trace name = the job)."""
    rows = evaluation.dropna(subset=["time_s"]).sort_values(["job", "time_s"])
    colors = job_colors(dict(zip(rows["job"], rows.get("tenant", rows["job"]).astype(str),
                                 strict=True)))  # fmt: skip
    fig = go.Figure()
    for job, part in rows.groupby("job", sort=True):
        error = {}
        if {"ci_low", "ci_high"} <= set(part.columns) and part["ci_low"].notna().all():
            error = {"error_y": {"type": "data", "symmetric": False,
                                 "array": part["ci_high"] - part["accuracy"],
                                 "arrayminus": part["accuracy"] - part["ci_low"]}}  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=part["time_s"], y=part["accuracy"], mode="lines+markers", name=str(job),
                line={"color": colors.get(job)}, customdata=part["version"],
                hovertemplate=f"{job} · version %{{customdata}}<br>%{{x:,.0f}} s<br>accuracy "
                "%{y:.1%}<extra></extra>", **error,
            )
        )  # fmt: skip
    fig.update_layout(
        title={"text": title, "x": 0},
        xaxis={"title": "training time [s] (the run's clock when the version was made)"},
        yaxis={"title": "held-out accuracy", "tickformat": ".0%", "range": [0, 1.05]},
        height=380,
        **LAYOUT,
    )
    return fig


def plot_evaluation(evaluation: pd.DataFrame, title: str = "") -> go.Figure:
    """Held-out accuracy per job, one bar per model (trace name = the model; the trained
    model: its newest evaluated version)."""
    evaluation = newest(evaluation)
    fig = go.Figure()
    for model, rows in evaluation.groupby("model", sort=True):
        prompts = rows["prompts"] if "prompts" in rows else pd.Series("?", index=rows.index)
        fig.add_trace(
            go.Bar(
                x=rows["job"],
                y=rows["accuracy"],
                name=str(model),
                marker_color=MODEL_COLORS.get(str(model)),
                customdata=prompts.to_numpy(),
                text=[f"{a:.0%}" for a in rows["accuracy"]],
                textposition="outside",
                hovertemplate=f"%{{x}} · {model}<br>accuracy %{{y:.1%}} on %{{customdata}} "
                "held-out prompts<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="group",
        title={"text": title, "x": 0},
        yaxis={"title": "held-out accuracy", "tickformat": ".0%", "range": [0, 1.1]},
        height=360,
        **LAYOUT,
    )
    return fig
