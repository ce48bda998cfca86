"""The ``marlaas`` command line: simulate, sweep, report, train, evaluate, and the model helpers.

Every user error (bad workload, unknown policy, bad override, bad argument, unreadable run,
an ``--out`` that is not ours or is in use) is printed as one ``marlaas: error: ...`` line,
with control characters escaped (:func:`marlaas.terminal.printable`), and exits with status
2; nothing is written to ``--out``. A failure of the machine (a file that cannot be read or
written, a full disk: :class:`marlaas.output.errors.WriteError`) is one such line with status 1.
Ctrl-C (SIGINT) and SIGTERM stop a command with status 130 and 143, leaving ``--out`` as it
was (see :mod:`marlaas.out_folder`), whenever they come once the package has begun to load,
during an import included (see :mod:`marlaas.interrupts`); a reader that goes away
(``| head``) ends it quietly with status 141.

Start-up is fast: this module imports only the commands' argument wiring. A command's
arguments are added when it is chosen (or its help is shown), and each command imports its
heavy dependencies (pandas, SimPy, plotly, torch, vLLM) inside the function that runs it,
so ``marlaas --help``, ``--version`` and argument errors never load them.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import warnings

from marlaas import interrupts, run_options, sweep_cli
from marlaas.executors import cli as real_cli
from marlaas.plan import cli as plan_cli
from marlaas.report import cli as report_cli
from marlaas.service import cli as service_cli
from marlaas.terminal import Interrupted, UsageError, error_line, on_signals
from marlaas.twin import cli as twin_cli

USER_ERRORS = (
    ("marlaas.core.workload", "WorkloadError"),
    ("marlaas.core.policies.base", "UnknownPolicyError"),
    ("marlaas.core.feasibility", "InfeasibleWorkloadError"),
    ("marlaas.eventlog", "EventLogError"),
    ("marlaas.drive.loop", "RunError"),
    ("marlaas.envs.registry", "EnvLoadError"),
    ("marlaas.executors.env_contract", "EnvCallError"),  # evaluate's: a run retries its work
    ("marlaas.executors.env_contract", "EnvResultError"),
    ("marlaas.executors.env_contract", "EnvTimeoutError"),
    ("marlaas.executors.episode_runner", "EpisodeError"),  # evaluate's: a prompt too long
    ("marlaas.datasets.files", "DatasetError"),  # a file edited before evaluate reads it
    ("marlaas.policy_path", "PolicyLoadError"),
    ("marlaas.envs.sandbox_runtime", "SandboxUnavailable"),
    ("marlaas.executors.adapter_store", "AdapterError"),
    ("marlaas.executors.backends", "BackendError"),
    ("marlaas.executors.backends", "ModelDirError"),
    ("marlaas.executors.devices", "DeviceError"),
    ("marlaas.executors.cli", "ModelSetupError"),
    ("marlaas.executors.tracking", "TrackerError"),
    ("marlaas.executors.ray_backends", "PlacementError"),
    ("marlaas.ray_cluster", "RayUnavailableError"),
    ("marlaas.output.errors", "OutputError"),
    ("marlaas.service.db", "DatabaseError"),
    ("marlaas.service.keys", "SecretError"),
    ("marlaas.terminal", "UsageError"),
)
"""(module, class) of the errors printed as one line: an error whose module was never
imported cannot have been raised, so checking one imports nothing."""

EXAMPLES = """\
examples:
  marlaas simulate traces/small.yaml --policy fair --out runs/fair
  marlaas simulate traces/small.yaml --preset sequential --out runs/sequential
  marlaas report runs/sequential runs/fair --out runs/report
  marlaas sweep traces/paper-32.yaml --presets sequential,sync --policies fair --out runs/sweep
  marlaas plan traces/small.yaml --set 'jobs.*.deadline_s=400' --out runs/plan
  marlaas make-tiny-model models/tiny
  marlaas train traces/real-tiny.yaml --out runs/real-tiny --tracker tensorboard
  marlaas calibrate runs/real-tiny --out cpu.yaml   # then: marlaas replay RUN --cost cpu.yaml

