"""plan.html: a plan for people, in the report's style (marlaas.report.html: the Jinja2
template, Plotly inlined, nothing fetched): the choice and its binding deadline, price
against p90 job completion time of every configuration simulated with the Pareto front, the
one-step-smaller neighbours, and how the search went."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from marlaas.plan.evaluate import Outcome
from marlaas.plan.space import Space
from marlaas.report import fmt
from marlaas.report.html import Section, render_report

MAX_ROWS = 20
"""Rows shown of the longer tables (plan.csv and plan.json have them all)."""


def plan_page(
    space: Space, outcomes: list[Outcome], chosen: Outcome, front: list[Outcome], report: dict
) -> str:
    """The whole page."""
    currency = report["currency"]
    c = report["chosen"]
    what = ("the fastest configuration within " + fmt.number(report["budget_per_hour"]) +
            f" {currency}/h" if report["mode"] == "budget" else
            "the cheapest configuration that meets every deadline on every seed")  # fmt: skip
    sections = [
        Section(
            "plan",
            f"The plan: {c['config']}",
            notes=[
                f"{report['workload']}, {what}: {c['inference_devices']} inference and "
                f"{c['training_devices']} training devices ({c['trainer_width']} per trainer), "
                f"{c['adapter_slots']} adapter slots per engine, policy {c['policy']}, preset "
                f"{c['preset']}; {fmt.number(c['price_per_hour'])} {currency}/h (prices: "
                f"{report['price_source']}). Mean over seeds {_seeds(report)}: makespan "
                f"{fmt.number(c['makespan_s'])} s, p90 job completion time "
                f"{fmt.number(c['jct_p90_s'])} s. OUT/workload.yaml holds it.",
                "The binding deadline is the job with the least slack (deadline minus its "
                "latest completion over the seeds, relative to the deadline).",
            ],
            tables=[
                ("Per seed", _per_seed(chosen)),
                ("Deadlines, tightest first", _binding(report["binding"])),
            ],
        ),
        Section(
            "front",
            "Price per hour against p90 job completion time",
            figure=plot_front(space, outcomes, chosen, front, currency),
            notes=[
                "Every configuration simulated (mean over the seeds it ran). Filled: met every "
                "deadline on every seed; hollow: missed one (once a seed missed, the later "
                "seeds were not run). The line is the Pareto front of those that met "
                "them: none is both cheaper and sooner."
            ],
            tables=[("Pareto front", _front_table(space, front, currency))],
        ),
        Section(
            "search",
            "How the search went",
            notes=_search_notes(report),
            tables=_search_tables(report),
        ),
    ]
    return render_report(f"MARLaaS plan: {report['workload']}", sections)


def _seeds(report: dict) -> str:
    return ", ".join(map(str, report["seeds"]))


def _per_seed(outcome: Outcome) -> pd.DataFrame:
    return pd.DataFrame({
        "seed": [r.seed for r in outcome.runs],
        "makespan [s]": [fmt.number(r.makespan_s) for r in outcome.runs],
        "p90 job completion time [s]": [fmt.number(r.jct_p90_s) for r in outcome.runs],
        "deadlines missed": [len(r.missed) for r in outcome.runs],
        "simulated in [s]": [fmt.number(r.wall_s) for r in outcome.runs],
    })  # fmt: skip


def _binding(rows: list[dict]) -> pd.DataFrame:
    shown = rows[:MAX_ROWS]
    return pd.DataFrame({
        "job": [r["job"] for r in shown],
        "deadline [s]": [fmt.number(r["deadline_s"]) for r in shown],
        "latest completion [s]": [fmt.number(r["worst_jct_s"]) for r in shown],
        "slack [s]": [fmt.number(r["slack_s"]) for r in shown],
    })  # fmt: skip


def plot_front(space: Space, outcomes: list[Outcome], chosen: Outcome, front: list[Outcome],
               currency: str) -> go.Figure:  # fmt: skip
    """Price per hour (x) against mean p90 job completion time (y) of every configuration;
    the front as a line, the chosen one as a star."""
    fig = go.Figure()
    for met, name, symbol in ((True, "met every deadline", "circle"),
                              (False, "missed a deadline", "circle-open")):  # fmt: skip
        group = [o for o in outcomes if o.feasible == met and math.isfinite(o.jct_p90_s)]
        fig.add_trace(go.Scatter(
            x=[space.price_per_hour(o.config) for o in group],
            y=[o.jct_p90_s for o in group],
            mode="markers", name=name, marker={"symbol": symbol, "size": 8},
            text=[_hover(o) for o in group], hoverinfo="text",
        ))  # fmt: skip
    fig.add_trace(go.Scatter(
        x=[space.price_per_hour(o.config) for o in front], y=[o.jct_p90_s for o in front],
        mode="lines", name="Pareto front", line={"shape": "hv"}, hoverinfo="skip",
    ))  # fmt: skip
    fig.add_trace(go.Scatter(
        x=[space.price_per_hour(chosen.config)], y=[chosen.jct_p90_s], mode="markers",
        name="the plan", marker={"symbol": "star", "size": 16, "color": "#c23b3b"},
        text=[_hover(chosen)], hoverinfo="text",
    ))  # fmt: skip
    fig.update_layout(
        template="plotly_white", height=520,
        xaxis_title=f"price [{currency} per hour]",
        yaxis_title="p90 job completion time [s], mean over seeds (log)",
        yaxis_type="log",
        margin={"l": 70, "r": 20, "t": 30, "b": 60},
    )  # fmt: skip
    return fig


def _hover(outcome: Outcome) -> str:
    missed = sorted({j for r in outcome.runs for j in r.missed})
    more = f"<br>missed: {', '.join(missed[:5])}" + (" ..." if len(missed) > 5 else "")
    return (f"{outcome.config.label()}<br>makespan {outcome.makespan_s:,.0f} s, p90 JCT "
            f"{outcome.jct_p90_s:,.0f} s, {len(outcome.runs)} seed(s)"
            + (more if missed else ""))  # fmt: skip


def _front_table(space: Space, front: list[Outcome], currency: str) -> pd.DataFrame:
    return pd.DataFrame({
        "configuration": [o.config.label() for o in front],
        "devices": [o.config.devices for o in front],
        f"price [{currency}/h]": [fmt.number(space.price_per_hour(o.config)) for o in front],
        "p90 job completion time [s]": [fmt.number(o.jct_p90_s) for o in front],
        "makespan [s]": [fmt.number(o.makespan_s) for o in front],
    })  # fmt: skip


def _search_notes(report: dict) -> list[str]:
    space = report["space"]
    notes = [
        f"{report['simulations']:,} simulations ({report['search_simulations']:,} searching, "
        f"the rest checking the neighbours) of {report['configurations']:,} configurations in "
        f"{report['wall_s']:,.1f} s; the whole grid has {space['grid_configurations']:,} "
        f"configurations x {len(report['seeds'])} seeds. Mode: {report['mode']}. At most "
        f"{space['max_devices']:,} devices; variants: {', '.join(space['variants'][:10])}"
        + (" ..." if len(space["variants"]) > 10 else "")
        + ".",
    ]
    broken = report["monotonicity"]
    deadline = sum(v["kind"] == "deadline" for v in broken)
    notes.append(
        "Monotonicity (more devices never hurt, which the bisection assumes): "
        + (f"{deadline} pairs where the larger configuration missed a deadline the smaller "
           f"met, {len(broken) - deadline} where it took more than 1% longer."
           if broken else "no violation among the configurations simulated.")
    )  # fmt: skip
    return notes


def _misses(missed: dict) -> str:
    return "; ".join(f"seed {s}: {_first(jobs)}" for s, jobs in missed.items()) or "-"


def _first(jobs: list[str], shown: int = 4) -> str:
    more = f" and {len(jobs) - shown} more" if len(jobs) > shown else ""
    return ", ".join(jobs[:shown]) + more


def _search_tables(report: dict) -> list[tuple[str, pd.DataFrame]]:
    tables = []
    if report["neighbours"]:
        tables.append(("One step smaller in each pool", pd.DataFrame({
            "configuration": [n["config"] for n in report["neighbours"]],
            "one fewer": [n["fewer"] for n in report["neighbours"]],
            "meets every deadline": ["yes" if n["meets_every_deadline"] else "no"
                                     for n in report["neighbours"]],
            "missed (seed: jobs)": [_misses(n["missed"]) for n in report["neighbours"]],
        })))  # fmt: skip
    if report["monotonicity"]:
        shown = report["monotonicity"][:MAX_ROWS]
        tables.append(("Where more devices hurt (worst first)", pd.DataFrame({
            "smaller": [v["smaller"] for v in shown],
            "larger": [v["larger"] for v in shown],
            "seed": [v["seed"] for v in shown],
            "what": [v["what"] for v in shown],
        })))  # fmt: skip
    return tables
