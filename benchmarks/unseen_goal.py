"""Issue 28's goal on workloads a policy was not tuned on, per (workload, seed) pair: no worse
than fifo on makespan, mean completion time and Jain's index of slowdowns, and a mean
completion time below fair's (simulated, the workload's own cost profile unless named)::

    python -m benchmarks.unseen_goal --policies split-progress --out runs/unseen

writes the workloads of benchmarks/unseen_workloads.py into OUT (and its random ones up to the
highest rand-K named, and paper-32's jobs cycled to 128 with 20 steps each,
benchmarks/cycled_workload.py), sweeps each workload below with fifo, fair and the policies
(``marlaas sweep ... --no-events --out OUT/NAME``; with ``--resume`` a folder whose sweep.csv
already has every run is kept, so a stopped measurement goes on where it stopped), then prints
one line per workload and policy, each seed's makespan / fifo's, mean JCT / fifo's, mean JCT /
fair's and Jain - fifo's (a ``*`` where the pair misses), and the pairs met, and writes this
call's figures to OUT/verdicts.csv. About 10 min for fifo, fair and one policy on two cores
(cycled-128 4 of them; measured 9 min 35 s); ten random workloads with four policies besides
took 8 min.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import pandas as pd

from benchmarks.cycled_workload import main as write_cycled
from benchmarks.unseen_workloads import main as write_unseen_workloads
from marlaas import cli
from marlaas.atomic import write_durably

TRACES = Path(__file__).resolve().parent.parent / "traces"
AZURE = "arrivals={{path: {}, format: azure, time_scale: 100}}"
CONV = AZURE.format(json.dumps(str(TRACES / "azure" / "AzureLLMInferenceTrace_conv.csv")))
CODE = AZURE.format(json.dumps(str(TRACES / "azure" / "AzureLLMInferenceTrace_code.csv")))

RANDOM_NAME = re.compile(r"rand-(0|[1-9]\d{0,2})")
"""A random workload of paper-32's job kinds, rand-0 to rand-999 (benchmarks/unseen_workloads.py
--random): not swept unless named with --workloads."""

WORKLOADS: dict[str, tuple[str, ...]] = {
    "paper-32": (f"{TRACES}/paper-32.yaml",),
    "paper-8": (f"{TRACES}/paper-8.yaml",),
    "paper-16": (f"{TRACES}/paper-16.yaml",),
    "paper-16-azure-conv": (f"{TRACES}/paper-16.yaml", "--set", CONV),
    "small": (f"{TRACES}/small.yaml",),
    "paper-32-staggered": (f"{TRACES}/paper-32-staggered.yaml",),
    "paper-16-azure-code": (f"{TRACES}/paper-16.yaml", "--set", CODE),
    "paper-32-azure-conv": (f"{TRACES}/paper-32.yaml", "--set", CONV),
    "new1": ("{out}/new1.yaml",),
    "new2": ("{out}/new2.yaml",),
    "steps-half": ("{out}/steps-half.yaml",),
    "steps2": ("{out}/steps2.yaml",),
    "paper-32-a100": (f"{TRACES}/paper-32.yaml", "--cost", "a100-7b"),
    "cycled-128": ("{out}/paper-cycled-128.yaml",),
}
"""Each workload's ``marlaas sweep`` arguments ({out}: where the unseen workloads are)."""

BASELINES = ("fifo", "fair")


def sweep_arguments(name: str, out: Path) -> list[str]:
    """``marlaas sweep``'s arguments for workload ``name`` (a key of WORKLOADS, or rand-K),
    its files written under ``out``."""
    if RANDOM_NAME.fullmatch(name):
        return [str(out / f"{name}.yaml")]
    return [arg.replace("{out}", str(out)) for arg in WORKLOADS[name]]


def verdicts(table: pd.DataFrame, policy: str) -> pd.DataFrame:
    """Per seed, ``policy``'s ratios to fifo's and fair's runs of the same seed in ``table``
    (a sweep.csv) and whether the pair meets the goal. Raises ValueError naming a missing
    run."""
    runs = table.set_index(["policy", "seed"])
    rows = []
    for seed in sorted(table.loc[table.policy == policy, "seed"]):
        for schedule in BASELINES:
            if (schedule, seed) not in runs.index:
                raise ValueError(f"no {schedule} run of seed {seed} beside {policy}'s")
        mine, fifo, fair = (runs.loc[(name, seed)] for name in (policy, *BASELINES))
        for name, run in (("fifo", fifo), ("fair", fair), (policy, mine)):
            figures = (run.makespan_s, run.jct_mean_s, run.jain_slowdown)
            if not all(math.isfinite(figure) for figure in figures):
                raise ValueError(f"{name}'s run of seed {seed} has no makespan, JCT or Jain")
        row = {
            "seed": seed,
            "makespan_vs_fifo": mine.makespan_s / fifo.makespan_s,
            "jct_vs_fifo": mine.jct_mean_s / fifo.jct_mean_s,
            "jct_vs_fair": mine.jct_mean_s / fair.jct_mean_s,
            "jain_minus_fifo": mine.jain_slowdown - fifo.jain_slowdown,
        }
        row["met"] = bool(
            row["makespan_vs_fifo"] <= 1
            and row["jct_vs_fifo"] <= 1
            and row["jain_minus_fifo"] >= 0
            and row["jct_vs_fair"] < 1
        )
        rows.append(row)
    if not rows:
        raise ValueError(f"no {policy} run in the table")
    return pd.DataFrame(rows)