`marlaas COMMAND --help` shows a command's options and their defaults. Quote --set values
that contain * (zsh expands them): --set 'jobs.*.rl.steps=5'.
"""


def _is_user_error(err: BaseException) -> bool:
    if isinstance(err, FileExistsError):
        return True
    for module, name in USER_ERRORS:
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(err, getattr(loaded, name)):
            return True
    return False


# ------------------------------------------------------------------ simulate and policies


def _simulate(args: argparse.Namespace) -> int:
    from marlaas.out_folder import claim
    from marlaas.run_options import load_run_workload, run_title
    from marlaas.runs import write_run_files
    from marlaas.sim.alone import alone_times
    from marlaas.sim.cost_profiles import load_profile
    from marlaas.sim.run import cost_of, simulate_run
    from marlaas.table import print_summary
    from marlaas.terminal import print_refusal

    workload = load_run_workload(args)
    profile = load_profile(args.cost, base=cost_of(workload)) if args.cost else None
    cost = profile.cost if profile else None
    with claim(args.out, "simulation") as out:  # --out is checked and locked before any work
        alone = alone_times(workload, args.seed, cost, progress=not args.quiet)
        events, summary = simulate_run(
            workload, args.policy, args.seed, progress=not args.quiet, profile=profile,
            on_ended=print_refusal, alone_s=alone,
        )  # fmt: skip
        with out.staged() as staging:
            write_run_files(staging, events, summary, workload)
    print_summary(summary, title=run_title(workload, summary, f"seed {summary['seed']}"))
    print(f"wrote {args.out}/ ({len(events)} events, simulated in {summary['wall_s']:.2f} s)")
    return 0


def _simulate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="workload YAML file (see traces/)")
    run_options.add_run_arguments(parser)
    parser.add_argument("--cost", metavar="PROFILE", type=run_options.profile_arg,
                        help="cost profile: a bundled name "
                        "(h100-7b, a100-7b, cpu-tiny) or a YAML file from `marlaas calibrate`; "
                        "replaces the workload's cost model")  # fmt: skip
    parser.add_argument("--out", required=True, type=run_options.path_arg,
                        help="run folder to write")  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=_simulate)


def _policies(_args: argparse.Namespace) -> int:
    from marlaas.core.policies import get_policy, policy_names
    from marlaas.core.scheduling import PRESETS

    print("policies (--policy NAME, or your own: --policy pkg.module:Class): the order jobs "
          "are served in, and for some the engines their groups go to")  # fmt: skip
    for name in policy_names():
        policy = get_policy(name)
        doc = (type(policy).__doc__ or "").strip()
        idea = policy.idea or (doc.splitlines()[0] if doc else "(no idea or docstring given)")
        print(f"  {name:15s} {idea}")
        if policy.source:
            print(f"  {'':15s}   source: {policy.source}")
    print("presets (--preset NAME): mechanism settings of a baseline, with any policy")
    for name, settings in PRESETS.items():
        print(f"  {name:12s} {', '.join(f'{k}={v}' for k, v in settings.items())}")
    return 0


def _policies_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(func=_policies)


COMMANDS = (
    ("simulate", "simulate a workload under a policy", _simulate_arguments),
    ("sweep", sweep_cli.HELP, sweep_cli.add_sweep_arguments),
    ("plan", plan_cli.HELP, plan_cli.add_plan_arguments),
    ("report", report_cli.HELP, report_cli.add_report_arguments),
    ("policies", "list the scheduling policies and presets", _policies_arguments),
    ("train", real_cli.TRAIN_HELP, real_cli.add_train_arguments),
    ("evaluate", real_cli.EVALUATE_HELP, real_cli.add_evaluate_arguments),
    ("make-tiny-model", real_cli.TINY_HELP, real_cli.add_tiny_model_arguments),
    ("prepare-smollm2", real_cli.SMOLLM2_HELP, real_cli.add_smollm2_arguments),
    ("calibrate", twin_cli.CALIBRATE_HELP, twin_cli.add_calibrate_arguments),
    ("replay", twin_cli.REPLAY_HELP, twin_cli.add_replay_arguments),
    *service_cli.COMMANDS,
)
"""(name, help line, function adding the command's arguments and ``func``)."""


# ------------------------------------------------------------------ parser


class OneLineErrors(argparse.ArgumentParser):
    """argparse with its errors raised as one-line :class:`UsageError` (exit 2), not the
    usage text."""

    def error(self, message: str):
        command = self.prog.removeprefix("marlaas").strip()
        raise UsageError(f"{command}: {message}" if command else message)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: X)`` to an option's help, except where the default is None or
    False (nothing to show), the help already tells it, or the option is a flag that takes no
    value (``--no-activation-checkpointing``'s default True read as the flag being on)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or action.default is False or "default" in text:
            return text
        if action.option_strings and action.nargs == 0:
            return text
        return super()._get_help_string(action)


class _TopHelpFormatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """The top-level help keeps its examples' lines as written."""


class CommandParser(OneLineErrors):
    """A command's parser; ``add_arguments(parser)`` runs on first use (see :class:`_Commands`)."""

    def __init__(self, *args, add_arguments=None, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self._add_arguments = add_arguments

    def complete(self) -> CommandParser:
        """Add the command's arguments (once); returns the parser."""
        add, self._add_arguments = self._add_arguments, None
        if add is not None:
            add(self)
        return self

    def format_usage(self) -> str:
        return super(CommandParser, self.complete()).format_usage()

    def format_help(self) -> str:
        return super(CommandParser, self.complete()).format_help()


class _Commands(argparse._SubParsersAction):
    """The subcommands action: completes the chosen command's parser before it parses."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        chosen = self.choices.get(values[0])
        if isinstance(chosen, CommandParser):
            chosen.complete()
        super().__call__(parser, namespace, values, option_string)


class _Version(argparse.Action):
    """``--version``: the installed package's version, looked up only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs) -> None:
        kwargs.setdefault("help", "show the version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"marlaas {package_version()}")
        parser.exit()


def package_version() -> str:
    """The version of the installed ``marlaas`` distribution (``unknown`` when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("marlaas")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand (their arguments are added on first use;
    ``command_parsers(parser)`` completes them all)."""
    parser = OneLineErrors(
        prog="marlaas",
        description="Multi-tenant asynchronous RL: simulate, train, report.",
        epilog=EXAMPLES,
        formatter_class=_TopHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", action=_Commands,
        parser_class=CommandParser,
    )  # fmt: skip
    for name, help_line, add_arguments in COMMANDS:
        sub.add_parser(name, help=help_line, add_arguments=add_arguments)
    return parser


def command_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every command's parser of ``build_parser()``'s parser, with its arguments added."""
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: p.complete() for name, p in sub.choices.items()}


# ------------------------------------------------------------------ entry point


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the flush at exit does not fail on a closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (e.g. captured in tests)
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``marlaas`` console script."""
    args = None
    with on_signals():
        try:
            interrupts.release()  # a signal since start-up is raised here, and reported
            args = build_parser().parse_args(argv)
            code = args.func(args)
            sys.stdout.flush()  # a reader that went away (`| head`) shows here, not at exit
            return code
        except BrokenPipeError:
            _silence_stdout()  # the reader has what it wanted: exit quietly, as SIGPIPE would
            return 141
        except (KeyboardInterrupt, Interrupted) as err:
            # a coroutine the signal caught made but not yet started is dropped on purpose:
            # no "was never awaited" warning at exit after the one line
            warnings.filterwarnings("ignore", r"coroutine .* was never awaited", RuntimeWarning)
            number = err.signal if isinstance(err, Interrupted) else signal.SIGINT
            out = getattr(args, "out", None)
            left = f"{out} was left as it was" if out else "nothing was written"
            hint = getattr(args, "interrupt_hint", None)  # a text, or a function telling it
            hint = (hint() if callable(hint) else hint) or left
            print(f"marlaas: interrupted ({signal.Signals(number).name}); {hint}",
                  file=sys.stderr)  # fmt: skip
            return 128 + number
        except Exception as err:
            if _is_user_error(err):
                print(error_line(err), file=sys.stderr)
                return getattr(err, "exit_status", 2)  # a failed write (WriteError): 1
            if isinstance(err, OSError):
                print(error_line(err), file=sys.stderr)
                return 1
            raise


if __name__ == "__main__":
    sys.exit(main())
