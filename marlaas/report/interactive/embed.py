"""Putting Plotly figures into one self-contained HTML page.

The Plotly JavaScript bundle (from the installed ``plotly`` package, about 5 MB) is inlined
once in the page's head; each figure is a ``<div class="plot">`` with its JSON in a
``<script type="application/json">`` next to it, drawn by one loader script at the end.
Nothing is fetched from a network.
"""

from __future__ import annotations

import html

import orjson
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

CONFIG = {
    "responsive": True,
    "displaylogo": False,
    "scrollZoom": False,
    "toImageButtonOptions": {"format": "png", "scale": 2},
}
"""Plotly config of every figure: resizes with the page, PNG download at 2x."""

LOADER = """<script>
(function () {
  const failed = [];
  for (const div of document.querySelectorAll('div.plot[data-figure]')) {
    try {
      const fig = JSON.parse(document.getElementById(div.dataset.figure).textContent);
      Plotly.newPlot(div, fig.data, fig.layout, fig.config);
    } catch (err) {
      failed.push(div.id);
      div.textContent = 'This figure could not be drawn: ' + err;
      console.error(err);
    }
  }
  document.body.dataset.plotsFailed = failed.length;
  document.body.dataset.plotsDone = '1';
})();
</script>"""
"""Draws every figure once the page is parsed; marks ``body[data-plots-done]`` when done."""


def plotly_bundle() -> str:
    """``<script>`` with the Plotly bundle of the installed plotly package (inlined)."""
    return f'<script type="text/javascript">{get_plotlyjs()}</script>'


def figure_json(fig: go.Figure) -> str:
    """The figure (data, layout, config) as JSON that is safe inside a ``<script>`` element."""
    body = pio.to_json(fig, validate=False, engine="orjson")
    text = body[:-1] + ',"config":' + orjson.dumps(CONFIG).decode() + "}"
    return text.replace("</", "<\\/")


def figure_html(fig: go.Figure, div_id: str, height_px: int | None = None) -> str:
    """A ``<div class="plot">`` for ``fig`` and its JSON; drawn by :data:`LOADER`."""
    height = height_px or int(fig.layout.height or 450)
    data_id = f"{div_id}-data"
    return (
        f'<div class="plot" id="{html.escape(div_id)}" data-figure="{html.escape(data_id)}" '
        f'style="height:{height}px"></div>'
        f'<script type="application/json" id="{html.escape(data_id)}">{figure_json(fig)}</script>'
    )
