"""The SimPy driver: the scheduler core over a model of engines, environments and trainers.

One ``simpy.Environment``, no globals. Work is started as SimPy timeouts whose callbacks
report completions to the scheduler; engines are :class:`EngineModel` instances that
schedule a wake-up for their next finishing sequence (a newer wake-up makes older ones
stale). All randomness comes from one numpy Generator seeded by the run's seed, drawn in
the scheduler's deterministic decision order, so a workload and seed give one event log.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import simpy
from tqdm import tqdm

from marlaas.core.policies import Policy
from marlaas.core.records import WorkRecord
from marlaas.core.scheduler import Scheduler
from marlaas.core.work import (
    Decision,
    EnvStep,
    Generate,
    LoadAdapter,
    SwapIn,
    Sync,
    Train,
    WorkDone,
)
from marlaas.core.workload import Workload
from marlaas.sim.engine_model import EngineModel
from marlaas.sim.invariants import check_invariants


class SimulationError(RuntimeError):
    """The simulation could not finish (e.g. it deadlocked)."""


@dataclass
class SimResult:
    """What a simulation produced."""

    records: list[WorkRecord]
    makespan_s: float
    """Simulated time until the last job published its last adapter version [s]."""
    job_finish_s: dict[str, float]
    policy: str
    seed: int
    wall_s: float
    """Wall-clock time the simulation took [s]."""
    events: int
    """SimPy events processed."""
    settings: dict = field(default_factory=dict)
    """The mechanism settings in force (workload scheduling + the policy's)."""


class Simulation:
    """Simulate one workload under one policy."""

    def __init__(
        self,
        workload: Workload,
        policy: Policy | str | None = None,
        seed: int | None = None,
        progress: bool = False,
        check: bool = True,
    ) -> None:
        self.workload = workload
        self.scheduler = Scheduler(workload, policy)
        self.seed = workload.seed if seed is None else seed
        self.rng = np.random.default_rng(self.seed)
        self.env = simpy.Environment()
        self.cost = workload.cost
        self.engines = {e.name: EngineModel(self.cost) for e in self.scheduler.cluster.engines}
        self._engine_stamp = dict.fromkeys(self.engines, 0)
        self._jobs = {j.name: j for j in workload.jobs}
        self._arrival_wakes: set[float] = set()
        self._tokens: dict[int, int] = {}
        """Tokens each running generation will have produced, by work id."""
        self.events = 0
        self.check = check
        total = sum(j.rl.steps for j in workload.jobs)
        self._bar = tqdm(total=total, unit="step", desc="simulating", disable=not progress)

    # ----------------------------------------------------------------------------- loop
    def run(self) -> SimResult:
        """Run to completion and return the records and headline figures."""
        started = time.perf_counter()
        self._dispatch()
        self.env.run()
        self._bar.close()
        scheduler = self.scheduler
        if not scheduler.done:
            stuck = [j.name for j in scheduler.jobs if not j.done]
            raise SimulationError(
                f"simulation stalled at t={self.env.now:.1f} s; unfinished: {stuck}"
            )
        records = scheduler.finish(self.env.now)
        result = SimResult(
            records=records,
            makespan_s=self.env.now,
            job_finish_s={j.name: j.finish_s for j in scheduler.jobs},
            policy=scheduler.policy.name,
            seed=self.seed,
            wall_s=time.perf_counter() - started,
            events=self.events,
            settings=scheduler.scheduling.model_dump(),
        )
        if self.check:
            check_invariants(result, scheduler)
        return result

    def _dispatch(self) -> None:
        now = self.env.now
        for decision in self.scheduler.decide(now):
            self._start(decision, now)
        arrival = self.scheduler.next_arrival(now)
        if arrival is not None and arrival not in self._arrival_wakes:
            self._arrival_wakes.add(arrival)
            self._after(arrival - now, lambda: True)

    def _after(self, delay: float, then) -> None:
        """Run ``then`` ``delay`` seconds from now, then a scheduling round unless ``then``
        returns False (nothing the scheduler needs to know happened)."""

        def fire(_event) -> None:
            self.events += 1
            if then() is not False:
                self._dispatch()

        self.env.timeout(delay).callbacks.append(fire)

    def _finish(self, work_id: int, tokens: int = 0) -> None:
        self.scheduler.on_event(WorkDone(work_id, tokens=tokens), self.env.now)

    # ----------------------------------------------------------------------------- work
    def _start(self, decision: Decision, now: float) -> None:
        if isinstance(decision, Generate):
            self._start_generate(decision, now)
        elif isinstance(decision, EnvStep):
            self._start_env(decision)
        elif isinstance(decision, LoadAdapter):
            self._after(self.cost.adapter_load_s, lambda: self._finish(decision.work_id))
        elif isinstance(decision, SwapIn):
            self._after(self.cost.trainer_swap_s, lambda: self._finish(decision.work_id))
        elif isinstance(decision, Train):
            self._start_train(decision)
        elif isinstance(decision, Sync):
            colocated = self.scheduler.cluster.colocated
            cost = self.cost.sync_s + (self.cost.colocated_switch_s if colocated else 0.0)
            self._after(cost, lambda: self._finish(decision.work_id))

    def _start_generate(self, d: Generate, now: float) -> None:
        spec = self._jobs[d.job]
        lengths = np.clip(
            np.rint(spec.response_tokens.sample(self.rng, d.seqs)), 1, d.max_new_tokens
        )
        engine = self.engines[d.engine]
        engine.admit(now, d.work_id, lengths, d.context_tokens / d.seqs, (d.job, d.version))
        self._tokens[d.work_id] = int(lengths.sum())
        self._wake_engine(d.engine)

    def _wake_engine(self, name: str) -> None:
        engine = self.engines[name]
        when = engine.next_group_done_s()
        if when is None:
            return
        self._engine_stamp[name] += 1
        stamp = self._engine_stamp[name]

        def wake() -> bool:
            if stamp != self._engine_stamp[name]:
                return False  # superseded by a later admission
            finished = engine.pop_finished(self.env.now)
            for work_id in finished:
                self._finish(work_id, self._tokens.pop(work_id))
            self._wake_engine(name)
            return bool(finished)

        self._after(max(when - self.env.now, 0.0), wake)

    def _start_env(self, d: EnvStep) -> None:
        spec = self._jobs[d.job].env
        latency = float(spec.latency_s.sample(self.rng, d.seqs).max())
        added = 0 if d.last_turn else spec.observation_tokens * d.seqs
        self._after(latency, lambda: self._finish(d.work_id, added))

    def _start_train(self, d: Train) -> None:
        spec, cost = self._jobs[d.job], self.cost
        compute = d.tokens * (1 + spec.lora_rank / cost.train_rank_scale)
        duration = cost.train_overhead_s + compute / (cost.train_tokens_per_s * len(d.devices))

        def done() -> None:
            self._finish(d.work_id, d.tokens)
            self._bar.update(1)

        self._after(duration, done)


def simulate(
    workload: Workload,
    policy: Policy | str | None = None,
    seed: int | None = None,
    progress: bool = False,
) -> SimResult:
    """Simulate ``workload`` under ``policy`` (default: the workload's) and ``seed``."""
    return Simulation(workload, policy, seed, progress).run()
