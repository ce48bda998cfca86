"""``marlaas sweep``: one workload under several schedules, overrides, job counts and seeds.

    marlaas sweep traces/paper-32.yaml --presets sequential,sync --policies fair --out runs/x
    marlaas sweep traces/paper-32.yaml --presets sequential --policies fair --jobs 1,2,4,8 ...

A schedule is either a preset (a baseline's mechanism settings, run with the workload's
ordering policy) or a policy (an ordering over the workload's own mechanism settings). The
runs are the product of the schedules (``--presets`` then ``--policies``) x ``--jobs`` (the
workload's first N jobs) x ``--set`` variants x ``--seeds``. ``--set KEY=VALUE`` applies to
every run, as in ``simulate``; giving the same KEY several times makes one variant per value
(several such keys make a grid). Every run is exactly ``simulate_run(workload, policy,
seed)``, so a row equals ``marlaas simulate`` with the same settings. Runs go to worker
processes that stop with the command (see :mod:`marlaas.workers`; one that dies is an error
naming its run); ``--out`` gets
``sweep.csv`` (see :mod:`marlaas.sweep_table`), ``summaries.json`` (every run's summary),
``table.txt`` and, unless ``--no-events``, ``runs/<run_folder>/`` with every run's event
log and summary (``marlaas report --out X SWEEP_DIR`` compares them), all at once or not at
all.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from tqdm import tqdm

from marlaas.atomic import replacing, write_durably
from marlaas.core.feasibility import InfeasibleWorkloadError, infeasible_jobs
from marlaas.core.policies import get_policy
from marlaas.core.scheduling import PRESETS
from marlaas.core.workload import Workload, WorkloadError, parse_workload
from marlaas.out_folder import claim
from marlaas.policy_path import load_policy
from marlaas.run_options import check_seed
from marlaas.runs import json_default, write_run_files
from marlaas.sweep_table import add_ratios, format_table, ordered, summary_row
from marlaas.workers import WorkerDied, how_it_ended, run_tasks
from marlaas.workload_file import apply_overrides, load_with_overrides, parse_overrides

if TYPE_CHECKING:
    from marlaas.sim.cost_model import CostModel
    from marlaas.sim.cost_profiles import CostProfile

MAX_WORKERS = 1_024
"""Largest --workers [processes]."""
MAX_RUNS = 10_000
"""Runs in one sweep (schedules x job counts x variants x seeds)."""
RAY_TASK_RETRIES = 2
"""Times a sweep's Ray task is run again after its worker process died (its node lost, the
process killed): the cluster's failure, not the simulation's (an exception is not retried)."""


class SweepError(WorkloadError):
    """A bad sweep option (policies, job counts, seeds); reported like a bad workload."""


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: what it is called and the workload it simulates."""

    jobs: int
    variant: str
    """The varying ``--set`` values, ``key=value`` joined by spaces (``-`` when none)."""
    schedule: str
    """The preset's name, or the policy's when the run has no preset."""
    policy: str
    seed: int
    workload: Workload = field(repr=False, compare=False)
    profile: CostProfile | None = field(default=None, repr=False, compare=False)
    """The cost profile that replaces the workload's cost model (``--cost``)."""
    folder: str = ""
    """Its folder's name under ``SWEEP_DIR/runs/`` (:func:`run_folders`; "": :func:`run_folder`)."""
    alone_s: Mapping[str, float | None] | None = field(default=None, repr=False, compare=False)
    """Each job's completion time alone [s] (:func:`with_alone_times`), for its slowdown."""

    @property
    def keys(self) -> dict[str, Any]:
        """The identity columns of the run's table row."""
        return {
            "workload": self.workload.name,
            "jobs": self.jobs,
            "variant": self.variant,
            "schedule": self.schedule,
            "policy": self.policy,
            "seed": self.seed,
        }


# --------------------------------------------------------------------------- options


