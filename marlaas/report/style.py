"""Shared look of report figures: colours per tenant, styles per kind, saving PNG + SVG."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from pathlib import Path

from matplotlib import colormaps
from matplotlib.figure import Figure

from marlaas.metrics import natural_key

DPI = 100
"""Resolution of the PNGs [pixels per inch]."""
KIND_STYLE = {
    "generate": {"alpha": 0.4, "height": 0.8, "edge": 0.0},
    "train": {"alpha": 1.0, "height": 0.8, "edge": 0.0},
    "adapter_load": {"alpha": 1.0, "height": 0.35, "edge": 0.8},
    "sync": {"alpha": 1.0, "height": 0.8, "edge": 0.8},
}
"""How each kind of work is drawn on a device lane, in drawing order: opacity, height [lanes]
and black edge width [pt]. (Hatching shows stages well but costs seconds per 1e4 bars.)"""
CAUSE_COLORS = {
    "rollouts": "#4c72b0",
    "trainer": "#dd8452",
    "environment": "#55a868",
    "weight_sync": "#c44e52",
    "adapter_load": "#8172b3",
    "staleness": "#937860",
    "no_work": "#bbbbbb",
}
"""Colour per idle cause."""


def tenant_colors(tenants) -> dict[str, tuple]:
    """A stable colour per tenant (tab20 cycled, in natural name order)."""
    cmap = colormaps["tab20"]
    names = sorted({str(t) for t in tenants if str(t)}, key=natural_key)
    return {t: cmap(i % 20) for i, t in enumerate(names)}


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
    """Write ``fig`` as ``name.png`` and ``name.svg`` under ``out_dir``.

    Figures are built with :class:`matplotlib.figure.Figure` (no pyplot), so they render with
    the Agg canvas whatever the global backend, and need no closing.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    png = out_dir / f"{name}.png"
    png.write_bytes(buf.getvalue())
    svg = out_dir / f"{name}.svg"
    fig.savefig(svg, format="svg", dpi=DPI)
    return SavedFigure(name, png, svg, base64.b64encode(buf.getvalue()).decode("ascii"))
