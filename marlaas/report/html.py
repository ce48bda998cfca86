"""The self-contained HTML report: figures embedded as base64 PNG, tables as HTML."""

from __future__ import annotations

import html
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from marlaas.report.style import SavedFigure

CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1400px;color:#222}
h1{font-size:1.6em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:.2em .5em;text-align:right}
th{background:#f4f4f4} img{max-width:100%;height:auto;border:1px solid #eee}
nav li{display:inline-block;margin-right:1em} .note{color:#666;font-size:.9em}
"""


@dataclass
class Section:
    """One ``<section id=...>`` of the report: a heading, optional figure, tables, notes."""

    id: str
    title: str
    figure: SavedFigure | None = None
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        """The section as HTML."""
        parts = [f'<section id="{html.escape(self.id)}">', f"<h2>{html.escape(self.title)}</h2>"]
        parts += [f'<p class="note">{html.escape(n)}</p>' for n in self.notes]
        if self.figure is not None:
            parts.append(
                f'<img alt="{html.escape(self.title)}" '
                f'src="data:image/png;base64,{self.figure.png_base64}">'
                f'<p class="note">Files: {html.escape(self.figure.png.name)}, '
                f"{html.escape(self.figure.svg.name)}</p>"
            )
        for caption, table in self.tables:
            parts.append(f"<h3>{html.escape(caption)}</h3>")
            parts.append(table.to_html(float_format=lambda x: f"{x:,.3f}", na_rep="-"))
        parts.append("</section>")
        return "\n".join(parts)


def render_report(title: str, sections: list[Section]) -> str:
    """The whole report as one HTML document with a table of contents."""
    toc = "".join(
        f'<li><a href="#{html.escape(s.id)}">{html.escape(s.title)}</a></li>' for s in sections
    )
    body = "\n".join(s.render() for s in sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><nav><ul>{toc}</ul></nav>\n{body}\n</body></html>\n"
    )


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same folder, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
