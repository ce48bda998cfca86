"""``marlaas calibrate`` and ``marlaas replay``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from marlaas.run_options import path_arg, profile_arg


def _calibrate(args: argparse.Namespace) -> int:
    from marlaas.out_folder import claim_file
    from marlaas.sim.cost_profiles import is_calibrated_profile, write_profile
    from marlaas.twin.calibrate import calibrate
    from marlaas.twin.header import provenance

    from_out = args.name is None  # --name '' (an unset $NAME) is refused, not the stem
    name = _profile_name(Path(args.out).stem if from_out else args.name, from_out)
    with claim_file(args.out, "cost profile", is_calibrated_profile) as out:  # before any work
        result = calibrate(args.runs)
        meta = provenance(result, name)
        notes = {f.name: f"{f.unit}; {f.rows} rows; {f.quality}" for f in result.fitted}
        write_profile(out, result.cost, meta, notes)
    print(result.table())
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(
        "fit: R² of the regression (over the engines' measured steps, or the generate rows of "
        "runs without them: the engine terms say which); replayed: the refinement's objective "
        "(RMS log ratio of replayed to real generate durations, plus the log ratios of their "
        "sums and of the makespans), regression -> refined"
    )
    print(f"wrote {args.out} (profile {name!r}, from {len(args.runs)} run(s))")
    return 0


def _profile_name(name: str, from_out: bool) -> str:
    """The name a calibrated profile gets, if a profile may have it (one that load_profile
    reads back); a UsageError naming where it came from otherwise."""
    from marlaas.core.spec_fields import check_name
    from marlaas.terminal import UsageError

    try:
        return check_name(name)
    except ValueError as err:
        where = "--out's file name (give --name)" if from_out else "--name"
        raise UsageError(f"calibrate {where} {name[:40]!r}: a profile name {err}") from None


def _replay(args: argparse.Namespace) -> int:
    from marlaas.atomic import replacing
    from marlaas.executors.host_share import busy_host_note
    from marlaas.executors.yardstick import run_yardstick
    from marlaas.out_folder import claim
    from marlaas.runs import write_run_files
    from marlaas.sim.cost_profiles import load_profile
    from marlaas.terminal import warning_line
    from marlaas.twin.fidelity import format_fidelity
    from marlaas.twin.real_run import load_real_run
    from marlaas.twin.replay import (
        FIDELITY_FILE,
        calibration_yardstick,
        model_warning,
        replay,
        unkept_yardstick_note,
    )
    from marlaas.twin.speed import speed_note

    run = load_real_run(args.run, "replay")
    profile = load_profile(args.cost, base=run.workload.cost) if args.cost else None
    other = model_warning(profile, run)
    if other:
        print(warning_line(other), file=sys.stderr)
    with claim(args.out, "replay") as target:  # checked and locked before any work
        events, summary, table = replay(run, profile)
        with target.staged() as staging:
            write_run_files(staging, events, summary, run.workload)
            with replacing(staging / FIDELITY_FILE) as tmp:  # a failed write names its file
                table.to_csv(tmp, index=False)
    used = profile.name if profile else "the workload's cost model"
    print(f"replay of {args.run} with {used}")
    print(format_fidelity(table, devices=args.devices))
    note = busy_host_note(run.summary.get("host"))
    if note:  # the real run was slowed by what the replay cannot see
        print(
            f"note: the real run's host was busy: {note}; its yardstick timed that "
            "moment's load, not its speed: the replay charges the profile's own costs"
        )
    else:
        speed = speed_note(run_yardstick(run.summary), calibration_yardstick(profile, run))
        speed = speed or unkept_yardstick_note(run, profile)
        if speed:
            print(f"note: {speed}")
    out = args.out
    print(f"wrote {out}/ ({FIDELITY_FILE}; `marlaas report {args.run} {out} --out R` compares)")
    return 0


CALIBRATE_HELP = "fit the simulator's cost model from real runs"
REPLAY_HELP = "simulate a real run again and report the error per metric"


def add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``marlaas calibrate``."""
    parser.description = (
        "Fit every cost-model parameter from the event logs of real runs (folders of "
        "`marlaas train`) and write a cost profile for `simulate/sweep/replay --cost`."
    )
    parser.add_argument("runs", nargs="+", type=Path, help="real run folders")
    parser.add_argument("--out", required=True, type=path_arg, help="cost profile to write (YAML)")
    parser.add_argument("--name", help="profile name (default: the file's stem)")
    parser.set_defaults(func=_calibrate)


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``marlaas replay``."""
    parser.description = (
        "Simulate a real run's own workload, policy and seed (its recorded generation lengths "
        "and environment times) and write the fidelity table."
    )
    parser.add_argument("run", type=Path, help="a real run folder")
    parser.add_argument("--cost", metavar="PROFILE", type=profile_arg,
                        help="cost profile (bundled name or "
                        "file); default: the run's workload's cost model")  # fmt: skip
    parser.add_argument("--out", required=True, type=path_arg, help="replay run folder to write")
    parser.add_argument("--devices", action="store_true", help="also list every device's row")
    parser.set_defaults(func=_replay)
