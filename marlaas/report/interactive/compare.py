"""Interactive comparison of several runs: makespan, utilization per pool, mean and p90 job
completion time, one bar per run coloured by the run's kind."""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from marlaas.report.compare import comparison_table

KIND_COLORS = {"simulation": "#2f6db5", "real run": "#d9822b", "replay": "#3a9e5f"}
"""Bar colour per run kind (others grey)."""
PANELS = (
    ("makespan_s", "makespan [s]", ",.0f"),
    ("utilization", "utilization, all devices", ".1%"),
    ("jct_mean_s", "job completion time, mean [s]", ",.0f"),
    ("jct_p90_s", "job completion time, p90 [s]", ",.0f"),
)
"""(column of comparison_table, panel title, number format) of each panel."""


def plot_comparison(summaries: Mapping[str, dict], kinds: Mapping[str, str]) -> go.Figure:
    """Four panels of bars, one bar per run (x = run label; data = comparison_table).
    ``kinds`` maps run labels to human kind names (see marlaas.report.labels.kind_name)."""
    table = comparison_table(summaries)
    runs = list(table.index)
    fig = make_subplots(rows=2, cols=2, subplot_titles=[p[1] for p in PANELS])
    colors = [KIND_COLORS.get(kinds.get(r, ""), "#888") for r in runs]
    for i, (col, name, number) in enumerate(PANELS):
        values = table[col].astype(float)
        fig.add_trace(
            go.Bar(
                x=runs,
                y=values,
                marker_color=colors,
                name=name,
                meta=col,
                customdata=[kinds.get(r, "") for r in runs],
                text=[f"{v:{number}}" if v == v else "-" for v in values],
                textposition="auto",
                showlegend=False,
                hovertemplate=f"%{{x}} (%{{customdata}})<br>{name}: %{{y:{number}}}<extra></extra>",
            ),
            row=i // 2 + 1,
            col=i % 2 + 1,
        )
    fig.update_yaxes(tickformat=".0%", range=[0, 1.05], row=1, col=2)
    present = sorted({kinds.get(r, "") for r in runs})
    note = "bar colour = run kind: " + ", ".join(
        f"<span style='color:{KIND_COLORS.get(k, '#888')}'>■</span> {k}" for k in present
    )
    fig.update_layout(
        template="plotly_white",
        height=560,
        title={"text": f"Comparison of runs<br><sup>{note}</sup>", "x": 0},
        margin={"l": 70, "r": 20, "t": 90, "b": 50},
    )
    return fig