def parse_list(text: str, what: str, convert=str) -> list:
    """``a,b,c`` -> values, rejecting empty items and repeats (SweepError)."""
    items = [t.strip() for t in text.split(",")]
    if not all(items):
        raise SweepError(f"--{what} {text!r}: empty item; give a comma-separated list")
    try:
        values = [convert(t) for t in items]
    except ValueError:
        raise SweepError(f"--{what} {text!r}: expected integers, e.g. 1,2,4") from None
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    if repeated:
        raise SweepError(f"--{what} {text!r}: repeated {', '.join(repeated)}")
    return values


def variants(items: list[str] | None) -> list[dict[str, Any]]:
    """``--set`` items -> one override dict per variant (keys given once apply to all)."""
    by_key: dict[str, list[Any]] = {}
    for item in items or []:
        ((key, value),) = parse_overrides([item]).items()
        given = by_key.setdefault(key, [])
        if _same(value) in map(_same, given):
            raise SweepError(f"--set {item[:80]!r}: {key} is given this value twice (each value "
                             "of a key makes one variant)")  # fmt: skip
        given.append(value)
    keys = list(by_key)
    count = math.prod(len(values) for values in by_key.values())
    if count > MAX_RUNS:
        raise SweepError(f"--set: {count:,} variants; a sweep may have at most {MAX_RUNS:,} runs")
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*by_key.values())]


def _same(value: Any) -> str:
    """A value as its variant label shows it (two values alike here are one variant)."""
    return json.dumps(value, sort_keys=True, default=str)


def first_jobs(workload: Workload, n: int) -> Workload:
    """The workload with only its first ``n`` jobs (arrivals already applied stay)."""
    if not 1 <= n <= len(workload.jobs):
        count = len(workload.jobs)
        raise SweepError(f"--jobs {n}: the workload has {count} jobs (use 1..{count})")
    if n == len(workload.jobs):
        return workload
    data = workload.model_dump()
    data["jobs"], data["arrivals"] = data["jobs"][:n], None
    return parse_workload(data, source=f"{workload.name} (first {n} jobs)", schema=type(workload))


def plan(
    workload: Workload,
    policies: list[str],
    overrides: list[str] | None = None,
    jobs: list[int] | None = None,
    seeds: list[int] | None = None,
    presets: list[str] | None = None,
    profile: CostProfile | None = None,
) -> list[SweepRun]:
    """Every run of the sweep, validated (schedules, overrides, feasibility) before any runs."""
    for name in policies:
        get_policy(load_policy(name))
    for name in presets or []:
        if name not in PRESETS:
            raise SweepError(f"--presets: unknown preset {name!r}; choose from {list(PRESETS)}")
    schedules = [(p, workload.policy, p) for p in presets or []]
    schedules += [(p, p, None) for p in policies]
    every = variants(overrides)
    count = len(every) * len(jobs or [0]) * len(schedules) * len(seeds or [0])
    if count > MAX_RUNS:
        raise SweepError(f"{count:,} runs; a sweep may have at most {MAX_RUNS:,} (fewer "
                         "schedules, job counts, variants or seeds)")  # fmt: skip
    runs = []
    for variant in every:
        base = apply_overrides(workload, variant) if variant else workload
        varying = {k: v for k, v in variant.items() if _varies(overrides, k)}
        label = " ".join(f"{k}={json.dumps(v)}" for k, v in varying.items()) or "-"
        for n in jobs or [len(base.jobs)]:
            sub = first_jobs(base, n)
            for schedule, policy, preset in schedules:
                run_workload = (
                    apply_overrides(sub, {"scheduling.preset": preset}) if preset else sub
                )
                infeasible = infeasible_jobs(run_workload.jobs, run_workload.cluster)
                if infeasible:  # a run that would drop jobs compares nothing: refuse up front
                    raise InfeasibleWorkloadError(infeasible[0])
                for seed in seeds or [sub.seed]:
                    run = SweepRun(n, label, schedule, policy, seed, run_workload, profile)
                    runs.append(run)
    folders = run_folders([(r.jobs, r.variant, r.schedule, r.seed) for r in runs])
    return [replace(run, folder=folder) for run, folder in zip(runs, folders, strict=True)]


def _varies(items: list[str] | None, key: str) -> bool:
    return sum(i.partition("=")[0].strip() == key for i in items or []) > 1


# --------------------------------------------------------------------------- running


