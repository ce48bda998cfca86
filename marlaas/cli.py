"""The ``marlaas`` command line: simulate, list policies (and more as subcommands register).

Every user error (bad workload, unknown policy, bad override, unreadable run) is printed as
one ``marlaas: error: ...`` line and exits with status 2; nothing is written to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from marlaas import sweep
from marlaas.core.feasibility import InfeasibleWorkloadError
from marlaas.core.policies import UnknownPolicyError, get_policy, policy_names
from marlaas.core.workload import WorkloadError
from marlaas.drive import RunError
from marlaas.eventlog import EventLogError
from marlaas.executors.cli import add_train_parsers, user_errors
from marlaas.report.cli import add_report_parser
from marlaas.run_options import add_run_arguments, load_run_workload, run_title
from marlaas.runs import write_run
from marlaas.table import print_summary
from marlaas.twin.cli import add_parsers as add_twin_parsers

USER_ERRORS = (
    WorkloadError,
    UnknownPolicyError,
    InfeasibleWorkloadError,
    EventLogError,
    FileExistsError,
    RunError,
    *user_errors(),
)


def _simulate(args: argparse.Namespace) -> int:
    from marlaas.sim.cost_profiles import load_profile
    from marlaas.sim.run import cost_of, simulate_run

    workload = load_run_workload(args)
    profile = load_profile(args.cost, base=cost_of(workload)) if args.cost else None
    events, summary = simulate_run(
        workload, args.policy, args.seed, progress=not args.quiet, profile=profile
    )
    out = write_run(args.out, events, summary, workload)
    print_summary(summary, title=run_title(workload, summary, f"seed {summary['seed']}"))
    print(f"wrote {out}/ ({len(events)} events, simulated in {summary['wall_s']:.2f} s)")
    return 0


def _policies(_args: argparse.Namespace) -> int:
    from marlaas.core.scheduling import PRESETS

    print("policies (--policy NAME): the order jobs are served in")
    for name in policy_names():
        policy = get_policy(name)
        doc = (type(policy).__doc__ or "").strip().splitlines()[0]
        print(f"  {name:12s} {doc}")
    print("presets (--preset NAME): mechanism settings of a baseline, with any policy")
    for name, settings in PRESETS.items():
        print(f"  {name:12s} {', '.join(f'{k}={v}' for k, v in settings.items())}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="marlaas", description="Multi-tenant asynchronous RL: simulate, train, report."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="simulate a workload under a policy")
    sim.add_argument("workload", help="workload YAML file (see traces/)")
    add_run_arguments(sim)
    sim.add_argument("--cost", metavar="PROFILE", help="cost profile: a bundled name (h100-7b, "
                     "a100-7b, cpu-tiny) or a YAML file from `marlaas calibrate`; replaces the "
                     "workload's cost model")  # fmt: skip
    sim.add_argument("--out", required=True, type=Path, help="run folder to write")
    sim.add_argument("--quiet", action="store_true", help="no progress bar")
    sim.set_defaults(func=_simulate)

    pol = sub.add_parser("policies", help="list the scheduling policies")
    pol.set_defaults(func=_policies)

    add_report_parser(sub)
    sweep.add_parser(sub)
    add_train_parsers(sub)
    add_twin_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``marlaas`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except USER_ERRORS as err:
        print(f"marlaas: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("marlaas: interrupted; nothing was written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
