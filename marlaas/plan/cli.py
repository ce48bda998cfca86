"""argparse wiring of ``marlaas plan`` (the plan itself is :mod:`marlaas.plan.command`,
imported when the command runs)."""

from __future__ import annotations

import argparse

from marlaas.run_options import path_arg, profile_arg

HELP = "the cheapest cluster, pool split and schedule that meets every job's deadline"


def _plan(args: argparse.Namespace) -> int:
    from marlaas.plan.command import plan_command

    return plan_command(args)


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """The description, arguments and ``func`` of ``marlaas plan``."""
    parser.description = (
        "Search, with the simulator, for the cheapest configuration (devices per pool, and "
        "with --search the trainer width, adapter slots, policy and preset) on which every "
        "job with a deadline (deadline_s, or its tenant's job_deadline_s) meets it on every "
        "seed; with --budget, the fastest within a price per hour. Writes OUT/workload.yaml "
        "(the plan, for simulate, train and serve), plan.csv, pareto.csv, plan.json and "
        "plan.html. Prices: the workload's prices: block (docs/plan.md)."
    )
    parser.add_argument("workload", help="workload YAML file (see traces/)")
    parser.add_argument("--out", required=True, type=path_arg, help="folder for the plan")
    parser.add_argument("--search", metavar="DIMS", help="what to search, comma-separated: "
                        "pools, trainer_width, adapter_slots, policy, preset (default: pools; "
                        "the rest stay as the workload has them)")  # fmt: skip
    parser.add_argument("--trainer-widths", metavar="N[,N...]",
                        help="devices per trainer to try (searched: 1,2,4,8)")  # fmt: skip
    parser.add_argument("--adapter-slots", metavar="N[,N...]",
                        help="adapter slots per engine to try (searched: 4,8,16)")  # fmt: skip
    parser.add_argument("--policies", metavar="P[,P...]",
                        help="policies to try (searched: every registered one)")  # fmt: skip
    parser.add_argument("--presets", metavar="P[,P...]", help="presets to try, none for the "
                        "workload's own settings (searched: none,sync,sequential)")  # fmt: skip
    parser.add_argument("--max-devices", type=int, metavar="N",
                        help="most devices in all (default: twice the workload's)")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=3, metavar="N",
                        help="seeds every deadline must be met on (the workload's seed and "
                        "the next N-1)")  # fmt: skip
    parser.add_argument("--budget", type=float, metavar="PRICE", help="instead of meeting "
                        "the deadlines: the fastest configuration costing at most PRICE per "
                        "hour")  # fmt: skip
    parser.add_argument("--exhaustive", action="store_true", help="simulate the whole grid "
                        "instead of searching it (to check the search; slow)")  # fmt: skip
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override a workload field, as in simulate (deadlines)")  # fmt: skip
    parser.add_argument("--cost", metavar="PROFILE", type=profile_arg,
                        help="cost profile: a bundled name "
                        "(h100-7b, a100-7b, cpu-tiny) or a YAML file; its name picks the "
                        "price in prices.profiles")  # fmt: skip
    parser.add_argument("--workers", type=int, help="processes (default: one per CPU core)")
    parser.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                        help="simulate on a Ray cluster, as `sweep --ray` does: no address "
                        "starts a local cluster, `auto` joins the one `ray start` made on this "
                        "machine, HOST:PORT joins that head (docs/ray.md)")  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=_plan)
