"""Configurations x seeds, simulated through the sweep's runner, with their deadlines checked.

Every simulation is a :class:`marlaas.sweep.SweepRun` run by ``runner`` (default
:func:`marlaas.sweep.execute`: a process pool of ``workers``), so a plan runs wherever a
sweep does. A configuration meets its deadlines when every job with a deadline finishes
within it on every seed. Seeds are run in two rounds: the first seeds of every
configuration of a batch (as many as keep the workers busy), then the rest for those that
met every deadline so far, so a configuration that misses costs one simulation, not
``--seeds``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from tqdm import tqdm

from marlaas.core.workload import Workload
from marlaas.plan.space import Config, overrides
from marlaas.sweep import SweepRun, execute
from marlaas.workload_file import apply_overrides

Runner = Callable[..., tuple[list[dict], list[dict]]]
"""``execute(runs, workers, progress=False) -> (rows, summaries)``, as marlaas.sweep's."""


@dataclass(frozen=True)
class SeedRun:
    """One simulation of a configuration: its seed and what the plan reads of it."""

    seed: int
    makespan_s: float
    jct_p90_s: float
    missed: tuple[str, ...]
    """Jobs that missed their deadline (finished late, or never)."""
    deadlines_s: dict[str, float]
    """Every job with a deadline: its deadline after its arrival [s]."""
    jct_s: dict[str, float]
    """Completion time after arrival [s] of every job with a deadline (inf: not finished)."""
    wall_s: float
    """Wall time of the simulation [s]."""


@dataclass
class Outcome:
    """A configuration's simulations so far."""

    config: Config
    runs: list[SeedRun] = field(default_factory=list)
    seeds: int = 0
    """Seeds a configuration must meet its deadlines on."""

    @property
    def complete(self) -> bool:
        """Whether every seed was simulated."""
        return len(self.runs) == self.seeds

    @property
    def met(self) -> bool:
        """Whether every seed simulated so far met every deadline."""
        return all(not r.missed for r in self.runs)

    @property
    def feasible(self) -> bool:
        """Every deadline met on every seed."""
        return self.complete and self.met

    @property
    def jct_p90_s(self) -> float:
        """Mean over its seeds of the p90 job completion time [s]."""
        return _mean([r.jct_p90_s for r in self.runs])

    @property
    def makespan_s(self) -> float:
        """Mean over its seeds of the makespan [s]."""
        return _mean([r.makespan_s for r in self.runs])


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


class Evaluator:
    """Simulates configurations of ``workload`` on ``seeds`` and keeps every outcome (a
    configuration is simulated once per seed, however often it is asked for)."""

    def __init__(
        self,
        workload: Workload,
        seeds: list[int],
        profile=None,
        workers: int | None = None,
        runner: Runner = execute,
        progress: bool = True,
    ) -> None:
        self.workload, self.seeds, self.profile = workload, seeds, profile
        self.workers = workers or os.cpu_count() or 1
        self.runner = runner
        self.outcomes: dict[Config, Outcome] = {}
        self._variants: dict = {}
        self.simulations = 0
        self.progress = progress
        self._bar: tqdm | None = None  # made by the first simulations (none before)

    def show(self, text: str) -> None:
        """Text beside the progress bar (the best configuration so far)."""
        if self._bar is not None:
            self._bar.set_postfix_str(text)

    def close(self) -> None:
        """End the progress bar."""
        if self._bar is not None:
            self._bar.close()

    def feasible(self, configs: list[Config], all_seeds: bool = False) -> list[bool]:
        """Whether each configuration meets every deadline on every seed, simulating what
        is not known yet (``all_seeds``: every seed even of one that missed, for its
        metrics)."""
        todo = list(dict.fromkeys(configs))
        for config in todo:
            self.outcomes.setdefault(config, Outcome(config, seeds=len(self.seeds)))
        first = max(1, min(len(self.seeds), self.workers // max(1, len(todo))))
        self._run([(c, s) for c in todo for s in self._missing(c)[:first]])
        rest = [c for c in todo if all_seeds or self.outcomes[c].met]
        self._run([(c, s) for c in rest for s in self._missing(c)])
        return [self.outcomes[c].feasible for c in configs]

    def _missing(self, config: Config) -> list[int]:
        done = {r.seed for r in self.outcomes[config].runs}
        return [s for s in self.seeds if s not in done]

    def _run(self, pairs: list[tuple[Config, int]]) -> None:
        if not pairs:
            return
        if self._bar is None:
            self._bar = tqdm(unit="sim", desc="plan", disable=not self.progress)
        workloads = {c: self.workload_of(c) for c in dict.fromkeys(c for c, _ in pairs)}
        runs = [
            SweepRun(
                len(self.workload.jobs),
                c.label(),
                c.variant.preset,
                c.variant.policy,
                seed,
                workloads[c],
                self.profile,
            )
            for c, seed in pairs
        ]
        _, summaries = self.runner(runs, self.workers, progress=False)
        for (config, seed), summary in zip(pairs, summaries, strict=True):
            done = self.outcomes[config].runs
            done.append(seed_run(seed, summary))
            done.sort(key=lambda r: r.seed)
        self.simulations += len(pairs)
        self._bar.update(len(pairs))

    def workload_of(self, config: Config) -> Workload:
        """The workload with ``config``'s cluster and schedule: its variant's validated once
        (the preset against the workload's settings), its pools' sizes set on a copy."""
        variant = self._variants.get(config.variant)
        if variant is None:
            variant = self.validated(Config(config.variant, 1, config.variant.trainer_width))
            self._variants[config.variant] = variant
        sizes = [config.inference if p.role == "inference" else config.training
                 for p in variant.cluster.pools]  # fmt: skip
        pools = [p.model_copy(update={"devices": n}) for p, n in zip(variant.cluster.pools, sizes,
                                                                     strict=True)]  # fmt: skip
        return variant.model_copy(
            update={"cluster": variant.cluster.model_copy(update={"pools": pools})}
        )

    def validated(self, config: Config) -> Workload:
        """The workload with ``config``'s cluster and schedule, validated whole."""
        return apply_overrides(self.workload, overrides(self.workload, config))


def seed_run(seed: int, summary: dict) -> SeedRun:
    """What the plan reads of one simulation's summary (see marlaas.runs.run_summary)."""
    deadlines = summary["deadlines_s"]
    finish, arrivals = summary["job_finish_s"], summary["arrivals"]
    jct = {  # a job that never finished (cancelled, refused, cut off) misses its deadline
        name: math.inf if finish.get(name) is None else finish[name] - arrivals[name]
        for name in deadlines
    }
    missed = tuple(summary["missed_deadlines"])
    metrics = summary["metrics"]
    p90 = metrics["jct_p90_s"]
    return SeedRun(
        seed=seed,
        makespan_s=float(metrics["makespan_s"]),
        jct_p90_s=math.inf if p90 is None else float(p90),
        missed=missed,
        deadlines_s=dict(deadlines),
        jct_s=jct,
        wall_s=float(summary["wall_s"]),
    )
