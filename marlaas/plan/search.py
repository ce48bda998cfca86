"""The search: the cheapest configuration that meets every deadline, without the whole grid.

For each variant, training sizes are tried from the smallest up. At each one, the fewest
inference devices that meet every deadline are found by bisection: in the model more
devices never hurt (checked afterwards, see :mod:`marlaas.plan.results`), so "meets" is
monotone in the inference devices, and, since more training devices never hurt either, the
fewest found at one training size bound the next one's from above (a "staircase"). Pruning:
no configuration dearer per hour than the cheapest found so far is simulated, and the
search of a variant stops at the first training size whose cheapest configuration is
already dearer. The variants advance in lock step, so each round simulates one probe of
every variant at once (in parallel). :func:`exhaustive` simulates the whole grid: the same
answer where the model is monotone, at many times the simulations.

Configurations are ranked by (price per hour, mean p90 job completion time over the seeds,
devices, the configuration itself), by the search and the grid alike.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import dataclass

from marlaas.plan.evaluate import Evaluator, Outcome
from marlaas.plan.space import Config, Space, Variant

Probe = Generator[Config, bool, None]
"""A variant's search: yields the next configuration to simulate, is sent whether it met
every deadline on every seed."""


@dataclass
class Best:
    """The best configuration found so far (None: none yet) and its price per hour."""

    space: Space
    outcome: Outcome | None = None

    @property
    def price(self) -> float:
        """Its price per hour (inf when there is none)."""
        return self.space.price_per_hour(self.outcome.config) if self.outcome else float("inf")

    def offer(self, outcomes: Iterable[Outcome]) -> None:
        """Keep the best of the feasible ``outcomes`` and the current one."""
        for outcome in outcomes:
            if outcome.feasible and (
                self.outcome is None or rank(self.space, outcome) < rank(self.space, self.outcome)
            ):
                self.outcome = outcome


def rank(space: Space, outcome: Outcome) -> tuple:
    """Sort key of feasible configurations: cheaper, then sooner (p90 JCT), then smaller."""
    config = outcome.config
    return (space.price_per_hour(config), outcome.jct_p90_s, config.devices, config)


def cheapest(space: Space, evaluate: Evaluator) -> Outcome | None:
    """The best-ranked configuration that meets every deadline on every seed (None: none in
    the space does), by the staircase search."""
    best = Best(space)
    searches = [_staircase(space, variant, best) for variant in space.variants]
    probes = {id(s): next(s, None) for s in searches}
    while any(p is not None for p in probes.values()):
        active = [s for s in searches if probes[id(s)] is not None]
        configs = [probes[id(s)] for s in active]
        met = evaluate.feasible(configs)
        best.offer(evaluate.outcomes[c] for c in configs)
        _show(evaluate, best)
        for search, ok in zip(active, met, strict=True):
            probes[id(search)] = _send(search, ok)
    return best.outcome


def _send(search: Probe, ok: bool) -> Config | None:
    try:
        return search.send(ok)
    except StopIteration:
        return None


def _staircase(space: Space, variant: Variant, best: Best) -> Probe:
    """One variant's search (see the module's docstring)."""
    known = None  # fewest inference devices that met every deadline at the last size
    for training in space.training_sizes(variant):
        low, high = space.inference_range(training)
        cap = space.most_inference_within(training, best.price)
        if cap < low:
            return  # every larger training size is dearer still
        if known is not None:
            high = min(high, known)
        high = min(high, cap)
        if high != known and not (yield Config(variant, high, training)):
            continue  # nothing within bounds (or price) at this size
        fail, ok = low - 1, high  # bisection: `ok` meets every deadline, `fail` does not
        while ok - fail > 1:
            middle = (fail + ok) // 2
            if (yield Config(variant, middle, training)):
                ok = middle
            else:
                fail = middle
        if ok == known and not (yield Config(variant, ok, training)):
            continue  # more training devices made it miss: not monotone (results say so)
        known = ok


def exhaustive(space: Space, evaluate: Evaluator) -> Outcome | None:
    """The best-ranked feasible configuration of the whole grid (every configuration and
    seed simulated), to check the search against."""
    configs = space.configs()
    evaluate.feasible(configs, all_seeds=True)
    best = Best(space)
    best.offer(evaluate.outcomes[c] for c in configs)
    _show(evaluate, best)
    return best.outcome


def fastest_within(space: Space, budget: float, evaluate: Evaluator) -> Outcome | None:
    """The configuration with the shortest mean makespan among the largest within
    ``budget`` per hour at each training size (more devices never hurt), every seed
    simulated; deadlines are reported, not required. None: nothing fits the budget."""
    configs = []
    for variant in space.variants:
        for training in space.training_sizes(variant):
            low, high = space.inference_range(training)
            inference = min(high, space.most_inference_within(training, budget))
            if inference >= low:
                configs.append(Config(variant, inference, training))
    evaluate.feasible(configs, all_seeds=True)
    outcomes = [evaluate.outcomes[c] for c in configs]
    return min(outcomes, key=lambda o: (o.makespan_s, *rank(space, o)), default=None)


def _show(evaluate: Evaluator, best: Best) -> None:
    if best.outcome is not None:
        config = best.outcome.config
        evaluate.show(f"best {config.label()} at {best.price:,.2f}/h")
