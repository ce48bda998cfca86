"""The self-contained HTML report: interactive figures (Plotly, bundle inlined once), tables
formatted for people, explanations next to what they explain. No network is needed to view it.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import pandas as pd
import plotly.graph_objects as go

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

    def render(self) -> str:
        """The section as HTML."""
        parts = [f'<section id="{html.escape(self.id)}">', f"<h2>{html.escape(self.title)}</h2>"]
        parts += [f'<p class="note">{html.escape(n)}</p>' for n in self.notes]
        if self.figure is not None:
            parts.append(figure_html(self.figure, f"fig-{self.id}"))
        if self.static:
            files = ", ".join(f"figures/{html.escape(f)}" for f in self.static)
            parts.append(f'<p class="files">Static copies: {files}</p>')
        if self.glossary:
            parts.append("<dl>")
            for term, text in self.glossary:
                parts.append(f"<dt>{html.escape(term)}</dt><dd>{html.escape(text)}</dd>")
            parts.append("</dl>")
        for caption, table in self.tables:
            parts.append(f"<h3>{html.escape(caption)}</h3>")
            table_html = table.to_html(index=self.index, na_rep="-", border=0)
            parts.append(f'<div class="wide">{table_html}</div>')
        parts.append("</section>")
        return "\n".join(parts)


def render_report(title: str, sections: list[Section], intro: str = "") -> str:
    """The whole report as one HTML document: the Plotly bundle, a table of contents, the
    sections (``intro`` is trusted HTML shown under the title)."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style>{plotly_bundle()}</head><body>"
        f"<h1>{html.escape(title)}</h1>{intro}{_toc(sections)}\n"
        + "\n".join(s.render() for s in sections)
        + f"\n{LOADER}</body></html>\n"
    )


def _toc(sections: list[Section]) -> str:
    """Links to the sections: the report's own on one line, then one line per run."""

    def link(s: Section) -> str:
        return f'<a href="#{html.escape(s.id)}">{html.escape(s.nav or s.title)}</a>'

    lines = ["".join(f"<li>{link(s)}</li>" for s in sections if not s.group)]
    for group in dict.fromkeys(s.group for s in sections if s.group):
        links = " · ".join(link(s) for s in sections if s.group == group)
        lines.append(f"<li><b>{html.escape(group)}</b>: {links}</li>")
    return "<nav>" + "".join(f"<ul>{line}</ul>" for line in lines) + "</nav>"
