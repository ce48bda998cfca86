"""``marlaas plan`` for parsed arguments: build the space, search it, write the outputs.

    marlaas plan traces/paper-32.yaml --set 'jobs.*.deadline_s=3600' --out runs/plan

``OUT`` gets ``workload.yaml`` (the chosen configuration: ``marlaas simulate``, ``train``
and ``serve`` read it), ``plan.csv`` (one row per configuration and seed simulated),
``pareto.csv`` (price per hour against mean p90 job completion time, of the configurations
that met every deadline), ``plan.json`` (the choice, the search's counts and times, the
binding deadline, the one-step-smaller neighbours, where the model was not monotone) and
``plan.html``; all at once or not at all (see :mod:`marlaas.out_folder`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import math
import time
from pathlib import Path

import yaml

from marlaas.atomic import replacing, write_durably
from marlaas.core.feasibility import why_infeasible
from marlaas.core.limits import MAX_ADAPTER_SLOTS, MAX_DEVICES, MAX_SEED
from marlaas.core.policies import get_policy, policy_names
from marlaas.core.scheduling import PRESETS
from marlaas.core.workload import Workload
from marlaas.out_folder import claim
from marlaas.plan import results
from marlaas.plan.evaluate import Evaluator, Outcome
from marlaas.plan.search import cheapest, exhaustive, fastest_within
from marlaas.plan.space import (
    DEFAULT_VALUES,
    DIMENSIONS,
    NO_PRESET,
    Config,
    PlanError,
    Space,
    Variant,
    current,
    pool_names,
)
from marlaas.policy_path import load_policy
from marlaas.runs import json_default
from marlaas.sweep import MAX_WORKERS, execute, parse_list
from marlaas.workload_file import load_with_overrides

MAX_SEEDS = 100
"""Most seeds a plan's configurations must meet their deadlines on."""
MAX_VARIANTS = 1_000
"""Most variants (trainer widths x adapter slots x policies x presets) in one plan."""
VALUE_OPTIONS = {
    "trainer_width": "trainer_widths",
    "adapter_slots": "adapter_slots",
    "policy": "policies",
    "preset": "presets",
}
"""Searched dimension -> the option that gives its values."""
VARIANT_FIELDS = ("trainer_width", "adapter_slots", "policy", "preset")


def build_space(args: argparse.Namespace, workload: Workload, profile_name: str | None) -> Space:
    """The space the options describe (PlanError naming a bad option)."""
    dims = parse_list(args.search, "search") if args.search is not None else ["pools"]
    unknown = [d for d in dims if d not in DIMENSIONS]
    if unknown:
        raise PlanError(f"--search: unknown {unknown[0]!r}; choose from {', '.join(DIMENSIONS)}")
    here = current(workload)
    values = {
        "trainer_width": [here.variant.trainer_width],
        "adapter_slots": [here.variant.adapter_slots],
        "policy": [here.variant.policy],
        "preset": [here.variant.preset],
    }
    for dim, option in VALUE_OPTIONS.items():
        given = getattr(args, option)
        convert = int if dim in ("trainer_width", "adapter_slots") else str
        if given is not None:
            values[dim] = parse_list(given, option.replace("_", "-"), convert)
        elif dim in dims:
            values[dim] = list(DEFAULT_VALUES.get(dim) or policy_names())
    for name in values["policy"]:
        get_policy(load_policy(name))  # an import path: imported and checked, or one line
    for name in values["preset"]:
        if name != NO_PRESET and name not in PRESETS:
            raise PlanError(f"--presets: unknown preset {name!r}; choose from "
                            f"{', '.join([NO_PRESET, *PRESETS])}")  # fmt: skip
    for dim, most in (("trainer_width", MAX_DEVICES), ("adapter_slots", MAX_ADAPTER_SLOTS)):
        if not 1 <= min(values[dim]) <= max(values[dim]) <= most:
            raise PlanError(f"--{VALUE_OPTIONS[dim].replace('_', '-')}: values must be "
                            f"1..{most:,}")  # fmt: skip
    combos = list(itertools.product(*(values[d] for d in VALUE_OPTIONS)))
    if len(combos) > MAX_VARIANTS:
        raise PlanError(f"{len(combos):,} variants to search; at most {MAX_VARIANTS:,}")
    max_devices = args.max_devices
    if max_devices is None:
        max_devices = min(2 * workload.cluster.total_devices, MAX_DEVICES)
    if not 2 <= max_devices <= MAX_DEVICES:
        raise PlanError(f"--max-devices {max_devices}: give 2..{MAX_DEVICES:,} (one device per "
                        "pool at least)")  # fmt: skip
    inference, training = pool_names(workload)
    prices = workload.prices
    return Space(
        variants=tuple(Variant(*combo) for combo in combos),
        max_devices=max_devices,
        inference_price=prices.device_hour_price(inference, profile_name),
        training_price=prices.device_hour_price(training, profile_name),
        fixed=None if "pools" in dims else (here.inference, here.training),
    )