def run_folder(jobs: int, variant: str, schedule: str, seed: int) -> str:
    """Name of a run's folder under ``SWEEP_DIR/runs/``: ``jobs8-fair-seed0`` (the variant,
    when there is one, reduced to letters, digits, ``-`` and ``_``, before the seed)."""
    parts = [f"jobs{jobs}", schedule]
    if variant and variant != "-":
        parts.append(re.sub(r"[^A-Za-z0-9_-]+", "_", variant).strip("_"))
    return "-".join([*parts, f"seed{seed}"])


def run_folders(keys: list[tuple[int, str, str, int]]) -> list[str]:
    """Folder names of the runs ``keys`` (jobs, variant, schedule, seed): each its
    :func:`run_folder`, made unique where variants that differ only in characters a folder
    name drops (``a.b=1``, ``a_b=1``) would share one: ``-2``, ``-3``, ... in the order of
    their variants (so a sweep's writer and its report agree, whatever their row order)."""
    names = [run_folder(*key) for key in keys]
    alike: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        alike.setdefault(name, []).append(i)
    for name, rows in alike.items():
        ordered_rows = sorted(rows, key=lambda i: (keys[i][1], i))
        for n, i in enumerate(ordered_rows[1:], start=2):
            names[i] = f"{name}-{n}"
    return names


def run_one(run: SweepRun, events_dir: Path | None = None) -> tuple[dict, dict]:
    """Simulate one run: (table row, summary); with ``events_dir`` also write its run folder
    there (:func:`run_folder`). Top level so that a process pool can call it."""
    return _finish(run, *simulate_one(run), events_dir)


def simulate_one(run: SweepRun) -> tuple[pd.DataFrame, dict]:
    """Simulate one run: (event log, summary). Top level so that a Ray task can call it."""
    from marlaas.sim.run import simulate_run

    return simulate_run(run.workload, run.policy, run.seed, profile=run.profile,
                        alone_s=run.alone_s)  # fmt: skip


def _finish(
    run: SweepRun, events: pd.DataFrame, summary: dict, events_dir: Path | None
) -> tuple[dict, dict]:
    """The run's (table row, summary); its run folder written under ``events_dir``."""
    if events_dir is not None:
        name = run.folder or run_folder(run.jobs, run.variant, run.schedule, run.seed)
        write_run_files(events_dir / name, events, summary, run.workload)
    return summary_row(run.keys, summary), summary


def simulate_alone(task: tuple[Workload, int, CostModel | None]) -> float | None:
    """A job's completion time alone (marlaas.sim.alone): top level, for a pool or Ray."""
    from marlaas.sim.alone import alone_time

    return alone_time(*task)


def with_alone_times(
    runs: list[SweepRun], workers: int, progress: bool = True, ray: str | None = None
) -> list[SweepRun]:
    """``runs`` with each job's completion time alone (``alone_s``, for the slowdowns):
    every distinct job alone simulated once, over the same workers as the runs."""
    from marlaas.sim.alone import distinct, per_job

    tasks = distinct((run.workload, run.seed) for run in runs)
    profile = runs[0].profile if runs else None  # one profile for every run of a sweep
    cost = profile.cost if profile is not None else None
    todo = [(one, seed, cost) for one, seed in tasks.values()]
    times: dict[str, float | None] = {}
    keys = list(tasks)
    with tqdm(total=len(todo), unit="job", desc="alone", disable=not progress) as bar:
        order = _longest_first(todo)
        for i, seconds in _each(simulate_alone, todo, workers, ray, order, _about_alone):
            times[keys[i]] = seconds
            bar.update()
    return [replace(run, alone_s=per_job(run.workload, run.seed, times)) for run in runs]


