"""Shared look of the static (matplotlib) report figures: styles per kind, colours per idle
cause, saving PNG + SVG. Tenant and job colours come from :mod:`marlaas.report.palette`."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from marlaas.atomic import replacing, write_durably

DPI = 100
"""Resolution of the PNGs [pixels per inch]."""
KIND_STYLE = {
    "generate": {"offset": 0.0, "height": 0.5, "color": None},
    "train": {"offset": 0.0, "height": 0.5, "color": None},
    "adapter_load": {"offset": -0.36, "height": 0.18, "color": "#8c8c8c"},
    "sync": {"offset": 0.36, "height": 0.18, "color": "#303030"},
}
"""How each kind of work is drawn on a device lane, in drawing order: centre offset and height
[lanes] (the y axis points down: adapter loads are a strip at the top, syncs at the bottom),
and a fixed colour (None: the job's colour). No edges, no transparency."""
CAUSE_COLORS = {
    "rollouts": "#4c72b0",
    "trainer": "#dd8452",
    "environment": "#55a868",
    "weight_sync": "#c44e52",
    "adapter_load": "#8172b3",
    "staleness": "#937860",
    "barrier": "#da8bc3",
    "no_work": "#bbbbbb",
}
"""Colour per idle cause."""


@dataclass(frozen=True)
class SavedFigure:
    """A figure written to disk."""

    name: str
    """File stem, e.g. ``gantt-run1``."""
    png: Path
    svg: Path
    png_base64: str
    """The PNG, base64-encoded, for embedding in HTML."""


def save_figure(fig: Figure, out_dir: Path, name: str) -> SavedFigure:
    """Write ``fig`` as ``name.png`` and ``name.svg`` under ``out_dir``, each atomically (a
    temporary file beside it, then renamed; a failed write names its file).

    Figures are built with :class:`matplotlib.figure.Figure` (no pyplot), so they render with
    the Agg canvas whatever the global backend, and need no closing.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    png = write_durably(out_dir / f"{name}.png", buf.getvalue())
    svg = out_dir / f"{name}.svg"
    with replacing(svg) as tmp:
        fig.savefig(tmp, format="svg", dpi=DPI)
    return SavedFigure(name, png, svg, base64.b64encode(buf.getvalue()).decode("ascii"))