def describe(name: str, policy: str, found: pd.DataFrame) -> str:
    """One line: the workload, the pairs met, and each seed's four figures."""
    cells = "  ".join(
        f"{r.makespan_vs_fifo:.3f}/{r.jct_vs_fifo:.3f}/{r.jct_vs_fair:.3f}/"
        f"{r.jain_minus_fifo:+.3f}{'' if r.met else '*'}"
        for r in found.itertuples()
    )
    return f"{name:20s} {policy:16s} {int(found.met.sum())}/{len(found)}  {cells}"


def _complete(folder: Path, schedules: list[str], seeds: list[int]) -> bool:
    csv = folder / "sweep.csv"
    if not csv.exists():
        return False
    table = pd.read_csv(csv)
    have = set(zip(table.policy, table.seed, strict=True))
    return all((schedule, seed) in have for schedule in schedules for seed in seeds)


def _refuse_foreign(path: Path, start: str) -> None:
    """Stop, in one line, unless ``path`` is absent or a file this tool wrote (it begins with
    ``start``): nothing of the user's in OUT is replaced."""
    ours = path.is_file() and path.read_text(errors="replace").startswith(start)
    if path.exists() and not ours:
        raise SystemExit(f"{path}: exists and is not a file this tool wrote; not replacing it "
                         "(choose another --out)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", required=True, help="comma-separated policy names or paths")
    parser.add_argument("--out", required=True, help="folder for the workloads and sweeps")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="seeds (default 0-4)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help="comma-separated, of: " + ", ".join(WORKLOADS) + ", rand-K "
                        "(K 0-999; default: all but the random ones)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=2, help="sweep processes (default 2)")
    parser.add_argument("--resume", action="store_true",
                        help="keep a workload's earlier sweep that has every run asked for "
                        "(default: sweep again: the code may have changed since)")  # fmt: skip
    args = parser.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p]
    names = [w for w in args.workloads.split(",") if w]
    if not policies or not names:
        parser.error("--policies and --workloads each need at least one name")
    unknown = [w for w in names if w not in WORKLOADS and not RANDOM_NAME.fullmatch(w)]
    if unknown:
        known = ", ".join(WORKLOADS)
        parser.error(f"--workloads: unknown {', '.join(unknown)} (known: {known}, rand-K)")
    randoms = [int(RANDOM_NAME.fullmatch(w).group(1)) for w in names if RANDOM_NAME.fullmatch(w)]
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: comma-separated integers, e.g. 0,1,2")
    out = Path(args.out)
    cycled = out / "paper-cycled-128.yaml"
    _refuse_foreign(cycled, "# paper-32's jobs cycled to 128 (benchmarks/cycled_workload.py)")
    _refuse_foreign(out / "verdicts.csv", "seed,makespan_vs_fifo,")
    write_unseen_workloads(["--out", str(out), "--random", str(max(randoms, default=-1) + 1)])
    write_cycled(["--jobs", "128", "--steps", "20", "--out", str(cycled)])
    schedules = [*BASELINES, *[p for p in policies if p not in BASELINES]]
    lines, frames = [], []
    for name in names:
        folder = out / name
        if not (args.resume and _complete(folder, schedules, seeds)):
            options = ["--policies", ",".join(schedules), "--seeds", args.seeds, "--no-events",
                       "--workers", str(args.workers), "--quiet", "--out", str(folder)]  # fmt: skip
            code = cli.main(["sweep", *sweep_arguments(name, out), *options])
            if code != 0:
                return code
        table = pd.read_csv(folder / "sweep.csv")
        for policy in policies:
            found = verdicts(table[table.seed.isin(seeds)], policy)
            lines.append(describe(name, policy, found))
            frames.append(found.assign(workload=name, policy=policy))
    judged = pd.concat(frames)
    print("workload             policy           met  per seed: makespan/fifo, JCT/fifo, "
          "JCT/fair, Jain - fifo (* missed)")  # fmt: skip
    print("\n".join(lines))
    for policy, rows in judged.groupby("policy", sort=False):
        print(f"{policy}: the goal met on {int(rows.met.sum())} of {len(rows)} pairs")
    write_durably(out / "verdicts.csv", judged.to_csv(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
