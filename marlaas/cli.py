"""The ``marlaas`` command line: simulate, list policies (and more as subcommands register).

Every user error (bad workload, unknown policy, bad override, unreadable run) is printed as
one ``marlaas: error: ...`` line and exits with status 2; nothing is written to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from marlaas import sweep
from marlaas.core.feasibility import InfeasibleWorkloadError
from marlaas.core.policies import UnknownPolicyError, get_policy, policy_names
from marlaas.core.workload import WorkloadError, load_workload
from marlaas.eventlog import EventLogError
from marlaas.executors.cli import add_train_parsers, user_errors
from marlaas.report.cli import add_report_parser
from marlaas.runs import write_run
from marlaas.table import print_summary

USER_ERRORS = (
    WorkloadError,
    UnknownPolicyError,
    InfeasibleWorkloadError,
    EventLogError,
    FileExistsError,
    *user_errors(),
)


def parse_overrides(items: list[str]) -> dict:
    """``key=value`` strings -> {key: YAML-parsed value}."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise WorkloadError(f"--set {item!r}: expected key=value, e.g. scheduling.barrier=true")
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides


def load_with_overrides(path: str, overrides: list[str] | None):
    """Load a workload file and apply ``--set`` overrides."""
    workload = load_workload(path)
    return workload.with_overrides(parse_overrides(overrides)) if overrides else workload


def _simulate(args: argparse.Namespace) -> int:
    from marlaas.sim.run import simulate_run

    workload = load_with_overrides(args.workload, args.set)
    policy = args.policy or workload.policy
    get_policy(policy)
    events, summary = simulate_run(workload, policy, args.seed, progress=not args.quiet)
    out = write_run(args.out, events, summary)
    print_summary(summary, title=f"{workload.name} · policy {policy} · seed {summary['seed']}")
    print(f"wrote {out}/ ({len(events)} events, simulated in {summary['wall_s']:.2f} s)")
    return 0


def _policies(_args: argparse.Namespace) -> int:
    for name in policy_names():
        policy = get_policy(name)
        doc = (type(policy).__doc__ or "").strip().splitlines()[0]
        print(f"{name:12s} {doc}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="marlaas", description="Multi-tenant asynchronous RL: simulate, train, report."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="simulate a workload under a policy")
    sim.add_argument("workload", help="workload YAML file (see traces/)")
    sim.add_argument("--policy", help=f"one of: {', '.join(policy_names())} (default: the file's)")
    sim.add_argument("--seed", type=int, help="random seed (default: the file's)")
    sim.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field")
    sim.add_argument("--out", required=True, type=Path, help="run folder to write")
    sim.add_argument("--quiet", action="store_true", help="no progress bar")
    sim.set_defaults(func=_simulate)

    pol = sub.add_parser("policies", help="list the scheduling policies")
    pol.set_defaults(func=_policies)

    add_report_parser(sub)
    sweep.add_parser(sub)
    add_train_parsers(sub)
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
