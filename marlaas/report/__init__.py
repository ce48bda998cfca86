"""Reports of MARLaaS runs: a self-contained interactive report.html (Plotly), a Perfetto
trace, summaries, and on demand static PNG/SVG figures; also the page of a sweep folder.

Entry points: :func:`run_report` and :func:`add_report_parser` (for the ``marlaas`` CLI).
Every run is named by :func:`marlaas.report.labels.run_label`.

The package is callable: ``marlaas.report(runs, out, static=False)`` builds a report
(:func:`marlaas.api.report`, the Python API's name for it, which is this package's name).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

__all__ = ["add_report_parser", "run_report"]


class _CallablePackage(types.ModuleType):
    """This package's type: a module that, called, builds a report."""

    def __call__(self, runs, out: str | Path, *, static: bool = False) -> Path:
        """Build the report of ``runs`` into ``out``: :func:`marlaas.api.report`."""
        from marlaas.api import report

        return report(runs, out, static=static)


sys.modules[__name__].__class__ = _CallablePackage


def __getattr__(name: str):
    # Imported on first use: ``marlaas --help`` imports report.cli without pandas or plotly.
    if name == "run_report":
        from marlaas.report.build import run_report

        return run_report
    if name == "add_report_parser":
        from marlaas.report.cli import add_report_parser

        return add_report_parser
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
