"""The ``marlaas`` command line: simulate, list policies (and more as subcommands register).

Every user error (bad workload, unknown policy, bad override, bad argument, unreadable run,
an ``--out`` that is not ours or is in use) is printed as one ``marlaas: error: ...`` line,
with control characters escaped (:func:`marlaas.terminal.printable`), and exits with status
2; nothing is written to ``--out``. A failure of the machine (a file that cannot be read or
written) is one such line with status 1. Ctrl-C (SIGINT) and SIGTERM stop a command with
status 130 and 143, leaving ``--out`` as it was (see :mod:`marlaas.out_folder`).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from marlaas import sweep
from marlaas.core.feasibility import InfeasibleWorkloadError
from marlaas.core.policies import UnknownPolicyError, get_policy, policy_names
from marlaas.core.workload import WorkloadError
from marlaas.drive import RunError
from marlaas.eventlog import EventLogError
from marlaas.executors.cli import add_train_parsers, user_errors
from marlaas.out_folder import OutputError, claim
from marlaas.report.cli import add_report_parser
from marlaas.run_options import add_run_arguments, load_run_workload, run_title
from marlaas.runs import write_run_files
from marlaas.table import print_summary
from marlaas.terminal import Interrupted, UsageError, error_line, on_signals

USER_ERRORS = (
    WorkloadError,
    UnknownPolicyError,
    InfeasibleWorkloadError,
    EventLogError,
    FileExistsError,
    RunError,
    OutputError,
    UsageError,
    *user_errors(),
)


def _simulate(args: argparse.Namespace) -> int:
    from marlaas.sim.run import simulate_run

    workload = load_run_workload(args)
    with claim(args.out, "simulation") as out:  # --out is checked and locked before any work
        events, summary = simulate_run(workload, args.policy, args.seed, progress=not args.quiet)
        with out.staged() as staging:
            write_run_files(staging, events, summary)
    print_summary(summary, title=run_title(workload, summary, f"seed {summary['seed']}"))
    print(f"wrote {args.out}/ ({len(events)} events, simulated in {summary['wall_s']:.2f} s)")
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


class MarlaasParser(argparse.ArgumentParser):
    """argparse with its errors raised as one-line :class:`UsageError` (exit 2), not the
    usage text; subcommands' parsers are of this class too."""

    def error(self, message: str):
        command = self.prog.removeprefix("marlaas").strip()
        raise UsageError(f"{command}: {message}" if command else message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = MarlaasParser(
        prog="marlaas", description="Multi-tenant asynchronous RL: simulate, train, report."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="simulate a workload under a policy")
    sim.add_argument("workload", help="workload YAML file (see traces/)")
    add_run_arguments(sim)
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
    args = None
    with on_signals():
        try:
            args = build_parser().parse_args(argv)
            return args.func(args)
        except USER_ERRORS as err:
            print(error_line(err), file=sys.stderr)
            return 2
        except OSError as err:
            print(error_line(err), file=sys.stderr)
            return 1
        except (KeyboardInterrupt, Interrupted) as err:
            number = err.signal if isinstance(err, Interrupted) else signal.SIGINT
            out = getattr(args, "out", None)
            left = f"{out} was left as it was" if out else "nothing was written"
            hint = getattr(args, "interrupt_hint", None) or left
            print(f"marlaas: interrupted ({signal.Signals(number).name}); {hint}",
                  file=sys.stderr)  # fmt: skip
            return 128 + number


if __name__ == "__main__":
    sys.exit(main())
