"""Reports of MARLaaS runs: figures, a self-contained HTML page and a Perfetto trace.

Entry points: :func:`run_report` and :func:`add_report_parser` (for the ``marlaas`` CLI).
"""

from marlaas.report.build import run_report
from marlaas.report.cli import add_report_parser

__all__ = ["add_report_parser", "run_report"]