def check_inputs(args: argparse.Namespace, workload: Workload) -> list[int]:
    """The seeds to plan on; PlanError for options or jobs no configuration can help."""
    if not 1 <= args.seeds <= MAX_SEEDS:
        raise PlanError(f"--seeds {args.seeds}: give 1..{MAX_SEEDS}")
    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        raise PlanError(f"--workers {args.workers}: must be >= 1 and <= {MAX_WORKERS}")
    if args.budget is None and not workload.deadlines_s():
        raise PlanError(
            f"{workload.name}: no job has a deadline; give jobs deadline_s (or tenants "
            "job_deadline_s), e.g. --set 'jobs.*.deadline_s=3600', or plan with --budget"
        )
    if args.budget is not None and not (math.isfinite(args.budget) and args.budget > 0):
        raise PlanError(f"--budget {args.budget}: a price per hour must be a finite number > 0")
    for spec in workload.jobs:
        reason = why_infeasible(spec, workload.cluster)
        if reason is not None:  # the pool sizes do not change an engine's or the env workers'
            raise PlanError(f"job {spec.name!r} fits no engine of any cluster size: {reason}")
    if workload.seed + args.seeds - 1 > MAX_SEED:
        raise PlanError(
            f"--seeds {args.seeds} from the workload's seed {workload.seed} goes past "
            f"{MAX_SEED}, the largest seed a run takes: give a smaller seed or fewer seeds"
        )
    return [workload.seed + i for i in range(args.seeds)]


def plan_command(args: argparse.Namespace) -> int:
    """``marlaas plan`` (see :mod:`marlaas.plan.cli` for the options)."""
    workload = load_with_overrides(args.workload, args.set)
    from marlaas.sim.cost_profiles import load_profile
    from marlaas.sim.run import cost_of

    profile = load_profile(args.cost, base=cost_of(workload)) if args.cost else None
    seeds = check_inputs(args, workload)
    space = build_space(args, workload, profile.name if profile else None)
    if args.ray is not None and args.workers is not None:
        raise PlanError("--ray and --workers: choose one (Ray places the simulations itself)")
    if args.ray is not None:  # without Ray: one line, before any work
        from marlaas.ray_cluster import require_ray

        require_ray("plan --ray", args.ray)
    runner = execute if args.ray is None else functools.partial(execute, ray=args.ray)
    evaluate = Evaluator(workload, seeds, profile, args.workers, runner=runner,
                         progress=not args.quiet)  # fmt: skip
    for variant in space.variants:  # a preset that contradicts the workload: now, in one line
        evaluate.workload_of(Config(variant, 1, variant.trainer_width))
    mode = "budget" if args.budget is not None else "exhaustive" if args.exhaustive else "search"
    with claim(args.out, "plan") as out, _cluster(args.ray):
        start = time.perf_counter()
        try:
            chosen = _search(mode, space, evaluate, args.budget)
            searched = evaluate.simulations
            search_s = time.perf_counter() - start
            near = results.neighbours(space, chosen.config) if mode != "budget" else []
            if near:
                evaluate.feasible(near)
        finally:
            evaluate.close()
        report = _report(args, workload, space, evaluate, chosen, near, mode, seeds)
        report.update(search_simulations=searched, search_s=search_s,
                      wall_s=time.perf_counter() - start)  # fmt: skip
        with out.staged() as staging:
            write_plan_files(staging, space, evaluate, chosen, report, profile)
    _print(report, args.out)
    return 0


def _cluster(address: str | None) -> contextlib.AbstractContextManager:
    """One Ray session for the whole search (each batch's ``execute`` joins it) with
    ``--ray``; nothing without."""
    if address is None:
        return contextlib.nullcontext()
    from marlaas.ray_cluster import ray_session

    return ray_session(address)


def _search(mode: str, space: Space, evaluate: Evaluator, budget: float | None) -> Outcome:
    if mode == "budget":
        chosen = fastest_within(space, budget, evaluate)
        if chosen is None:
            raise PlanError(f"--budget {budget:g}: no configuration of at least one device "
                            "per pool costs that little per hour")  # fmt: skip
        return chosen
    chosen = (exhaustive if mode == "exhaustive" else cheapest)(space, evaluate)
    if chosen is None:
        raise results.infeasible(space, list(evaluate.outcomes.values()))
    return chosen


