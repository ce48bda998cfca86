"""The scheduler core: facts in (``on_event``), decisions out (``decide``), never a clock.

Both drivers run the same loop::

    for decision in scheduler.decide(now): start it       (SimPy timeout, or a real call)
    ... when work finishes: scheduler.on_event(WorkDone(...), now)

The mechanism here enforces every capacity rule (engine sequences, KV tokens and adapter
slots, trainer residency, environment workers, the staleness bound, the step barrier, the
number of admitted jobs); the policy only orders jobs wherever there is a choice.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marlaas.core.cluster import AdapterKey, CapacityError, Cluster, Device, Engine, Trainer
from marlaas.core.feasibility import check_feasible
from marlaas.core.idle import IdleAccounting
from marlaas.core.jobs import Group, JobState
from marlaas.core.policies import Policy, get_policy
from marlaas.core.records import WorkRecord
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
from marlaas.core.workload import SchedulingSpec, Workload


@dataclass
class _Running:
    decision: Decision
    start_s: float
    engine: Engine | None = None
    trainer: Trainer | None = None


class Scheduler:
    """Schedules every tenant's generation, environment, training and sync work."""

    def __init__(self, workload: Workload, policy: Policy | str | None = None) -> None:
        self.workload = workload
        self.policy = (
            get_policy(policy or workload.policy) if not isinstance(policy, Policy) else policy
        )
        merged = {**workload.scheduling.model_dump(), **self.policy.settings}
        self.scheduling = SchedulingSpec(**merged)
        self.cluster = Cluster.build(workload.cluster, self.scheduling)
        cap = self.scheduling.staleness_cap
        bounds = [j.rl.max_staleness if cap is None else min(cap, j.rl.max_staleness)
                  for j in workload.jobs]  # fmt: skip
        self.jobs = [JobState(spec, i, bounds[i]) for i, spec in enumerate(workload.jobs)]
        self._jobs_by_name = {j.name: j for j in self.jobs}
        self.records: list[WorkRecord] = []
        self._idle = IdleAccounting(self.cluster, self.records)
        self._running: dict[int, _Running] = {}
        self._next_work_id = 0
        self._served = 0
        self._env_free = workload.cluster.env_workers
        self._after_load: dict[int, Generate] = {}
        """The generation waiting for each engine adapter load, by the load's work id."""
        self._due: list[Callable[[float, list[Decision]], None]] = []
        """Follow-up work started by the next decide (a Generate after its load, a Sync)."""
        self._round_limit: dict[str, int] = {}
        # Incremental bookkeeping, so that one decide costs O(what changed), not O(jobs):
        self._arrivals = sorted(self.jobs, key=lambda j: (j.arrival_s, j.index))
        self._waiting: list[JobState] = []
        """Arrived, not yet admitted (max_active_jobs)."""
        self._active: dict[int, JobState] = {}
        self._touched: set[int] = set()
        """Jobs whose state changed since their sets and idle votes were refreshed."""
        self._gen_ready: set[int] = set()
        self._train_ready: set[int] = set()
        self._env_ready: set[int] = set()
        check_feasible(workload, self.jobs)

    # ----------------------------------------------------------------------------- queries
    @property
    def done(self) -> bool:
        """True when every job trained and published all its steps."""
        return all(j.done for j in self.jobs)

    def next_arrival(self, now: float) -> float | None:
        """The next time a job arrives after ``now``, so a driver can wake the scheduler."""
        later = (j.arrival_s for j in self._arrivals if j.arrival_s > now)
        return next(later, None)

    def job(self, name: str) -> JobState:
        """A job's state by name."""
        return self._jobs_by_name[name]

    # ----------------------------------------------------------------------------- decide
    def decide(self, now: float) -> list[Decision]:
        """Everything that should start at ``now``, in a deterministic order."""
        out: list[Decision] = []
        due, self._due = self._due, []
        for start in due:
            start(now, out)
        self._admit(now)
        if self.scheduling.barrier:
            self._advance_round()
        self._refresh_touched()
        self._start_training(now, out)
        self._start_env(now, out)
        self._start_generation(now, out)
        self._refresh_touched()
        self._idle.update(now)
        return out

    def finish(self, now: float) -> list[WorkRecord]:
        """Close the run at ``now``: idle intervals end here. Returns all records."""
        self._idle.close_all(now)
        return self.records

    def _new_id(self) -> int:
        self._next_work_id += 1
        return self._next_work_id

    def _begin(self, decision: Decision, now: float, **extra: Any) -> None:
        self._running[decision.work_id] = _Running(decision, now, **extra)

    def _by_policy(self, indices) -> list[JobState]:
        return sorted((self.jobs[i] for i in indices), key=self.policy.key)

    def _admit(self, now: float) -> None:
        while self._arrivals and self._arrivals[0].arrival_s <= now:
            self._waiting.append(self._arrivals.pop(0))
        limit = self.scheduling.max_active_jobs
        room = len(self._waiting) if limit is None else limit - len(self._active)
        if not self._waiting or room <= 0:
            return
        for job in sorted(self._waiting, key=self.policy.key)[:room]:
            self._waiting.remove(job)
            self._active[job.index] = job
            self._touched.add(job.index)

    def _advance_round(self) -> None:
        members = [self._jobs_by_name[n] for n in self._round_limit]
        if all(j.done or j.published >= self._round_limit[j.name] for j in members):
            self._round_limit = {j.name: j.published + 1 for j in self._active.values()}
            self._touched.update(self._active)

    def _refresh_touched(self) -> None:
        """Recompute the work sets and idle votes of the jobs that changed."""
        for index in self._touched:
            job = self.jobs[index]
            active = index in self._active
            _toggle(self._gen_ready, index, active and self._has_gen_work(job))
            _toggle(self._train_ready, index, active and job.train_ready())
            _toggle(self._env_ready, index, active and bool(job.ready_env))
            if active:
                engine_vote = (
                    None if index in self._gen_ready else job.waiting_on(self._barrier_limit(job))
                )
                self._idle.vote(index, (engine_vote, job.trainer_vote()))
            else:
                self._idle.vote(index, None)
        self._touched.clear()

    def _barrier_limit(self, job: JobState) -> int | None:
        if not self.scheduling.barrier:
            return None
        return self._round_limit.get(job.name, job.published)

    # ----------------------------------------------------------------------------- training
    def _start_training(self, now: float, out: list[Decision]) -> None:
        if not self._train_ready:
            return
        free = [t for t in self.cluster.trainers if t.activity is None]
        if not free or (self.cluster.colocated and self._engines_busy()):
            return  # colocated: the engines drain first (see _engines_open)
        ready = self._by_policy(self._train_ready)
        for job in ready:
            trainer = next((t for t in free if job.name in t.resident), None)
            if trainer is None:  # take a free trainer no other ready job's state is on
                others = {j.name for j in ready if j is not job}
                trainer = min(free, key=lambda t: (len(others & t.resident.keys()), t.name))
            free.remove(trainer)
            job.training = True
            self._touched.add(job.index)
            if job.name in trainer.resident:
                self._start_train(job, trainer, now, out)
            else:
                swap = SwapIn(self._new_id(), job.name, job.trained, trainer.name)
                self._set_activity(trainer, "adapter_load")
                self._begin(swap, now, trainer=trainer)
                out.append(swap)
            if not free:
                return

    def _engines_busy(self) -> bool:
        return any(e.seqs or e.loading for e in self.cluster.engines)

    def _start_train(self, job: JobState, trainer: Trainer, now: float, out: list) -> None:
        step = job.trained
        groups = job.finished[step]
        staleness = step - min(g.version for g in groups)
        if staleness > job.max_staleness:
            raise CapacityError(f"{job.name}: step {step} would train {staleness} versions stale")
        tokens = sum(g.context_tokens for g in groups)
        decision = Train(
            self._new_id(), job.name, step, trainer.name, tuple(d.name for d in trainer.devices),
            tuple(g.index for g in groups), job.spec.rl.group_size * len(groups), tokens,
            staleness, step + 1,
        )  # fmt: skip
        self._set_activity(trainer, "train")
        for other in self.cluster.trainers:
            if other is not trainer:
                other.resident.pop(job.name, None)  # its state moved here
        trainer.make_resident(job.name)
        for device in trainer.devices:
            self._add_compute(device, 1)
        job.attained_tokens += tokens
        self._begin(decision, now, trainer=trainer)
        out.append(decision)

    # ----------------------------------------------------------------------------- environments
    def _start_env(self, now: float, out: list[Decision]) -> None:
        for job in self._by_policy(self._env_ready):
            seqs = job.spec.rl.group_size
            while job.ready_env and self._env_free >= seqs:
                group = job.groups[job.ready_env.popleft()]
                self._env_free -= seqs
                job.in_env += 1
                self._touched.add(job.index)
                last = group.turn == job.spec.rl.turns - 1
                step = EnvStep(
                    self._new_id(), job.name, job.step_of(group.index), group.index,
                    group.turn, seqs, last,
                )  # fmt: skip
                self._begin(step, now)
                out.append(step)

    # ----------------------------------------------------------------------------- generation
    def _engines_open(self) -> list[Engine]:
        if self.cluster.colocated and (
            self._train_ready or any(t.activity is not None for t in self.cluster.trainers)
        ):
            return []  # the devices are training, or about to
        return self.cluster.engines

    def _has_gen_work(self, job: JobState) -> bool:
        return bool(job.ready_gen) or job.next_group_allowed(self._barrier_limit(job))

    def _start_generation(self, now: float, out: list[Decision]) -> None:
        if not self._gen_ready:
            return
        engines = self._engines_open()
        if not engines:
            return
        heap = [(self.policy.key(self.jobs[i]), i) for i in self._gen_ready]
        heapq.heapify(heap)
        no_room: tuple[int, int] | None = None
        """The smallest (seqs, KV tokens) that found no engine with room this round: capacity
        only shrinks within a round, so anything as large is skipped without a scan."""
        while heap:
            _, index = heapq.heappop(heap)
            job = self.jobs[index]
            group, reserve = self._next_group(job)
            need = (job.spec.rl.group_size, reserve)
            if no_room is not None and need[0] >= no_room[0] and need[1] >= no_room[1]:
                continue
            engine, room = self._choose_engine(engines, *need, (job.name, group.version))
            if engine is not None:
                self._place_group(job, group, engine, reserve, now, out)
                if self._has_gen_work(job):
                    heapq.heappush(heap, (self.policy.key(job), index))
            elif not room and (
                no_room is None or (need[0] <= no_room[0] and need[1] <= no_room[1])
            ):
                no_room = need

    @staticmethod
    def _next_group(job: JobState) -> tuple[Group, int]:
        """The job's next group to generate (a continuing episode first) and its KV reserve."""
        rl = job.spec.rl
        if job.ready_gen:
            group = job.groups[job.ready_gen[0]]
        else:
            group = Group(job.next_group, job.published, context_tokens=job.prompt_reserve)
        return group, group.context_tokens + rl.group_size * rl.max_new_tokens

    def _place_group(
        self, job: JobState, group: Group, engine: Engine, reserve: int, now: float, out: list
    ) -> None:
        rl = job.spec.rl
        if job.ready_gen:
            job.ready_gen.popleft()
        else:
            job.groups[group.index] = group
            job.next_group += 1
        must_load = engine.reserve(rl.group_size, reserve, (job.name, group.version))
        engine.check()
        job.in_gen += 1
        self._served += 1
        job.last_served = self._served
        job.attained_tokens += job.turn_tokens
        self._touched.add(job.index)
        generate = Generate(
            self._new_id(), job.name, job.step_of(group.index), group.index, group.turn,
            engine.name, group.version, rl.group_size, group.context_tokens, rl.max_new_tokens,
        )  # fmt: skip
        if must_load:
            load = LoadAdapter(self._new_id(), job.name, group.version, engine.name)
            self._idle.mark(engine.device)
            self._begin(load, now, engine=engine)
            self._after_load[load.work_id] = generate
            out.append(load)
        else:
            self._add_compute(engine.device, 1)
            self._begin(generate, now, engine=engine)
            out.append(generate)

    @staticmethod
    def _choose_engine(
        engines: list[Engine], seqs: int, tokens: int, adapter: AdapterKey
    ) -> tuple[Engine | None, bool]:
        """The engine to place a group on (its adapter resident first, then the most free
        sequences, then the lowest index), and whether any engine had room for it at all."""
        best, best_score = None, None
        for index in engines[0].directory.candidates(adapter):
            engine = engines[index]
            if not engine.fits(seqs, tokens) or not engine.can_host(adapter):
                continue
            score = (adapter in engine.resident, engine.spec.max_seqs - engine.seqs, -index)
            if best_score is None or score > best_score:
                best, best_score = engine, score
        if best is not None:
            return best, True
        return None, any(engine.fits(seqs, tokens) for engine in engines)

    # ----------------------------------------------------------------------------- state changes
    def _add_compute(self, device: Device, delta: int) -> None:
        device.compute += delta
        self._idle.mark(device)

    def _set_activity(self, trainer: Trainer, activity: str | None) -> None:
        trainer.activity = activity
        self._idle.mark(*trainer.devices)

    # ----------------------------------------------------------------------------- events
    def on_event(self, event: WorkDone, now: float) -> None:
        """Record that a piece of work finished (or failed) at ``now``."""
        running = self._running.pop(event.work_id, None)
        if running is None:
            raise KeyError(f"no running work with id {event.work_id}")
        decision = running.decision
        self._touched.add(self.job(decision.job).index)
        handler = {
            Generate: self._generate_done,
            EnvStep: self._env_done,
            LoadAdapter: self._load_done,
            SwapIn: self._swap_done,
            Train: self._train_done,
            Sync: self._sync_done,
        }[type(decision)]
        handler(decision, running, event, now)

    def _generate_done(self, d: Generate, running: _Running, event: WorkDone, now: float) -> None:
        job, engine = self.job(d.job), running.engine
        engine.release(d.seqs, _kv_reserve(d), (d.job, d.version))
        self._add_compute(engine.device, -1)
        job.in_gen -= 1
        self._record(
            "generate", job, (engine.device,), running.start_s, now, event, step=d.step,
            group=d.group, turn=d.turn, seqs=d.seqs, tokens=event.tokens, version=d.version,
        )  # fmt: skip
        job.attained_tokens += event.tokens - job.turn_tokens
        if not event.ok:
            job.ready_gen.appendleft(d.group)
            return
        job.remaining_tokens -= job.turn_tokens
        job.groups[d.group].context_tokens += event.tokens
        job.ready_env.append(d.group)

    def _env_done(self, d: EnvStep, running: _Running, event: WorkDone, now: float) -> None:
        job = self.job(d.job)
        self._env_free += d.seqs
        job.in_env -= 1
        group = job.groups[d.group]
        self._record(
            "env", job, (), running.start_s, now, event, step=d.step, group=d.group,
            turn=d.turn, seqs=d.seqs, tokens=event.tokens, version=group.version,
            reward=event.reward,
        )  # fmt: skip
        if not event.ok:
            job.ready_env.appendleft(d.group)
            return
        group.context_tokens += event.tokens
        if d.last_turn:
            job.finished.setdefault(d.step, []).append(job.groups.pop(d.group))
        else:
            group.turn += 1
            job.ready_gen.append(d.group)

    def _swap_done(self, d: SwapIn, running: _Running, event: WorkDone, now: float) -> None:
        job, trainer = self.job(d.job), running.trainer
        self._record("adapter_load", job, trainer.devices, running.start_s, now, event,
                     version=d.version)  # fmt: skip
        self._set_activity(trainer, None)
        if not event.ok:
            job.training = False
            return
        trainer.make_resident(job.name)
        self._due.append(lambda t, out: self._start_train(job, trainer, t, out))

    def _load_done(self, d: LoadAdapter, running: _Running, event: WorkDone, now: float) -> None:
        job, engine = self.job(d.job), running.engine
        self._record("adapter_load", job, (engine.device,), running.start_s, now, event,
                     version=d.version)  # fmt: skip
        generate = self._after_load.pop(d.work_id)
        engine.loading.discard((d.job, d.version))
        self._idle.mark(engine.device)
        if not event.ok:
            engine.release(generate.seqs, _kv_reserve(generate), (d.job, d.version))
            engine.evict((d.job, d.version))
            job.in_gen -= 1
            job.attained_tokens -= job.turn_tokens
            job.ready_gen.appendleft(generate.group)
            return
        self._add_compute(engine.device, 1)

        def start_generate(t: float, out: list[Decision]) -> None:
            self._begin(generate, t, engine=engine)
            out.append(generate)

        self._due.append(start_generate)

    def _train_done(self, d: Train, running: _Running, event: WorkDone, now: float) -> None:
        job, trainer = self.job(d.job), running.trainer
        for device in trainer.devices:
            self._add_compute(device, -1)
        self._record(
            "train", job, trainer.devices, running.start_s, now, event, step=d.step,
            seqs=d.seqs, tokens=d.tokens, version=d.version_out, staleness=d.staleness,
        )  # fmt: skip
        if not event.ok:
            self._set_activity(trainer, None)
            job.training = False
            return
        job.trained += 1
        del job.finished[d.step]
        self._set_activity(trainer, "weight_sync")
        self._due.append(lambda t, out: self._start_sync(job, trainer, t, out))

    def _start_sync(self, job: JobState, trainer: Trainer, now: float, out: list) -> None:
        sync = Sync(self._new_id(), job.name, job.trained, trainer.name)
        self._begin(sync, now, trainer=trainer)
        out.append(sync)

    def _sync_done(self, d: Sync, running: _Running, event: WorkDone, now: float) -> None:
        job, trainer = self.job(d.job), running.trainer
        self._record(
            "sync", job, trainer.devices, running.start_s, now, event, step=d.version - 1,
            version=d.version,
        )  # fmt: skip
        if not event.ok:  # publish again; the trainer stays on it
            self._due.append(lambda t, out: self._start_sync(job, trainer, t, out))
            return
        self._set_activity(trainer, None)
        job.training = False
        job.published = d.version
        if job.published >= job.steps:
            job.done = True
            job.finish_s = now
            del self._active[job.index]

    def _record(
        self,
        kind: str,
        job: JobState,
        devices: tuple[Device, ...],
        start: float,
        end: float,
        event: WorkDone,
        **fields: Any,
    ) -> None:
        """One record per device the work ran on (environment work: one, without device)."""
        outcome = "ok" if event.ok else "failed"
        for name, pool in [(d.name, d.pool) for d in devices] or [("", "env")]:
            self.records.append(
                WorkRecord(
                    kind, job.tenant, job.name, device=name, pool=pool, start_s=start,
                    end_s=end, outcome=outcome, **fields,
                )
            )  # fmt: skip


def _kv_reserve(generate: Generate) -> int:
    """KV tokens a group reserves on its engine: its context plus room for every sample."""
    return generate.context_tokens + generate.seqs * generate.max_new_tokens


def _toggle(members: set[int], index: int, present: bool) -> None:
    if present:
        members.add(index)
    else:
        members.discard(index)