def execute(
    runs: list[SweepRun],
    workers: int | None = None,
    progress: bool = True,
    events_dir: Path | None = None,
    ray: str | None = None,
) -> tuple[list[dict], list[dict]]:
    """Run every run (in a process pool when there are several and workers > 1; as Ray tasks
    on a cluster with ``ray``: ``local``, ``auto`` or an address, see
    :func:`marlaas.ray_cluster.ray_session`), after simulating each of their distinct jobs
    alone (:func:`with_alone_times`); with ``events_dir`` each run's folder is written under
    it (by this process, for Ray: the tasks' nodes need not share its disk).

    Returns rows and summaries in plan order, whatever order the runs finished in.
    """
    workers = max(1, min(workers or os.cpu_count() or 1, len(runs)))
    runs = with_alone_times(runs, workers, progress, ray)
    results: list[tuple[dict, dict] | None] = [None] * len(runs)
    # the longest runs first, so that the pool does not end on one long run
    order = sorted(range(len(runs)), key=lambda i: -_work(runs[i]))
    # Ray's nodes need not share this disk: their runs' folders are written here
    task = simulate_one if ray is not None else partial(run_one, events_dir=events_dir)
    with tqdm(total=len(runs), unit="run", desc="sweep", disable=not progress) as bar:
        for i, result in _each(task, runs, workers, ray, order, _about_run):
            results[i] = _finish(runs[i], *result, events_dir) if ray is not None else result
            bar.set_postfix_str(_short(runs[i]))
            bar.update()
    return [r[0] for r in results], [r[1] for r in results]


def _each(
    task: Callable[[Any], Any],
    items: list,
    workers: int,
    ray: str | None,
    order: list[int],
    describe: Callable[[Any], str] = repr,
) -> Iterator[tuple[int, Any]]:
    """(index, ``task(items[index])``) for every item, as they finish: here one after the
    other (workers 1), in worker processes, or as Ray tasks (one CPU each); ``order``: the
    indices in the order to start them. Leaving early stops the rest (the workers are
    terminated, Ray's tasks cancelled). A worker that dies running an item (killed, out of
    memory) is a SweepError naming it (``describe``)."""
    if ray is not None:
        yield from _on_ray(task, items, order, ray, describe)
    elif workers == 1 or len(items) == 1:
        for i in order:
            yield i, task(items[i])
    else:
        # Leaving (done, an error, Ctrl-C, SIGTERM) terminates the workers.
        try:
            yield from run_tasks(task, ((i, items[i]) for i in order), min(workers, len(items)))
        except WorkerDied as died:
            raise SweepError(
                f"a worker process {how_it_ended(died.exitcode)} while it ran "
                f"{describe(items[died.index])}"
            ) from None


def _on_ray(
    task: Callable[[Any], Any],
    items: list,
    order: list[int],
    address: str,
    describe: Callable[[Any], str] = repr,
) -> Iterator[tuple[int, Any]]:
    """(index, ``task(items[index])``) of every item, computed as a Ray task (one CPU
    each), as they finish; leaving early cancels the rest. What a task raised is raised here
    as it was raised (a policy's one-line error, not Ray's traceback of it), never retried: a
    simulation is deterministic. A task whose worker process died (a node lost, the process
    killed) is run again, up to RAY_TASK_RETRIES times, then it is a SweepError naming the
    item (``describe``), as in the process pool."""
    import ray
    from ray.exceptions import RayError, RayTaskError

    from marlaas.ray_cluster import ray_session

    with ray_session(address):
        remote = ray.remote(num_cpus=1, max_retries=RAY_TASK_RETRIES)(task)
        pending = {remote.remote(items[i]): i for i in order}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    i = pending.pop(ref)
                    try:
                        value = ray.get(ref)
                    except RayTaskError as err:
                        cause = getattr(err, "cause", None)
                        raise (cause if isinstance(cause, BaseException) else err) from None
                    except RayError as err:
                        why = " ".join(str(err).split())[:200]
                        raise SweepError(f"a Ray task failed while it ran {describe(items[i])}: "
                                         f"{type(err).__name__}: {why}") from None  # fmt: skip
                    yield i, value
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)


def _about_run(run: SweepRun) -> str:
    """``run jobs2-fair-seed0 (workload w, policy fair, seed 0)``: a run, in an error."""
    folder = run.folder or run_folder(run.jobs, run.variant, run.schedule, run.seed)
    return f"run {folder} (workload {run.workload.name}, policy {run.policy}, seed {run.seed})"


