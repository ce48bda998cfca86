"""The command-line options ``simulate`` and ``train`` share, and how they make a workload."""

from __future__ import annotations

import argparse
from pathlib import Path

from marlaas.core.limits import MAX_SEED


def check_seed(seed: int | None, option: str = "--seed") -> None:
    """A seed from the command line is in 0..MAX_SEED (numpy's range), as in a workload."""
    from marlaas.core.workload import WorkloadError

    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise WorkloadError(f"{option} {seed}: a seed is an integer from 0 to {MAX_SEED}")


def bounded_int(low: int, high: int):
    """An argparse ``type``: an integer in [low, high], else a one-line usage error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in {low}..{high}")
        return value

    parse.__name__ = "integer"
    return parse


def positive_float(high: float):
    """An argparse ``type``: a finite number above 0 and at most ``high``, else a one-line
    usage error (``float`` alone takes ``inf``, ``nan`` and ``-1``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
        if not 0 < value <= high:
            raise argparse.ArgumentTypeError(
                f"{text[:40]} is not a number above 0 and at most {high:g}"
            )
        return value

    parse.__name__ = "number"
    return parse


def path_arg(text: str) -> Path:
    """An argparse ``type`` for a path to write or read: any but the empty one (``''`` would
    be the working folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: an empty path")
    return Path(text)


path_arg.__name__ = "path"


def profile_arg(text: str) -> str:
    """An argparse ``type`` for ``--cost``: a bundled profile's name or a file, not ``''``
    (which read as no ``--cost`` at all, and ran on the workload's own costs)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: an empty name; give a bundled profile's "
                                         "name or a profile file")  # fmt: skip
    return text


profile_arg.__name__ = "profile"


def load_run_workload(args: argparse.Namespace):
    """The workload of a ``simulate``/``train`` command: the file, ``--preset`` and ``--set``
    applied, and the policy (``--policy``, else the file's) checked."""
    from marlaas.core.policies import get_policy
    from marlaas.policy_path import load_policy
    from marlaas.workload_file import load_workload, parse_overrides

    overrides = parse_overrides(args.set)
    if args.preset is not None:
        overrides["scheduling.preset"] = args.preset
    if args.policy is not None:  # '' too: refused, not the file's policy
        load_policy(args.policy)
    workload = load_workload(args.workload, overrides)
    get_policy(args.policy or workload.policy)
    return workload


def run_title(workload, summary: dict, kind: str) -> str:
    """``name · preset sequential · policy fifo · seed 0``-style heading of a run."""
    preset = f" · preset {summary['preset']}" if summary.get("preset") else ""
    return f"{workload.name}{preset} · policy {summary['policy']} · {kind}"


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload, policy, preset, seed and override arguments of simulate and train."""
    from marlaas.core.policies import policy_names
    from marlaas.core.scheduling import PRESETS

    parser.add_argument("--policy", help=f"ordering: {', '.join(policy_names())}, or your "
                        "own by import path pkg.module:Class (default: the file's)")  # fmt: skip
    parser.add_argument(
        "--preset", choices=sorted(PRESETS),
        help="mechanism preset for a baseline: sequential (one job at a time, synchronous) or "
        "sync (all jobs, a step barrier); same as --set scheduling.preset=NAME",
    )  # fmt: skip
    parser.add_argument("--seed", type=bounded_int(0, MAX_SEED),
                        help="random seed (default: the file's)")  # fmt: skip
    parser.add_argument(
        "--set", action="append", metavar="KEY=VALUE",
        help="override a workload field by dotted path, repeatable: --set 'jobs.*.rl.steps=5'",
    )  # fmt: skip
