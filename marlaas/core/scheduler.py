"""The scheduler core: facts in (``on_event``), decisions out (``decide``), never a clock.

Every run, simulated or real, is the same loop (marlaas.drive)::

    for decision in scheduler.decide(now): executor.start(decision, now)
    ... when work finishes: scheduler.on_event(WorkDone(...), now)

The mechanism enforces every capacity rule (engine sequences, KV tokens and adapter slots,
trainer residency, environment workers, the staleness bound, the step barrier, the number of
admitted jobs, generation and training taking turns on shared devices); the policy only
orders jobs wherever there is a choice. The stages live in their own modules
(:mod:`~marlaas.core.generation`, :mod:`~marlaas.core.environments`,
:mod:`~marlaas.core.training`); this one admits jobs, keeps the step barrier, refreshes what
changed and hands events to the stage that started the work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from marlaas.core.cluster import Cluster
from marlaas.core.environments import Environments
from marlaas.core.feasibility import check_feasible
from marlaas.core.generation import Generation
from marlaas.core.jobs import JobState
from marlaas.core.ledger import Ledger, Running
from marlaas.core.policies import Policy, get_policy
from marlaas.core.records import RecordLog
from marlaas.core.training import Training
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


class Scheduler:
    """Schedules every tenant's generation, environment, training and sync work."""

    def __init__(
        self, workload: Workload, policy: Policy | str | None = None, seed: int | None = None
    ) -> None:
        self.workload = workload
        self.seed = workload.seed if seed is None else seed
        """The run's seed (default: the workload's); it fixes each group's prompt length."""
        self.policy = (
            policy if isinstance(policy, Policy) else get_policy(policy or workload.policy)
        )
        self.mechanism = workload.scheduling.resolve()
        self.cluster = Cluster.build(workload.cluster, self.mechanism)
        cap = self.mechanism.staleness_cap
        bounds = [j.rl.max_staleness if cap is None else min(cap, j.rl.max_staleness)
                  for j in workload.jobs]  # fmt: skip
        self.jobs = [
            JobState(spec, i, bounds[i], self.seed) for i, spec in enumerate(workload.jobs)
        ]
        self._jobs_by_name = {j.name: j for j in self.jobs}
        self.ledger = Ledger(self.cluster)
        self.generation = Generation(
            self.jobs, self.cluster, self.ledger, self.policy, self._barrier_limit
        )
        self.environments = Environments(
            self.jobs, self.ledger, self.policy, workload.cluster.env_workers
        )
        self.training = Training(self.jobs, self.cluster, self.ledger, self.policy)
        self._handlers: dict[type, Callable[[Any, Running, WorkDone, float], None]] = {
            Generate: self.generation.on_generate,
            LoadAdapter: self.generation.on_load,
            EnvStep: self.environments.on_env,
            SwapIn: self.training.on_swap,
            Train: self.training.on_train,
            Sync: self.training.on_sync,
        }
        self._round_limit: dict[str, int] = {}
        self._round_left: set[int] = set()
        """Jobs of the barrier round that have not published their round's step yet."""
        self._finished: set[int] = set()
        self._arrivals = sorted(self.jobs, key=lambda j: (j.arrival_s, j.index))
        self._waiting: list[JobState] = []
        """Arrived, not yet admitted (max_active_jobs)."""
        self._active: dict[int, JobState] = {}
        self._barrier = self.mechanism.barrier
        self._exclusive = self.cluster.exclusive
        """Generation and training take turns on the devices (fixed for the run)."""
        check_feasible(workload, self.jobs)

    # ----------------------------------------------------------------------------- queries
    @property
    def records(self) -> RecordLog:
        """Every piece of work so far, and the idle intervals closed so far."""
        return self.ledger.records

    @property
    def done(self) -> bool:
        """True when every job trained and published all its steps."""
        return len(self._finished) == len(self.jobs)

    @property
    def running(self) -> int:
        """Pieces of work started and not yet reported done."""
        return len(self.ledger.running)

    def next_arrival(self, now: float) -> float | None:
        """The next time a job arrives after ``now``, so a driver can wake the scheduler."""
        if not self._arrivals:
            return None
        later = (j.arrival_s for j in self._arrivals if j.arrival_s > now)
        return next(later, None)

    def job(self, name: str) -> JobState:
        """A job's state by name."""
        return self._jobs_by_name[name]

    # ----------------------------------------------------------------------------- decide
    def decide(self, now: float) -> list[Decision]:
        """Everything that should start at ``now``, in a deterministic order; an executor
        starts them in this order (an eviction before the load it makes room for)."""
        out: list[Decision] = []
        ledger = self.ledger
        if ledger.due:
            due, ledger.due = ledger.due, []
            for start in due:
                start(now, out)
        if self._waiting or (self._arrivals and self._arrivals[0].arrival_s <= now):
            self._admit(now)
        if self._barrier:
            self._advance_round()
        if ledger.touched:
            self._refresh_touched()
        if not (self._exclusive and self._engines_busy()):
            self.training.start(now, out)  # exclusive devices: the engines drain first
        self.environments.start(now, out)
        self.generation.start(now, out, self._open_engines())
        if ledger.touched:
            self._refresh_touched(after_generation=True)
        ledger.idle.update(now)
        return out

    def finish(self, now: float) -> RecordLog:
        """Close the run at ``now``: idle intervals end here. Returns all records."""
        self.ledger.idle.close_all(now)
        return self.records

    def _engines_busy(self) -> bool:
        engines = self.cluster.engines
        return bool(engines) and engines[0].directory.free.busy > 0

    def _open_engines(self) -> list:
        """The engines that may take new groups: all, unless generation and training share
        the devices and a trainer is busy or a job is ready to train."""
        if self._exclusive and (self.training.ready or self.training.busy()):
            return []
        return self.cluster.engines

    def _admit(self, now: float) -> None:
        while self._arrivals and self._arrivals[0].arrival_s <= now:
            self._waiting.append(self._arrivals.pop(0))
        limit = self.mechanism.max_active_jobs
        room = len(self._waiting) if limit is None else limit - len(self._active)
        if not self._waiting or room <= 0:
            return
        for job in sorted(self._waiting, key=self.policy.key)[:room]:
            self._waiting.remove(job)
            self._active[job.index] = job
            self.ledger.touched.add(job.index)

    def _advance_round(self) -> None:
        """Open the next barrier round once every job of this one published its step."""
        if not self._round_left:
            self._round_limit = {j.name: j.published + 1 for j in self._active.values()}
            self._round_left = set(self._active)
            self.ledger.touched.update(self._active)

    def _barrier_limit(self, job: JobState) -> int | None:
        if not self.mechanism.barrier:
            return None
        return self._round_limit.get(job.name, job.published)

    def _refresh_touched(self, after_generation: bool = False) -> None:
        """Recompute the work sets and idle votes of the jobs that changed
        (``after_generation``: right after the placement round, which indexed them)."""
        touched = self.ledger.touched
        if not touched:
            return
        generation, environments = self.generation, self.environments
        train_ready, vote, active = self.training.ready, self.ledger.idle.vote, self._active
        barrier = self._barrier
        for index in touched:
            job = self.jobs[index]
            if index not in active:
                generation.set_ready(index, False)
                train_ready.discard(index)
                environments.set_ready(index, False)
                vote(index, None)
                continue
            limit = self._round_limit.get(job.name, job.published) if barrier else None
            gen = bool(job.ready_gen) or job.next_group_allowed(limit)
            env = bool(job.ready_env)
            key = None  # the job's policy key, computed at most once, when needed
            if gen:
                if not (after_generation and index in generation.ready):  # else: as the
                    key = self.policy.key(job)  # placement round left it
                    generation.set_ready(index, True, key, after_generation)
            elif index in generation.ready:
                generation.set_ready(index, False)
            if job.train_ready():
                train_ready.add(index)
            else:
                train_ready.discard(index)
            if env or index in environments.ready:
                environments.set_ready(index, env, key)
            vote(index, (None if gen else job.waiting_on(limit), job.trainer_vote()))
        touched.clear()

    # ----------------------------------------------------------------------------- events
    def on_event(self, event: WorkDone, now: float) -> Decision:
        """Record that a piece of work finished (or failed) at ``now``; returns its decision
        (KeyError when no such work is running)."""
        running = self.ledger.end(event.work_id)
        decision = running.decision
        job = self._jobs_by_name[decision.job]
        self.ledger.touched.add(job.index)
        self._handlers[type(decision)](decision, running, event, now)
        if job.index in self._round_left and (
            job.done or job.published >= self._round_limit[job.name]
        ):
            self._round_left.discard(job.index)
        if job.done:
            self._active.pop(job.index, None)
            self._finished.add(job.index)
        return decision
