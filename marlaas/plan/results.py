"""What a plan reports: every simulation (plan.csv), the Pareto front of price against p90
job completion time, where the model is not monotone, which deadline binds, and why no
configuration met the deadlines when none did."""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from marlaas.plan.evaluate import Outcome
from marlaas.plan.space import Config, PlanError, Space

MONOTONE_TOLERANCE = 0.01
"""A larger configuration's makespan may exceed a smaller one's by this share before it
counts as not monotone (the two place work differently)."""


def plan_rows(space: Space, outcomes: Iterable[Outcome], chosen: Config | None) -> pd.DataFrame:
    """plan.csv: one row per configuration and seed simulated."""
    rows = []
    for outcome in sorted(outcomes, key=lambda o: o.config):
        config, variant = outcome.config, outcome.config.variant
        price = space.price_per_hour(config)
        for run in outcome.runs:
            slack = {job: deadline_slack(run.jct_s[job], d) for job, d in run.deadlines_s.items()}
            binding = min(slack, key=slack.get, default="")
            rows.append({
                "config": config.label(),
                "inference_devices": config.inference,
                "training_devices": config.training,
                "devices": config.devices,
                "trainer_width": variant.trainer_width,
                "adapter_slots": variant.adapter_slots,
                "policy": variant.policy,
                "preset": variant.preset,
                "seed": run.seed,
                "price_per_hour": price,
                "run_cost": price * run.makespan_s / 3600,
                "makespan_s": run.makespan_s,
                "jct_p90_s": run.jct_p90_s,
                "deadlines_missed": len(run.missed),
                "missed_jobs": " ".join(run.missed),
                "binding_job": binding,
                "slack_s": slack.get(binding, math.nan),
                "meets_all_seeds": outcome.feasible,
                "chosen": config == chosen,
                "wall_s": run.wall_s,
            })  # fmt: skip
    return pd.DataFrame(rows)


def deadline_slack(jct_s: float, deadline_s: float) -> float:
    """How long before its deadline a job finished [s] (negative: late; -inf: never)."""
    return deadline_s - jct_s


def pareto_front(space: Space, outcomes: Iterable[Outcome]) -> list[Outcome]:
    """The configurations that met every deadline on every seed and that no other such one
    beats on both price per hour and mean p90 job completion time (by price)."""
    feasible = sorted(
        (o for o in outcomes if o.feasible),
        key=lambda o: (space.price_per_hour(o.config), o.jct_p90_s, o.config),
    )
    front: list[Outcome] = []
    for outcome in feasible:
        if not front or outcome.jct_p90_s < front[-1].jct_p90_s:
            front.append(outcome)
    return front


def monotonicity(outcomes: Iterable[Outcome]) -> list[dict]:
    """Where more devices did hurt: pairs of configurations of one variant, the second with
    at least as many devices in each pool, whose second missed a deadline on a seed the
    first met (``deadline``), or took more than MONOTONE_TOLERANCE longer (``makespan``)."""
    by_variant: dict = {}
    for outcome in outcomes:
        by_variant.setdefault(outcome.config.variant, []).append(outcome)
    found = []
    for group in by_variant.values():
        for small in group:
            for large in group:
                c, d = small.config, large.config
                if c == d or d.inference < c.inference or d.training < c.training:
                    continue
                found.extend(_violations(small, large))
    return sorted(found, key=lambda v: (v["kind"] != "deadline", -v["worse_by"]))


def _violations(small: Outcome, large: Outcome) -> list[dict]:
    runs = {r.seed: r for r in large.runs}
    out = []
    for a in small.runs:
        b = runs.get(a.seed)
        if b is None:
            continue
        base = {"smaller": small.config.label(), "larger": large.config.label(), "seed": a.seed}
        if not a.missed and b.missed:
            late = max(b.missed, key=lambda j: b.jct_s[j] - a.jct_s[j])
            out.append({**base, "kind": "deadline", "what": f"{late} missed its deadline",
                        "worse_by": b.jct_s[late] - a.jct_s[late]})  # fmt: skip
        if b.makespan_s > a.makespan_s * (1 + MONOTONE_TOLERANCE):
            what = f"makespan {a.makespan_s:,.0f} s -> {b.makespan_s:,.0f} s"
            out.append({**base, "kind": "makespan", "what": what,
                        "worse_by": b.makespan_s - a.makespan_s})  # fmt: skip
    return out


def binding(outcome: Outcome) -> list[dict]:
    """Every job with a deadline in ``outcome``, tightest first: its deadline, its latest
    completion over the seeds and the slack left [s]."""
    rows = []
    for job, deadline in outcome.runs[0].deadlines_s.items():
        worst = max(r.jct_s[job] for r in outcome.runs)
        rows.append({"job": job, "deadline_s": deadline, "worst_jct_s": worst,
                     "slack_s": deadline_slack(worst, deadline)})  # fmt: skip
    return sorted(rows, key=lambda r: (r["slack_s"] / r["deadline_s"], r["job"]))


def neighbours(space: Space, config: Config) -> list[Config]:
    """The configurations one step smaller in each pool (one inference device, one
    trainer), where the space has them."""
    width = config.variant.trainer_width
    out = []
    low, _ = space.inference_range(config.training)
    if config.inference - 1 >= low and space.fixed is None:
        out.append(Config(config.variant, config.inference - 1, config.training))
    if config.training - width >= width and space.fixed is None:
        out.append(Config(config.variant, config.inference, config.training - width))
    return out


def infeasible(space: Space, outcomes: list[Outcome]) -> PlanError:
    """The one-line error when no configuration met every deadline: the job furthest from
    its deadline at its best, and that best."""
    best: dict[str, tuple[float, Outcome, int]] = {}
    for outcome in outcomes:
        for run in outcome.runs:
            for job, jct in run.jct_s.items():
                if job not in best or jct < best[job][0]:
                    best[job] = (jct, outcome, run.seed)
    if not best:
        return PlanError(
            f"no configuration to try within {space.max_devices:,} devices (a trainer width "
            "that does not divide the training pool's devices, when the pools are not searched?)"
        )
    deadlines = outcomes[0].runs[0].deadlines_s

    def shortfall(job: str) -> float:
        return best[job][0] / deadlines[job]

    job = max(best, key=shortfall)
    jct, outcome, seed = best[job]
    done = "never finished" if math.isinf(jct) else f"finished {jct:,.0f} s after its arrival"
    return PlanError(
        f"no configuration of at most {space.max_devices:,} devices meets every deadline: "
        f"job {job!r} (deadline {deadlines[job]:,.0f} s) at best {done} "
        f"(on {outcome.config.label()}, seed {seed}; {len(outcomes)} configurations tried)"
    )
