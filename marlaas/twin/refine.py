"""Refine the regression's engine terms by simulating the calibration runs again.

The regression (marlaas.twin.decode_fit) reads batch sizes and adapters as means over each
group's span; the engine model (marlaas.sim.engine_model) follows them iteration by iteration,
with sequences leaving the batch as they finish and decode pausing for every prefill (and,
on a shared processor, every adapter load). Starting from the regression, Nelder-Mead adjusts
the engine terms so that replays of the calibration runs (their recorded lengths and
environment times, marlaas.sim.recording) match them: it minimises, over the runs, the root
mean squared log ratio of replayed to real generate durations (matched by (job, group, turn))
plus the absolute log ratios of the total generate time and of the makespan, so that noisy
rows do not outweigh what the runs add up to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from marlaas.sim.cost_model import MIN_DECODE_BASE_MS, CostModel
from marlaas.sim.recording import Recording
from marlaas.sim.run import simulate
from marlaas.twin.operations import operations

ENGINE_TERMS = ("decode_base_ms", "decode_per_seq_ms", "decode_per_kv_token_ms",
                "decode_per_adapter_ms", "prefill_tokens_per_s", "prefill_base_ms")  # fmt: skip
KEY = ["job", "group", "turn"]
FLOOR_S = 1e-3
"""Durations below this [s] count as this in the log ratios."""


@dataclass(frozen=True)
class Refinement:
    """The refined cost model and the generate-duration error before and after."""

    cost: CostModel
    error_before: float
    """The objective (see the module docstring) with the regression's terms."""
    error_after: float
    evaluations: int


def refine(runs, starts: list[CostModel], max_evaluations: int = 150) -> Refinement:
    """Adjust the engine terms to the real runs (marlaas.twin.calibrate.RealRun), from the
    best of ``starts`` (e.g. regressions with different penalties)."""
    targets = [_real_durations(run.events) for run in runs]
    recordings = [Recording.from_events(run.events) for run in runs]
    scored = [(_objective(runs, targets, recordings, c), i) for i, c in enumerate(starts)]
    cost = starts[min(scored)[1]]
    start = _vector(cost)
    scale = np.where(start > 0, start, _floor(cost))

    def error(y: np.ndarray) -> float:
        candidate = _cost(cost, np.maximum(scale * (1 + y), 0.0))
        return _objective(runs, targets, recordings, candidate)

    y0 = np.where(start > 0, 0.0, -1.0)  # a zero term starts at zero
    before = error(y0)
    result = minimize(
        error, y0, method="Nelder-Mead",
        options={"maxfev": max_evaluations, "xatol": 1e-3, "fatol": 1e-4,
                 "initial_simplex": _simplex(y0)},
    )  # fmt: skip
    best = result.x if result.fun < before else y0
    refined = _cost(cost, np.maximum(scale * (1 + best), 0.0))
    return Refinement(refined, before, min(float(result.fun), before), int(result.nfev))


def _objective(runs, targets, recordings, cost: CostModel) -> float:
    """RMS log ratio of replayed to real generate durations, plus the mean absolute log
    ratios of their sums and of the makespans."""
    squared, totals = [], 0.0
    for run, target, recording in zip(runs, targets, recordings, strict=True):
        replayed, makespan = _replay(run, cost, recording)
        joined = target.join(replayed.rename(columns={"duration_s": "replayed_s"}), how="inner")
        joined = joined.clip(lower=FLOOR_S)  # turns with nothing left to generate take ~0 s
        squared.append(np.log(joined["replayed_s"] / joined["duration_s"]) ** 2)
        totals += abs(np.log(joined["replayed_s"].sum() / joined["duration_s"].sum()))
        totals += abs(np.log(makespan / run.summary["metrics"]["makespan_s"]))
    return float(np.sqrt(np.mean(np.concatenate(squared))) + totals / len(runs))


def _real_durations(events: pd.DataFrame) -> pd.DataFrame:
    gen = operations(events, "generate")
    return gen.set_index(KEY)[["duration_s"]]


def _replay(run, cost: CostModel, recording: Recording) -> tuple[pd.DataFrame, float]:
    """(generate durations by (job, group, turn), makespan [s]) of a replay of ``run``."""
    result = simulate(run.workload, run.summary["policy"], run.summary["seed"], cost=cost,
                      recording=recording, check=False)  # fmt: skip
    rows = [(r.job, r.group, r.turn, r.end_s - r.start_s) for r in result.records
            if r.kind == "generate" and r.outcome == "ok"]  # fmt: skip
    return pd.DataFrame(rows, columns=[*KEY, "duration_s"]).set_index(KEY), result.makespan_s


def _vector(cost: CostModel) -> np.ndarray:
    values = [getattr(cost, t) for t in ENGINE_TERMS]
    values[4] = 1.0 / values[4]  # prefill as seconds per token: 0 = no cost
    return np.array(values, dtype=float)


def _cost(base: CostModel, v: np.ndarray) -> CostModel:
    values = dict(zip(ENGINE_TERMS, v.tolist(), strict=True))
    values["prefill_tokens_per_s"] = 1.0 / max(values["prefill_tokens_per_s"], 1e-12)
    values["decode_base_ms"] = max(values["decode_base_ms"], MIN_DECODE_BASE_MS)
    return base.model_copy(update=values)


def _floor(cost: CostModel) -> np.ndarray:
    """Scales for terms the regression left at zero, relative to the per-iteration base."""
    base = cost.decode_base_ms
    return np.array([base, base * 0.1, base * 1e-4, base * 0.1, 1e-4, base])


def _simplex(y0: np.ndarray) -> np.ndarray:
    steps = np.where(y0 == 0.0, 0.4, 0.6)
    return np.vstack([y0, *(y0 + np.eye(len(y0))[i] * steps[i] for i in range(len(y0)))])
