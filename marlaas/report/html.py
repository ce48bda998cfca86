"""The self-contained HTML report: interactive figures (Plotly, bundle inlined once), tables
formatted for people, explanations next to what they explain. No network is needed to view it.

The page is the Jinja2 template ``templates/report.html.j2`` (every value escaped; the Plotly
bundle, the figures and the tables are marked safe where they are made).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

import jinja2
import pandas as pd
import plotly.graph_objects as go
from markupsafe import Markup

from marlaas.report.interactive.embed import LOADER, figure_html, plotly_bundle

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1400px;color:#222;
  padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;
  margin-top:2em} h3{font-size:1em;margin:1.2em 0 .3em}
table{border-collapse:collapse;font-size:.85em;margin:.4em 0}
td,th{border:1px solid #ddd;padding:.2em .6em;text-align:right;white-space:nowrap}
th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
nav ul{padding-left:0;margin:.2em 0} nav li{display:inline-block;margin:0 1.2em .2em 0}
.note{color:#555;font-size:.9em;max-width:70em} .files{color:#777;font-size:.8em}
.plot{width:100%;border:1px solid #eee;margin:.5em 0}
dl{font-size:.85em;display:grid;grid-template-columns:max-content auto;gap:.15em 1em;
  max-width:70em} dt{font-weight:600} dd{margin:0;color:#444}
.wide{overflow-x:auto;max-width:100%}
.kind{display:inline-block;padding:0 .4em;border-radius:.3em;background:#eef;font-size:.85em}
"""


@dataclass
class Section:
    """One ``<section id=...>`` of the report: a heading, notes, an interactive figure, the
    names of its static copies, tables (already formatted) and a glossary."""

    id: str
    title: str
    figure: go.Figure | None = None
    static: list[str] = field(default_factory=list)
    """File names of the figure's static copies under figures/ (when exported)."""
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    glossary: list[tuple[str, str]] = field(default_factory=list)
    """(term, explanation) pairs shown under the figure, e.g. what each idle cause means."""
    index: bool = False
    """Whether the tables' index is shown (e.g. metric names)."""
    group: str = ""
    """The run the section belongs to ("" for sections of the whole report)."""
    nav: str = ""
    """Short name in the table of contents (default: the title)."""


@dataclass(frozen=True)
class RunLine:
    """One run in the list under the report's title."""

    label: str
    kind: str
    path: str


@cache
def _environment() -> jinja2.Environment:
    """The Jinja2 environment of the report's templates (autoescaping on)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("marlaas.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
    )
    env.globals["figure"] = lambda fig, div_id: Markup(figure_html(fig, div_id))
    env.globals["html_table"] = lambda table, index: Markup(
        table.to_html(index=index, na_rep="-", border=0)
    )
    return env


def render_report(title: str, sections: list[Section], runs: Sequence[RunLine] = ()) -> str:
    """The whole report as one HTML document: the Plotly bundle, the runs, a table of
    contents (the report's own sections on one line, then one line per run) and the
    sections."""
    groups = list(dict.fromkeys(s.group for s in sections if s.group))
    return (
        _environment()
        .get_template("report.html.j2")
        .render(
            title=title,
            css=Markup(CSS),
            plotly_bundle=Markup(plotly_bundle()),
            loader=Markup(LOADER),
            runs=list(runs),
            sections=sections,
            groups=groups,
        )
        + "\n"
    )