def _about_alone(task: tuple[Workload, int, CostModel | None]) -> str:
    """``job a alone (workload w, seed 0)``: a job simulated alone, in an error."""
    workload, seed, _ = task
    jobs = ", ".join(j.name for j in workload.jobs)
    return f"job {jobs} alone (workload {workload.name}, seed {seed})"


def _longest_first(todo: list[tuple[Workload, int, CostModel | None]]) -> list[int]:
    return sorted(range(len(todo)), key=lambda i: -_turns(todo[i][0]))


def _work(run: SweepRun) -> int:
    """A run's group turns to generate: a rough measure of how long it takes."""
    return _turns(run.workload)


def _turns(workload: Workload) -> int:
    return sum(j.rl.steps * j.rl.prompts_per_step * j.rl.turns for j in workload.jobs)


def _short(run: SweepRun) -> str:
    variant = "" if run.variant == "-" else f" {run.variant}"
    return f"{run.jobs} jobs{variant} {run.schedule} seed {run.seed}"


def comparison(rows: list[dict], baseline: str | None) -> pd.DataFrame:
    """The comparison table (see :mod:`marlaas.sweep_table`) of a sweep's rows."""
    return ordered(add_ratios(pd.DataFrame(rows), baseline))


def write_sweep_files(folder: Path, table: pd.DataFrame, summaries: list[dict]) -> Path:
    """Write sweep.csv, summaries.json and table.txt into ``folder`` (a staging folder)."""
    with replacing(folder / "sweep.csv") as tmp:  # through atomic: a failed write names its file
        table.to_csv(tmp, index=False)
    write_durably(folder / "summaries.json", json.dumps(summaries, indent=1, default=json_default))
    write_durably(folder / "table.txt", format_table(table) + "\n")
    return folder


# --------------------------------------------------------------------------- CLI


def sweep_command(args: argparse.Namespace) -> int:
    """``marlaas sweep`` for parsed arguments (see :mod:`marlaas.sweep_cli`)."""
    policies = parse_list(args.policies, "policies") if args.policies is not None else []
    presets = parse_list(args.presets, "presets") if args.presets is not None else []
    if not policies and not presets:
        raise SweepError("give --policies and/or --presets, e.g. --presets sequential "
                         "--policies fifo,fair")  # fmt: skip
    jobs = parse_list(args.jobs, "jobs", int) if args.jobs is not None else None
    seeds = parse_list(args.seeds, "seeds", int) if args.seeds is not None else None
    for seed in seeds or []:
        check_seed(seed, "--seeds")
    if args.ray is not None:  # without Ray: one line, before any work
        from marlaas.ray_cluster import require_ray

        require_ray("sweep --ray", args.ray)
    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        raise SweepError(f"--workers {args.workers}: must be >= 1 and <= {MAX_WORKERS}")
    fixed = [s for s in args.set or [] if not _varies(args.set, s.partition("=")[0].strip())]
    varying = [s for s in args.set or [] if s not in fixed]
    workload = load_with_overrides(args.workload, fixed)
    from marlaas.sim.cost_profiles import load_profile
    from marlaas.sim.run import cost_of

    profile = load_profile(args.cost, base=cost_of(workload)) if args.cost else None
    runs = plan(workload, policies, varying, jobs, seeds, presets, profile)
    schedules = presets + policies
    baseline = args.baseline
    if baseline is None:  # not `or`: --baseline '' (an unset variable) is refused, not the default
        baseline = "sequential" if "sequential" in schedules else None
    if baseline is not None and baseline not in schedules:
        raise SweepError(f"--baseline {baseline!r} is not one of the presets or policies")
    with claim(args.out, "sweep") as out, out.staged() as staging:
        runs_dir = None if args.no_events else staging / "runs"
        rows, summaries = execute(runs, args.workers, not args.quiet, runs_dir, args.ray)
        table = comparison(rows, baseline)
        write_sweep_files(staging, table, summaries)
    vs = f", ratios vs {baseline}" if baseline else ""
    print(f"{workload.name}: {len(runs)} runs{vs}")
    print(format_table(table))
    print(f"wrote {args.out}/sweep.csv ({len(runs)} runs, {table['wall_s'].sum():.1f} s simulated)")
    return 0