def _report(args, workload, space, evaluate, chosen, near, mode, seeds) -> dict:
    """plan.json's content."""
    outcomes = list(evaluate.outcomes.values())
    config = chosen.config
    return {
        "workload": workload.name,
        "mode": mode,
        "budget_per_hour": args.budget,
        "seeds": seeds,
        "currency": workload.prices.currency,
        "price_source": workload.prices.source,
        "space": {
            "max_devices": space.max_devices,
            "variants": [v.label() for v in space.variants],
            "inference_price_per_hour": space.inference_price,
            "training_price_per_hour": space.training_price,
            "pools_searched": space.fixed is None,
            "grid_configurations": len(space.configs()),
        },
        "chosen": {
            "config": config.label(),
            "inference_devices": config.inference,
            "training_devices": config.training,
            "devices": config.devices,
            **{k: getattr(config.variant, k) for k in VARIANT_FIELDS},
            "price_per_hour": space.price_per_hour(config),
            "makespan_s": chosen.makespan_s,
            "jct_p90_s": chosen.jct_p90_s,
            "meets_every_deadline": chosen.feasible,
        },
        "binding": results.binding(chosen),
        "neighbours": [
            {
                "config": c.label(),
                "fewer": "inference" if c.inference < config.inference else "training",
                "meets_every_deadline": evaluate.outcomes[c].feasible,
                "missed": {r.seed: list(r.missed) for r in evaluate.outcomes[c].runs if r.missed},
            }
            for c in near
        ],
        "configurations": len(outcomes),
        "simulations": evaluate.simulations,
        "monotonicity": results.monotonicity(outcomes),
    }


def write_plan_files(folder: Path, space, evaluate, chosen: Outcome, report: dict,
                     profile) -> None:  # fmt: skip
    """workload.yaml, plan.csv, pareto.csv, plan.json and plan.html into ``folder``, each
    atomically (a temporary file beside it, then renamed: a failed write, a full disk say,
    leaves the file as it was and names it)."""
    from marlaas.plan.page import plan_page

    outcomes = list(evaluate.outcomes.values())
    table = results.plan_rows(space, outcomes, chosen.config)
    with replacing(folder / "plan.csv") as tmp:
        table.to_csv(tmp, index=False)
    front = results.pareto_front(space, outcomes)
    pareto = table[table["config"].isin([o.config.label() for o in front])]
    pareto = pareto.groupby("config", sort=False)[["price_per_hour", "jct_p90_s", "makespan_s"]]
    with replacing(folder / "pareto.csv") as tmp:
        pareto.mean().sort_values("price_per_hour").to_csv(tmp)
    write_durably(folder / "plan.json", json.dumps(report, indent=1, default=json_default) + "\n")
    write_durably(folder / "workload.yaml", _planned_workload(evaluate, chosen, report, profile))
    write_durably(folder / "plan.html", plan_page(space, outcomes, chosen, front, report))


def _planned_workload(evaluate, chosen: Outcome, report: dict, profile) -> str:
    """workload.yaml's text: the chosen configuration's workload, under a header line."""
    data = evaluate.validated(chosen.config).model_dump(mode="json")
    data["arrivals"] = None  # already applied to the jobs' arrival_s
    if profile is not None:
        data["cost"] = profile.cost.model_dump(mode="json")
    header = (f"# Written by marlaas plan from {report['workload']}: {chosen.config.label()}, "
              f"{report['chosen']['price_per_hour']:,.2f} {report['currency']}/h.\n")  # fmt: skip
    return header + yaml.safe_dump(data, sort_keys=False)


def _print(report: dict, out: Path) -> None:
    chosen = report["chosen"]
    currency = report["currency"]
    what = "fastest within the budget" if report["mode"] == "budget" else "cheapest"
    print(f"{report['workload']}: {what}: {chosen['config']} ({chosen['devices']} devices, "
          f"{chosen['price_per_hour']:,.2f} {currency}/h), makespan {chosen['makespan_s']:,.0f} s, "
          f"p90 JCT {chosen['jct_p90_s']:,.0f} s, mean over seeds "
          f"{', '.join(map(str, report['seeds']))}")  # fmt: skip
    if report["binding"]:
        tight = report["binding"][0]
        print(f"binding deadline: {tight['job']} ({tight['deadline_s']:,.0f} s, latest "
              f"{tight['worst_jct_s']:,.0f} s, {tight['slack_s']:,.0f} s to spare)")  # fmt: skip
    for near in report["neighbours"]:
        missed = sorted({j for jobs in near["missed"].values() for j in jobs})
        verdict = (
            "meets every deadline"
            if near["meets_every_deadline"]
            else (f"misses {', '.join(missed[:3])}" + (" ..." if len(missed) > 3 else ""))
        )
        print(f"one {near['fewer']} step fewer ({near['config']}): {verdict}")
    broken = report["monotonicity"]
    deadline = sum(v["kind"] == "deadline" for v in broken)
    print(f"monotonicity: {deadline} deadline and {len(broken) - deadline} makespan "
          "violations among the configurations simulated")  # fmt: skip
    print(f"{report['simulations']} simulations ({report['search_simulations']} searching) of "
          f"{report['configurations']} configurations in {report['wall_s']:.1f} s; the grid has "
          f"{report['space']['grid_configurations']:,} configurations x {len(report['seeds'])} "
          "seeds")  # fmt: skip
    print(f"wrote {out}/workload.yaml, plan.csv, pareto.csv, plan.json, plan.html")
