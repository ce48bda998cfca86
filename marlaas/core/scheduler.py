"""The scheduler core: facts in (``submit``, ``cancel``, ``on_event``), decisions out
(``decide``), never a clock.

Every run, simulated or real, is the same loop (marlaas.drive)::

    for decision in scheduler.decide(now): executor.start(decision, now)
    ... a tenant submits or cancels: scheduler.submit(job, now) / scheduler.cancel(name, now)
    ... when work finishes: scheduler.on_event(WorkDone(...), now)

It is built from the cluster, the mechanism settings, the policy and the seed, with no jobs.
A job enters by ``submit`` and is refused there if it can never fit the cluster; it waits
(queued) until admission, in policy order, within ``max_active_jobs`` and the tenant quotas;
the admission round refuses the newest waiting jobs beyond the queue bounds. Every per-job
structure is built when the job is admitted and torn down when it ends: finished, or
cancelled once its work in flight has come back (discarded; its generations in flight are
stopped at the cancel, :class:`~marlaas.core.work.AbortGeneration`). An ended job leaves a
:class:`~marlaas.core.outcomes.JobOutcome` (``take_ended``).

The mechanism enforces every capacity rule (engine sequences, KV tokens and adapter slots,
trainer residency, environment workers, the staleness bound, the step barrier, the number of
admitted jobs, generation and training taking turns on shared devices); the policy only
orders jobs wherever there is a choice. The stages live in their own modules
(:mod:`~marlaas.core.generation`, :mod:`~marlaas.core.environments`,
:mod:`~marlaas.core.training`), and so do the waiting jobs and the tenants' quotas
(:mod:`~marlaas.core.admission_queue`); this one takes the facts in, admits and tears down
jobs, keeps the step barrier, refreshes what changed and hands events to the stage that
started the work.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from marlaas.core.admission_queue import AdmissionQueue
from marlaas.core.backlog import Backlog
from marlaas.core.cluster import Cluster
from marlaas.core.cluster_spec import ClusterSpec
from marlaas.core.environments import Environments
from marlaas.core.feasibility import why_infeasible
from marlaas.core.generation import Generation
from marlaas.core.job_spec import JobSpec
from marlaas.core.jobs import JobState
from marlaas.core.ledger import Ledger, Running
from marlaas.core.outcomes import (
    ACTIVE,
    CANCELLED,
    CANCELLING,
    FINISHED,
    QUEUED,
    REFUSED,
    Admission,
    JobOutcome,
)
from marlaas.core.policies import Policy, get_policy
from marlaas.core.records import RecordLog
from marlaas.core.scheduling import Mechanism, SchedulingSpec
from marlaas.core.tenant_spec import TenantSpec
from marlaas.core.training import Training
from marlaas.core.work import (
    AdmitJob,
    Decision,
    EnvStep,
    Generate,
    LoadAdapter,
    ReleaseJob,
    SwapIn,
    Sync,
    Train,
    WorkDone,
)
from marlaas.core.workload import Workload


class Scheduler:
    """Schedules every tenant's generation, environment, training and sync work."""

    def __init__(
        self,
        cluster: ClusterSpec,
        scheduling: SchedulingSpec | Mechanism | None = None,
        policy: Policy | str = "fifo",
        seed: int = 0,
    ) -> None:
        self.cluster_spec = cluster
        self.seed = seed
        """The run's seed; with a job's index it fixes each of its groups' prompt length."""
        self.policy = policy if isinstance(policy, Policy) else get_policy(policy)
        self.policy.start_run()  # an instance from an earlier run forgets it
        if isinstance(scheduling, Mechanism):
            self.mechanism = scheduling
        else:
            self.mechanism = (scheduling or SchedulingSpec()).resolve()
        self.cluster = Cluster.build(cluster, self.mechanism)
        self._alone_cluster = self.cluster.alone()
        """What a job alone has of the cluster (its alone-time estimate)."""
        self.jobs: dict[int, JobState] = {}
        """The live jobs (queued, active, cancelling) by index (read only)."""
        self._by_name: dict[str, JobState] = {}
        self.ledger = Ledger(self.cluster)
        jobs, by_name, ledger, policy_ = self.jobs, self._by_name, self.ledger, self.policy
        self.generation = Generation(
            jobs, by_name, self.cluster, ledger, policy_, self._barrier_limit
        )
        self.environments = Environments(jobs, by_name, ledger, policy_, cluster.env_workers)
        self.training = Training(jobs, by_name, self.cluster, ledger, policy_)
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
        self._submitted = 0
        """Jobs submitted so far (a job's index is its number among them)."""
        self._queue = AdmissionQueue(self.mechanism, self.policy)
        """The jobs waiting for admission, and the tenants' job counts and quotas."""
        self._active: dict[int, JobState] = {}
        self._ending: dict[int, JobState] = {}
        """Finished or cancelled jobs, torn down once nothing of theirs is in flight."""
        self._ended: list[JobOutcome] = []
        self._barrier = self.mechanism.barrier
        self._exclusive = self.cluster.exclusive
        """Generation and training take turns on the devices (fixed for the run)."""
        self.backlog = Backlog()
        """The live jobs' expected remaining tokens and the measured token rate (read only)."""
        self._reads_backlog = self.policy.reads_backlog

    @classmethod
    def for_workload(
        cls, workload: Workload, policy: Policy | str | None = None, seed: int | None = None
    ) -> Scheduler:
        """A scheduler with the workload's cluster, mechanism, policy and seed (``policy`` and
        ``seed`` replace the workload's), and none of its jobs: they are submitted."""
        scheduler = cls(
            workload.cluster,
            workload.scheduling,
            policy or workload.policy,
            workload.seed if seed is None else seed,
        )
        for tenant, quota in workload.tenants.items():
            scheduler.set_quota(tenant, quota)
        return scheduler

    # ----------------------------------------------------------------------------- queries
    @property
    def records(self) -> RecordLog:
        """Every piece of work so far, and the idle intervals closed so far."""
        return self.ledger.records

    @property
    def live(self) -> int:
        """Jobs submitted and not ended (queued, active or cancelling)."""
        return len(self.jobs)

    @property
    def running(self) -> int:
        """Pieces of work started and not yet reported done."""
        return len(self.ledger.running)

    def job(self, name: str) -> JobState:
        """A live job's state by name (KeyError when no such job lives)."""
        return self._by_name[name]

    def status(self, name: str) -> str | None:
        """A live job's state (queued, active, cancelling), None when no such job lives."""
        job = self._by_name.get(name)
        if job is None:
            return None
        if job.cancelled:
            return CANCELLING
        return ACTIVE if job.index in self._active or job.done else QUEUED

    def take_ended(self) -> list[JobOutcome]:
        """The jobs that ended since the last call, in the order they ended."""
        ended, self._ended = self._ended, []
        return ended

    def leftovers(self, ended: JobOutcome | None = None) -> list[str]:
        """What the scheduler still holds of the ended job ``ended``: entries of its per-job
        structures, its adapters on engines and trainers, its work in flight. With None, of
        any job, and every resource that is not free (when every job has ended, as at the
        end of a run). Empty when nothing is left (the run's invariants check it)."""
        index, name = (None, None) if ended is None else (ended.index, ended.name)
        gen, envs, ledger = self.generation, self.environments, self.ledger
        out: list[str] = []
        by_index: dict[str, Collection[int]] = {
            "jobs": self.jobs, "active": self._active, "ending": self._ending,
            "waiting": {j.index for j in self._queue.waiting}, "barrier round": self._round_left,
            "touched": ledger.touched, **gen.holding(), "environments ready": envs.ready,
            "training ready": self.training.ready, "idle votes": ledger.idle.voters,
        }  # fmt: skip
        for what, held in by_index.items():
            if (index in held) if index is not None else held:
                out.append(what)
        names: dict[str, set[str]] = {
            "names": set(self._by_name), "barrier limits": set(self._round_limit),
            "work in flight": {r.decision.job for r in ledger.running.values()},
        }  # fmt: skip
        for engine in self.cluster.engines:
            names[f"{engine.name} adapters"] = {job for job, _ in engine.resident}
        for trainer in self.cluster.trainers:
            names[f"{trainer.name} states"] = set(trainer.resident)
        for what, named in names.items():
            if (name in named) if name is not None else named:
                out.append(what)
        if ended is None:
            out += [f"{e.name} room" for e in self.cluster.engines if e.seqs or e.tokens]
            out += [f"{d.name} compute" for d in self.cluster.devices if d.compute]
            out += [f"{t.name} busy" for t in self.cluster.trainers if t.activity is not None]
            if envs.free != envs.workers:
                out.append(f"environment workers ({envs.free} of {envs.workers} free)")
            if ledger.due or self._queue.tenants or gen.loads_pending:
                out.append("follow-ups, tenant counts or loads")
        return out

    # ----------------------------------------------------------------------------- facts
    def set_quota(self, tenant: str, quota: TenantSpec | None) -> None:
        """The operator set ``tenant``'s quotas (None: back to the mechanism's
        tenant_max_active_jobs and tenant_max_queued_jobs). They apply from the next
        admission round on; jobs already admitted stay."""
        self._queue.set_quota(tenant, quota)

    def submit(
        self, spec: JobSpec, now: float, version: int = 0, index: int | None = None
    ) -> Admission:
        """A tenant submitted ``spec`` at ``now`` [s], to start from adapter ``version`` (a
        resumed job's last durable one). Queued for admission, or refused with the reason
        (a name or index in use, nothing left to train, a group that can never fit the
        cluster). ``index``: the job's number, which fixes its groups' prompts and samples
        (default: its submission number); a service gives each job its own for good, so
        that a job submitted again after a restart draws what it would have drawn."""
        reason = None
        if spec.name in self._by_name:
            reason = f"a job named {spec.name!r} is already {self.status(spec.name)}"
        elif index is not None and (index < 0 or index in self.jobs):
            reason = f"index {index} is {'in use' if index >= 0 else 'negative'}"
        elif not 0 <= version < spec.rl.steps:
            reason = f"version {version} is outside 0..{spec.rl.steps - 1} (rl.steps)"
        else:
            reason = why_infeasible(spec, self.cluster_spec)
        if reason is not None:
            self._ended.append(
                JobOutcome(spec.name, spec.tenant, REFUSED, now, now, spec.rl.steps, version,
                           version, spec.rl.max_staleness, reason, -1)
            )  # fmt: skip
            return Admission(spec.name, REFUSED, reason)
        cap = self.mechanism.staleness_cap
        bound = spec.rl.max_staleness if cap is None else min(cap, spec.rl.max_staleness)
        if index is None:
            index = self._submitted
        self._submitted = max(self._submitted, index + 1)
        job = JobState(spec, index, bound, self.seed, now, version,
                       shares_prompt=self.cluster_spec.engine.prefix_caching,
                       alone_cluster=self._alone_cluster)  # fmt: skip
        backlog = job.backlog = self.backlog
        backlog.advance(now, True)
        backlog.tokens += job.remaining_tokens
        self._alone_changed(job, job.remaining_alone_s)
        self.jobs[job.index] = job
        self._by_name[job.name] = job
        self._queue.add(job)
        return Admission(job.name, QUEUED)

    def cancel(self, name: str, now: float) -> str | None:
        """The tenant cancelled job ``name`` at ``now`` [s]: a queued job ends at once; an
        active one takes no new work, its generations in flight are stopped on their engines
        by the next decision round (:class:`AbortGeneration`: their room is free at once),
        and it ends (``cancelled``) once its work in flight has come back, which is
        discarded (a stopped generation's at once; an environment step, adapter load,
        training step or sync when it finishes). Returns the job's state after the cancel
        (None: no such job lives, e.g. it has ended)."""
        job = self._by_name.get(name)
        if job is None or job.done or job.cancelled:
            return None if job is None else self.status(name)
        job.cancelled = True
        if job.index not in self._active:  # queued: it holds nothing
            self._queue.withdraw(job)
            self._forget(job, CANCELLED, now)
            return CANCELLED
        del self._active[job.index]
        self._queue.deactivate(job)
        self._round_left.discard(job.index)
        job.ready_gen.clear()
        job.ready_env.clear()
        job.finished.clear()
        job.resample.clear()
        self.ledger.touched.add(job.index)  # its work sets and votes are withdrawn
        self._ending[job.index] = job
        if job.in_gen:  # its groups stop decoding in the next round (at ``now``)
            self.ledger.due.append(lambda t, out: self.generation.abort_all(job, out))
        return CANCELLING

    # ----------------------------------------------------------------------------- decide
    def decide(self, now: float) -> list[Decision]:
        """Everything that should start at ``now``, in a deterministic order; an executor
        starts them in this order (an eviction before the load it makes room for)."""
        out: list[Decision] = []
        ledger = self.ledger
        self.backlog.advance(now, bool(self.jobs))
        if ledger.due:
            due, ledger.due = ledger.due, []
            for start in due:
                start(now, out)
        if self._ending:
            self._end_settled(now, out)
        if self._queue.waiting:
            self._admit(now, out)
        if self._barrier:
            self._advance_round()
        if self._reads_backlog and self.backlog.rekey_due():
            ledger.touched.update(self._active)  # keys that read the backlog moved
        if ledger.touched:
            self._refresh_touched()
        if not (self._exclusive and self._engines_busy()):
            self.training.start(now, out)  # exclusive devices: the engines drain first
        self.environments.start(now, out)
        self.generation.start(now, out, self._open_engines())
        if ledger.touched:
            self._refresh_touched(after_generation=True)
        ledger.idle.update(now)
        if not self.jobs:
            self.backlog.advance(now, False)  # the last job ended: an idle spell begins
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

    def _admit(self, now: float, out: list[Decision]) -> None:
        """An admission round (core.admission_queue): the jobs it admits start, the jobs
        beyond the queue bounds are refused."""
        queue = self._queue
        for job in queue.admit(len(self._active)):
            self._start(job, out)
        for job, reason in queue.refuse_beyond_bounds():
            self._forget(job, REFUSED, now, reason)

    def _start(self, job: JobState, out: list[Decision]) -> None:
        """Admit ``job``: its per-job structures are built, and the executor builds its state."""
        self._active[job.index] = job
        self.ledger.touched.add(job.index)
        self.generation.add_job(job)
        self.environments.add_job(job)
        out.append(
            AdmitJob(
                self.ledger.new_id(),
                job.name,
                job.spec,
                job.index,
                job.published,
                job.max_staleness,
            )
        )

    def _end_settled(self, now: float, out: list[Decision]) -> None:
        """Tear down the ended jobs with nothing in flight: their adapters leave the engines
        and trainers, every structure forgets them, the executor releases them."""
        for index, job in list(self._ending.items()):
            if job.in_flight:
                continue
            del self._ending[index]
            self.generation.evict_all(job, out)
            self.generation.remove_job(job)
            self.environments.remove_job(job)
            self.training.swap_out_all(job, out)
            self.ledger.idle.vote(index, None)
            self._round_limit.pop(job.name, None)
            self._round_left.discard(index)
            out.append(ReleaseJob(self.ledger.new_id(), job.name))
            if job.cancelled:
                self._forget(job, CANCELLED, now)
            else:
                self._forget(job, FINISHED, now if job.finish_s is None else job.finish_s)

    def _forget(self, job: JobState, state: str, now: float, reason: str = "") -> None:
        """The job ended (``state``): it leaves the last maps, and its outcome is kept."""
        del self.jobs[job.index]
        del self._by_name[job.name]
        self.backlog.tokens -= job.remaining_tokens
        self._alone_changed(job, None)
        self.ledger.touched.discard(job.index)
        self._queue.ended(job)
        self._ended.append(
            JobOutcome(job.name, job.tenant, state, job.arrival_s, now, job.steps,
                       job.start_version, job.published, job.max_staleness, reason, job.index)
        )  # fmt: skip

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
            key = None
            if gen:
                if after_generation and index in generation.ready:
                    key = generation.key_of(index)  # as the placement round left it
                else:
                    key = self.policy.key(job)
                    generation.set_ready(index, True, key, after_generation)
            elif index in generation.ready:
                generation.set_ready(index, False)
            if job.train_ready():
                train_ready.add(index)
            else:
                train_ready.discard(index)
            if env or index in environments.ready:  # the key, unless the backlog moves it
                environments.set_ready(index, env, None if self._reads_backlog else key)
            vote(index, (None if gen else job.waiting_on(limit), job.trainer_vote()))
        touched.clear()

    # ----------------------------------------------------------------------------- events
    def on_event(self, event: WorkDone, now: float) -> Decision:
        """Record that a piece of work finished (or failed) at ``now``; returns its decision
        (KeyError when no such work is running)."""
        running = self.ledger.end(event.work_id)
        decision = running.decision
        job = self._by_name[decision.job]
        self.ledger.touched.add(job.index)
        remaining = job.remaining_tokens
        self._handlers[type(decision)](decision, running, event, now)
        backlog = self.backlog
        backlog.tokens += job.remaining_tokens - remaining
        if type(decision) is Generate and event.ok:
            backlog.generated += event.tokens
        elif type(decision) is Train:
            self._alone_changed(job, job.remaining_alone_s)
        if job.index in self._round_left and (
            job.done or job.published >= self._round_limit[job.name]
        ):
            self._round_left.discard(job.index)
        if job.done and job.index in self._active:
            del self._active[job.index]
            self._queue.deactivate(job)
            self._ending[job.index] = job
        return decision

    def _alone_changed(self, job: JobState, alone_s: float | None) -> None:
        """``job``'s remaining alone time is ``alone_s`` [s] (None: it ended): the backlog's
        longest and runner-up are kept, and the jobs that hold the longest are re-keyed if
        the policy reads them."""
        holders = self.backlog.set_alone(job.index, alone_s, job.late_alone_s)
        if holders and self._reads_backlog:
            touched, active = self.ledger.touched, self._active
            touched.update(index for index in holders if index in active)
