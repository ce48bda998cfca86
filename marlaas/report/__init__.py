"""Reports of MARLaaS runs: a self-contained interactive report.html (Plotly), a Perfetto
trace, summaries, and on demand static PNG/SVG figures; also the page of a sweep folder.

Entry points: :func:`run_report` and :func:`add_report_parser` (for the ``marlaas`` CLI).
Every run is named by :func:`marlaas.report.labels.run_label`.
"""

from marlaas.report.build import run_report
from marlaas.report.cli import add_report_parser

__all__ = ["add_report_parser", "run_report"]
