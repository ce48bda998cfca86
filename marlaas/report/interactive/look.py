"""The shared look of the interactive figures: label sizes and the base layout."""

from __future__ import annotations

LABEL_PX = 11
"""Font size of tick labels (device, job and run names) [px]: readable at 64 devices."""
ROW_PX = 16
"""Height of one job's or one heatmap device's row [px]: room for a LABEL_PX label."""
LAYOUT = {
    "template": "plotly_white",
    "margin": {"l": 70, "r": 20, "t": 50, "b": 50},
    "hoverlabel": {"align": "left"},
    "font": {"size": 12},
}
"""Layout every figure starts from."""


def run_title(label: str) -> str:
    """The heading of one run's part of a figure that compares runs."""
    return f"<b>{label}</b>"
