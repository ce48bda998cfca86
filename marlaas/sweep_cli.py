"""argparse wiring of ``marlaas sweep`` (the sweep itself is :mod:`marlaas.sweep`, imported
when the command runs)."""

from __future__ import annotations

import argparse

from marlaas.run_options import path_arg, profile_arg

HELP = "compare schedules (and overrides, job counts, seeds) in simulation"


def _sweep(args: argparse.Namespace) -> int:
    from marlaas.sweep import sweep_command

    return sweep_command(args)


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """The description, arguments and ``func`` of ``marlaas sweep``."""
    parser.description = (
        "Simulate one workload under several schedules (presets and policies), x --jobs x "
        "--set variants x --seeds, in parallel processes. Writes OUT/sweep.csv, "
        "summaries.json, table.txt and runs/ (every run's event log; `marlaas report OUT` "
        "compares them)."
    )
    parser.add_argument("workload", help="workload YAML file (see traces/)")
    parser.add_argument("--presets", help="baselines, comma-separated: sequential,sync (each "
                        "with the workload's policy)")  # fmt: skip
    parser.add_argument("--policies", help="orderings, comma-separated, e.g. fifo,fair,srtf")
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a field in every run; the same KEY again makes one variant per value",
    )
    parser.add_argument("--jobs", metavar="N[,N...]",
                        help="run the workload's first N jobs, per N (default: all)")  # fmt: skip
    parser.add_argument("--seeds", metavar="S[,S...]", help="seeds (default: the workload's)")
    parser.add_argument("--cost", metavar="PROFILE", type=profile_arg,
                        help="cost profile for every run: a "
                        "bundled name (h100-7b, a100-7b, cpu-tiny) or a YAML file")  # fmt: skip
    parser.add_argument("--baseline", help="preset or policy the ratios compare to (default: "
                        "sequential when swept)")  # fmt: skip
    parser.add_argument("--workers", type=int, help="processes (default: one per CPU core)")
    parser.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                        help="run the runs as Ray tasks instead of a process pool: no ADDRESS "
                        "starts a local cluster, `auto` joins the one `ray start` made on this "
                        "machine, HOST:PORT joins that head (docs/ray.md)")  # fmt: skip
    parser.add_argument("--out", required=True, type=path_arg,
                        help="folder for sweep.csv and summaries")  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--no-events",
        action="store_true",
        help="do not keep each run's event log under OUT/runs/ (for big sweeps)",
    )
    parser.set_defaults(func=_sweep)
