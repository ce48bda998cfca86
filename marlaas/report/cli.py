"""argparse wiring of ``marlaas report RUN_DIR [RUN_DIR ...] --out DIR [--static]`` and
``marlaas report SWEEP_DIR --out DIR``."""

from __future__ import annotations

import argparse

from marlaas.run_options import path_arg

HELP = "report.html (interactive) and trace.json from run folders or a sweep"


def report_command(args: argparse.Namespace) -> int:
    """Run the report for parsed arguments; prints the report's path and returns 0.

    Raises marlaas.eventlog.EventLogError for unreadable runs (the CLI prints it, exits 2).
    """
    from marlaas.report.build import run_report

    path = run_report(args.run_dirs, args.out, static=args.static)
    print(path)
    return 0


def add_report_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``report`` sub-command to ``subparsers`` (from ``add_subparsers()``).

    The parser's default ``func`` is :func:`report_command`.
    """
    parser = subparsers.add_parser("report", help=HELP)
    add_report_arguments(parser)
    return parser


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """The description, arguments and ``func`` of ``marlaas report``."""
    parser.description = (
        "Write report.html (self-contained, interactive figures), trace.json "
        "(Chrome/Perfetto) and summary.json for one or more run folders; with several runs "
        "the report also compares them (relative differences against the first). Given a "
        "sweep folder (from marlaas sweep), it compares all the sweep's runs. A progress bar "
        "goes to stderr when it is a terminal."
    )
    parser.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="run folder with events.parquet (and optionally summary.json), or one sweep "
        "folder with sweep.csv",
    )
    parser.add_argument("--out", required=True, metavar="DIR", type=path_arg, help="output folder")
    parser.add_argument(
        "--static",
        action="store_true",
        help="also write static copies of the figures, figures/*.png and *.svg (drawn in "
        "parallel processes)",
    )
    parser.set_defaults(func=report_command)
