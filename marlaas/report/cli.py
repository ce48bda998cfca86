"""argparse wiring of ``marlaas report RUN_DIR [RUN_DIR ...] --out DIR``."""

from __future__ import annotations

import argparse

from marlaas.report.build import run_report


def report_command(args: argparse.Namespace) -> int:
    """Run the report for parsed arguments; prints the report's path and returns 0.

    Raises marlaas.eventlog.EventLogError for unreadable runs (the CLI prints it, exits 2).
    """
    path = run_report(args.run_dirs, args.out)
    print(path)
    return 0


def add_report_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``report`` sub-command to ``subparsers`` (from ``add_subparsers()``).

    The parser's default ``func`` is :func:`report_command`.
    """
    parser = subparsers.add_parser(
        "report",
        help="figures, report.html and trace.json from run folders",
        description="Write report.html (self-contained), trace.json (Chrome/Perfetto), "
        "summary.json and figures/*.png|svg for one or more run folders; with several runs "
        "the report also compares them.",
    )
    parser.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="run folder with events.parquet (and optionally summary.json)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")
    parser.set_defaults(func=report_command)
    return parser
