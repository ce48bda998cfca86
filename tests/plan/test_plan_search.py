"""The plan's search against the brute-force grid, on a formula instead of the simulator."""

from __future__ import annotations

import itertools

import pytest

from marlaas.plan import results
from marlaas.plan.evaluate import Evaluator
from marlaas.plan.search import cheapest, exhaustive, fastest_within
from marlaas.plan.space import Config, Space, Variant
from tests.plan.oracle import Oracle, workload

WORK = workload({"a": 100.0, "b": 60.0, "c": 200.0})


def space(variants, max_devices=24, inference_price=1.0, training_price=1.0) -> Space:
    return Space(tuple(variants), max_devices, inference_price, training_price)


def evaluator(oracle: Oracle, seeds=(0, 1, 2), workers=2) -> Evaluator:
    return Evaluator(WORK, list(seeds), workers=workers, runner=oracle, progress=False)


VARIANTS = [Variant(w, 8, p, "none") for w, p in itertools.product((1, 2), ("fifo", "fair"))]


@pytest.mark.parametrize(
    ("prices", "gen", "fit"),
    [
        ((1.0, 1.0), [400, 300, 900], [100, 50, 200]),
        ((1.0, 3.0), [400, 300, 900], [100, 50, 200]),
        ((2.5, 1.0), [100, 300, 200], [300, 50, 600]),
        ((1.0, 1.0), [1000, 10, 10], [10, 10, 10]),
    ],
)
def test_search_finds_the_grids_answer_with_fewer_simulations(prices, gen, fit):
    speeds = {"fifo": 1.0, "fair": 0.9}
    s = space(VARIANTS, 16, *prices)
    fast, grid = Oracle(gen, fit, policy_speed=speeds), Oracle(gen, fit, policy_speed=speeds)
    found = cheapest(s, evaluator(fast))
    truth = exhaustive(s, evaluator(grid))
    assert truth is not None and found is not None
    assert found.config == truth.config
    assert fast.runs < grid.runs / 4
    assert found.feasible and len(found.runs) == 3


def test_the_plan_is_minimal_one_step_smaller_misses():
    oracle = Oracle([400, 300, 900], [100, 50, 200])
    s = space([Variant(2, 8, "fair", "none")], 30)
    evaluate = evaluator(oracle)
    chosen = cheapest(s, evaluate)
    near = results.neighbours(s, chosen.config)
    assert {c.devices for c in near} == {chosen.config.devices - 1, chosen.config.devices - 2}
    assert not any(evaluate.feasible(near))


def test_infeasible_names_the_job_and_its_best():
    oracle = Oracle([400, 300, 9000], [100, 50, 200])
    s = space([Variant(1, 8, "fair", "none")], 12)
    evaluate = evaluator(oracle)
    assert cheapest(s, evaluate) is None
    message = str(results.infeasible(s, list(evaluate.outcomes.values())))
    # job c needs 9000/I + 200/T within 200 s: at best I=10, T=2 (seed 0): 1000 s
    assert "job 'c' (deadline 200 s) at best finished 1,000 s after its arrival" in message
    assert "at most 12 devices" in message and "10+2" in message


def test_a_miss_on_a_later_seed_is_a_miss():
    # 200 s times 1.00, 1.01, 1.02 on seeds 0, 1, 2: a deadline that seed 2 alone misses
    oracle = Oracle([100], [100])
    work = workload({"a": 203.0})
    s = space([Variant(1, 8, "fair", "none")], 3)
    evaluate = Evaluator(work, [0, 1, 2], workers=1, runner=oracle, progress=False)
    assert evaluate.feasible([Config(Variant(1, 8, "fair", "none"), 1, 1)]) == [False]
    # seeds 0 and 1 alone: met
    evaluate = Evaluator(work, [0, 1], workers=1, runner=oracle, progress=False)
    assert evaluate.feasible([Config(Variant(1, 8, "fair", "none"), 1, 1)]) == [True]
    assert s.configs()


def test_a_configuration_that_misses_costs_one_simulation():
    oracle = Oracle([1000], [1000])
    work = workload({"a": 10.0})
    evaluate = Evaluator(work, [0, 1, 2], workers=1, runner=oracle, progress=False)
    assert evaluate.feasible([Config(Variant(1, 8, "fair", "none"), 1, 1)]) == [False]
    assert oracle.runs == 1


def test_monotonicity_violations_are_found():
    # one more training device beyond 3 slows everything by 50 s: not monotone
    oracle = Oracle([100, 100, 100], [100, 100, 100], bump=lambda i, t: 50.0 * (t > 3))
    s = space([Variant(1, 8, "fair", "none")], 8)
    evaluate = evaluator(oracle)
    exhaustive(s, evaluate)
    broken = results.monotonicity(evaluate.outcomes.values())
    kinds = {v["kind"] for v in broken}
    assert kinds == {"makespan"} or kinds == {"deadline", "makespan"}
    assert all(int(v["larger"].split("+")[1].split()[0]) > 3 for v in broken)
    monotone = Oracle([100, 100, 100], [100, 100, 100])
    evaluate = evaluator(monotone)
    exhaustive(s, evaluate)
    assert results.monotonicity(evaluate.outcomes.values()) == []


def test_budget_takes_the_fastest_within_it():
    oracle = Oracle([400, 300, 900], [100, 50, 200])
    s = space([Variant(1, 8, "fair", "none")], 40, 2.0, 1.0)
    chosen = fastest_within(s, 20.0, evaluator(oracle))
    assert s.price_per_hour(chosen.config) <= 20.0
    # the makespan is 900/I + 200/T with 2I + T <= 20: best among the largest per T
    best = min(
        ((i, t) for t in range(1, 20) for i in range(1, 20) if 2 * i + t <= 20),
        key=lambda c: 900 / c[0] + 200 / c[1],
    )
    assert (chosen.config.inference, chosen.config.training) == best


def test_pareto_front_is_cheaper_or_sooner():
    oracle = Oracle([400, 300, 900], [100, 50, 200])
    s = space([Variant(1, 8, "fair", "none")], 14)
    evaluate = evaluator(oracle)
    exhaustive(s, evaluate)
    front = results.pareto_front(s, evaluate.outcomes.values())
    prices = [s.price_per_hour(o.config) for o in front]
    p90 = [o.jct_p90_s for o in front]
    assert prices == sorted(prices) and p90 == sorted(p90, reverse=True)
    for outcome in evaluate.outcomes.values():
        if outcome.feasible:  # nothing feasible beats a point of the front on both
            assert not any(
                s.price_per_hour(outcome.config) < s.price_per_hour(f.config)
                and outcome.jct_p90_s < f.jct_p90_s
                for f in front
            )


def test_nothing_to_try_is_one_line():
    s = Space((Variant(3, 8, "fair", "none"),), 8, 1.0, 1.0, fixed=(4, 2))
    evaluate = evaluator(Oracle([1], [1]))
    assert cheapest(s, evaluate) is None
    assert "no configuration to try" in str(results.infeasible(s, []))
