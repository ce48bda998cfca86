"""The generation stage: which job's rollout group goes next (the policy), placed on the engine
that :mod:`marlaas.core.engine_choice` picks (the mechanism: sequences, KV tokens and adapter
slots), with the adapter loads and evictions that placement implies, and the groups' turns
and loads as they finish."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection

from marlaas.core.cluster import AdapterKey, Cluster, Engine
from marlaas.core.engine_choice import EngineChoice
from marlaas.core.free_engines import FreeEngines
from marlaas.core.jobs import Group, JobState
from marlaas.core.least import Least
from marlaas.core.ledger import Ledger, Running
from marlaas.core.need_index import NeedIndex
from marlaas.core.policies import Policy
from marlaas.core.work import (
    AbortGeneration,
    Decision,
    EvictAdapter,
    Generate,
    LoadAdapter,
    WorkDone,
)

BarrierLimit = Callable[[JobState], int | None]
"""The step a job may not generate for yet under the step barrier (None: no barrier)."""

Need = tuple[int, int, AdapterKey]
"""What a group needs on an engine: (sequences, KV tokens reserved, adapter)."""


class Generation:
    """Places rollout groups on engines and takes their completions.

    A placement round serves the ready jobs in policy order, each with as many groups as
    fit, and ends when no ready job's next group fits anywhere. Since engines only fill up
    within a round, only two kinds of jobs can be placed at the start of the next one: those
    that changed since (a group ended, a new step opened, the key moved), and those that fit
    an engine whose room grew since (:attr:`FreeEngines.grown`). The round starts from
    exactly these candidates, in policy order: the jobs that changed, and for each grown
    engine the job with the smallest key whose group fits it (:class:`NeedIndex`). Whenever
    a candidate comes from an engine, that engine proposes its next one, so every job that
    could be placed is tried in policy order, and the decisions are the same as trying every
    ready job in that order, at a cost that follows what changed.
    """

    def __init__(
        self,
        jobs: dict[int, JobState],
        by_name: dict[str, JobState],
        cluster: Cluster,
        ledger: Ledger,
        policy: Policy,
        barrier_limit: BarrierLimit,
    ) -> None:
        self.jobs, self.cluster, self.ledger, self.policy = jobs, cluster, ledger, policy
        """The live jobs by index, and by name (the scheduler's maps, shared)."""
        self.barrier_limit = barrier_limit
        self._by_name = by_name
        self.ready: set[int] = set()
        """Active jobs with a group to generate now."""
        self._after_load: dict[int, Generate] = {}
        """The generation waiting for each engine adapter load, by the load's work id."""
        self._served = 0
        engines = cluster.engines
        self._free = engines[0].directory.free if engines else FreeEngines(0)
        self._hosts = engines[0].directory.hosts if engines else {}
        self._engines = engines
        self._max_seqs = engines[0].spec.max_seqs if engines else 0
        self._slots = engines[0].spec.adapter_slots if engines else 0
        self._kv_tokens = engines[0].spec.kv_tokens if engines else 0
        self._needs = NeedIndex(self._kv_tokens)
        self._group_sizes, self._answer_reserves = Least(), Least()
        """The admitted jobs' group sizes and answer reserves (counted while they live)."""
        self._least = (0, 0)
        """No admitted job's group needs fewer sequences or KV tokens: a job's next group
        reserves room for its responses at least (its prompts may be empty; a continuing
        episode's context only grows)."""
        self._need: dict[int, Need] = {}
        """Each ready job's next group: (sequences, KV reserve, adapter)."""
        self._key: dict[int, tuple] = {}
        """Each ready job's policy key, recomputed whenever the job changed."""
        self._changed: set[int] = set()
        """Ready jobs that changed since the last round."""
        self._recheck_all = False
        """A round was skipped while jobs were ready: try them all next time."""
        self._dropped: set[int] = set()
        """Jobs whose group fits nowhere in this round (emptied at its end)."""
        self._ranked = policy.ranks_engines
        """The policy ranks engines (engine_key): groups are placed by EngineChoice.by_policy."""
        self._choice = EngineChoice(cluster, policy, by_name)
        """Which engine a group goes on."""
        self._offered: set[int] = set()
        """Engines that proposed their first fitting job this round (ranked policies)."""

    def add_job(self, job: JobState) -> None:
        """A job was admitted: count its group's least room in."""
        self._group_sizes.add(job.group_size)
        self._answer_reserves.add(job.answer_reserve)
        self._least = (self._group_sizes.value, self._answer_reserves.value)

    def remove_job(self, job: JobState) -> None:
        """A job ended: forget it (it has no group in flight)."""
        index = job.index
        self.set_ready(index, False)
        self._need.pop(index, None)
        self._key.pop(index, None)
        self._group_sizes.remove(job.group_size)
        self._answer_reserves.remove(job.answer_reserve)
        self._least = (self._group_sizes.value, self._answer_reserves.value)

    def holding(self) -> dict[str, Collection[int]]:
        """This stage's per-job structures (what names them -> the job indices in it), for
        the scheduler's leftover check."""
        return {
            "generation ready": self.ready, "generation needs": self._need,
            "generation keys": self._key, "generation changed": self._changed,
            "generation index": self._needs.indexed,
        }  # fmt: skip

    @property
    def loads_pending(self) -> int:
        """Adapter loads whose generation waits for them."""
        return len(self._after_load)

    def evict_all(self, job: JobState, out: list[Decision]) -> None:
        """Take every version of an ended job's adapter off the engines that hold it."""
        hosts, engines, ledger = self._hosts, self._engines, self.ledger
        for version in range(job.start_version, job.published + 1):
            adapter = (job.name, version)
            for index in sorted(hosts.get(adapter, ())):
                engine = engines[index]
                engine.evict(adapter)
                out.append(EvictAdapter(ledger.new_id(), job.name, version, engine.name))

    def abort_all(self, job: JobState, out: list[Decision]) -> None:
        """A cancelled job's generations in flight are stopped on their engines
        (:class:`AbortGeneration`, in the order they started): their completions come back
        at once and free the room they held. Its adapter loads in flight finish (short; the
        group waiting for one is never started) and its groups waiting for their load's round
        never start (:meth:`_generate_after_load`)."""
        ledger, name = self.ledger, job.name
        for work_id, running in list(ledger.running.items()):
            d = running.decision
            if type(d) is Generate and d.job == name:
                out.append(AbortGeneration(ledger.new_id(), name, work_id, d.engine))

    def key_of(self, index: int) -> tuple:
        """A ready job's policy key as last indexed (its key now, unless it changed since:
        then it is in ``ledger.touched``)."""
        return self._key[index]

    def has_work(self, job: JobState) -> bool:
        """Whether ``job`` has a group to generate now (a continuing episode or a new group)."""
        return bool(job.ready_gen) or job.next_group_allowed(self.barrier_limit(job))

    def set_ready(
        self, index: int, ready: bool, key: tuple | None = None, after_round: bool = False
    ) -> None:
        """The job changed: whether it has a group to generate now (``key``: its policy key
        now, if the caller has it). ``after_round``: the job changed at most in the last
        round, which indexed every ready job it touched or placed."""
        if ready:
            if after_round and index in self.ready:
                return
            self.ready.add(index)
            self._reindex(index, key)
        elif index in self.ready:
            self.ready.discard(index)
            self._changed.discard(index)
            self._needs.remove(index)

    # ------------------------------------------------------------------------------- start
    def start(self, now: float, out: list[Decision], engines: list[Engine]) -> None:
        """Place as many ready groups as fit on ``engines``, in policy order."""
        ready = self.ready
        for index in self.ledger.touched:  # changed since the jobs were last refreshed
            if index in ready:
                self._reindex(index)
        if not ready or not engines:
            self._recheck_all = bool(ready)
            self._free.grown.clear()
            return
        candidates = self._candidates()
        if not candidates:  # the engines offered while gathering them proposed no job
            self._offered.clear()  # (kept, they would propose none in any later round)
            return
        dropped, indexed, keys, needs = self._dropped, self._needs.indexed, self._key, self._need
        chooser = self._choice
        choose = chooser.by_policy if self._ranked else chooser.by_mechanism
        pop, push = heapq.heappop, heapq.heappush
        while candidates:
            key, index, source = pop(candidates)
            if key == keys.get(index) and index in indexed and index not in dropped:
                engine = choose(*needs[index])
                if engine is None:  # nowhere now, nor later this round: engines only fill up
                    dropped.add(index)
                else:
                    job = self.jobs[index]
                    self._place(job, engine, now, out)
                    if self.has_work(job):
                        self._reindex(index)
                        self._changed.discard(index)
                        push(candidates, (keys[index], index, -1))
                    else:
                        self._needs.remove(index)
            if source >= 0:
                self._propose(source, candidates)
        dropped.clear()
        self._offered.clear()

    def _candidates(self) -> list[tuple[tuple, int, int]]:
        """(key, job, engine that proposed it or -1) of the jobs that may be placed now."""
        changed = self._changed
        if self._recheck_all:
            changed.update(self.ready)
            self._recheck_all = False
        keys = self._key
        candidates = [(keys[i], i, -1) for i in changed]
        changed.clear()
        grown = self._free.grown
        if grown:
            for engine in grown:
                self._propose(engine, candidates)
            grown.clear()
        heapq.heapify(candidates)
        return candidates

    def _reindex(self, index: int, key: tuple | None = None) -> None:
        """Recompute a ready job's next group and key; when either changed (or the job is
        not indexed), index them and count the job as changed.

        A job whose group and key are as indexed could not be placed at the end of the last
        round (or was placed and indexed again since): it can only be placed now if an
        engine's room grew, and then that engine proposes it."""
        job = self.jobs[index]
        if job.ready_gen:  # next_need(job), inline
            group = job.groups[job.ready_gen[0]]
            context, version = group.context_tokens, group.version
            shared = group.shared_tokens
        else:
            new = job.new_group_index
            context, version = job.prompt_reserve_of(new), job.published
            shared = job.shared_prompt_of(new)
        reserve = context - (job.group_size - 1) * shared + job.answer_reserve
        need = (job.group_size, reserve, (job.name, version))
        if key is None:
            key = self.policy.key(job)
        if index in self._needs.indexed and self._key[index] == key and self._need[index] == need:
            return
        self._need[index], self._key[index] = need, key
        self._needs.put(index, need[0], need[1], key)
        self._changed.add(index)

    def _propose(self, index: int, candidates: list) -> None:
        """Add the jobs that could take engine ``index``'s room first: the one with the
        smallest key that fits, when the engine can load any adapter, else those whose
        adapter it holds."""
        engine = self._engines[index]
        if self._ranked:
            self._propose_ranked(engine, candidates)
            return
        if len(engine.resident) < self._slots or engine.unused > 0:  # engine.is_open, inline
            seqs, tokens = self._max_seqs - engine.seqs, self._kv_tokens - engine.tokens
            if seqs < self._least[0] or tokens < self._least[1]:
                return  # not even the smallest group of any job fits
            found = self._needs.first_fitting(seqs, tokens)
            if found is not None and found[1] in self._dropped:
                found = self._first_not_dropped((seqs, tokens))
            if found is not None:
                heapq.heappush(candidates, (*found, index))
            return
        for adapter in engine.resident:
            job = self._by_name[adapter[0]]
            need = self._need.get(job.index)
            if (
                need is not None
                and need[2] == adapter
                and job.index in self._needs.indexed
                and job.index not in self._dropped
                and adapter not in engine.loading
                and engine.fits(need[0], need[1])
            ):
                heapq.heappush(candidates, (self._key[job.index], job.index, -1))

    def _propose_ranked(self, engine: Engine, candidates: list) -> None:
        """_propose when the policy ranks engines: the jobs that hold some version of their
        adapter on the engine, and, once per round, the job with the smallest key that fits
        it (the policy may refuse an engine, and then the next job in key order would most
        likely refuse it too: trying them all would cost a pass over the jobs per engine)."""
        indexed, dropped, needs, keys = self._needs.indexed, self._dropped, self._need, self._key
        seqs, tokens = self._max_seqs - engine.seqs, self._kv_tokens - engine.tokens  # free
        by_name, push = self._by_name, heapq.heappush
        # each job with a version resident here, once: engine.versions is a plain dict, which
        # iterates faster than engine.resident's LRU order and holds no job twice
        for name in engine.versions:
            index = by_name[name].index
            need = needs.get(index)
            if (
                need is not None
                and need[0] <= seqs  # engine.fits, inline
                and need[1] <= tokens
                and index in indexed
                and index not in dropped
            ):
                push(candidates, (keys[index], index, -1))
        if engine.index in self._offered:
            return
        self._offered.add(engine.index)
        if len(engine.resident) < self._slots or engine.unused > 0:  # open: any adapter
            if seqs < self._least[0] or tokens < self._least[1]:
                return
            found = self._needs.first_fitting(seqs, tokens)
            if found is not None and found[1] in dropped:
                found = self._first_not_dropped((seqs, tokens))
            if found is not None:
                heapq.heappush(candidates, (*found, engine.index))

    def _first_not_dropped(self, room: tuple[int, int]) -> tuple[tuple, int] | None:
        """first_fitting, leaving out the jobs dropped this round (rare: a job that fits an
        open engine by room but not by adapter is loading its adapter there)."""
        needs, taken, found = self._needs, [], None
        while True:
            found = needs.first_fitting(*room)
            if found is None or found[1] not in self._dropped:
                break
            taken.append(found[1])
            needs.remove(found[1])
        for index in taken:
            seqs, tokens, _ = self._need[index]
            needs.put(index, seqs, tokens, self._key[index])
        return found

    def _place(self, job: JobState, engine: Engine, now: float, out: list) -> None:
        rl, ledger = job.spec.rl, self.ledger
        group, reserve = next_group(job)
        if job.ready_gen:
            job.ready_gen.popleft()
        else:
            job.groups[group.index] = group
            job.took_new_group()
        must_load, victim = engine.reserve(rl.group_size, reserve, (job.name, group.version))
        job.in_gen += 1
        self._served += 1
        job.last_served = self._served
        job.attained_tokens += job.turn_tokens
        ledger.touched.add(job.index)
        generate = Generate(
            ledger.new_id(), job.name, job.step_of(group.index), group.index, group.turn,
            engine.name, group.version, rl.group_size, group.context_tokens, rl.max_new_tokens,
            group.shared_tokens,
        )  # fmt: skip
        if not must_load:
            ledger.add_compute(engine.device, 1)
            ledger.begin(generate, now, out, engine=engine)
            return
        load = LoadAdapter(ledger.new_id(), job.name, group.version, engine.name)
        if victim is not None:
            out.append(EvictAdapter(ledger.new_id(), victim[0], victim[1], engine.name))
        ledger.idle.mark(engine.device)
        self._after_load[load.work_id] = generate
        ledger.begin(load, now, out, engine=engine)

    # ------------------------------------------------------------------------------- events
    def on_generate(self, d: Generate, running: Running, event: WorkDone, now: float) -> None:
        """A group's turn finished (or failed: it is generated again)."""
        job, engine = self._by_name[d.job], running.engine
        assert engine is not None
        engine.release(d.seqs, kv_reserve(d), (d.job, d.version))
        self.ledger.add_compute(engine.device, -1)
        job.in_gen -= 1
        prompt = event.prompt_tokens if event.prompt_tokens >= 0 else d.context_tokens // d.seqs
        self.ledger.record(
            "generate", job, (engine.device,), running.start_s, now, event, step=d.step,
            group=d.group, turn=d.turn, seqs=d.seqs, tokens=event.tokens, version=d.version,
            prompt_tokens=prompt, longest_tokens=event.longest_tokens,
        )  # fmt: skip
        job.attained_tokens += event.tokens - job.turn_tokens
        if job.cancelled:
            return
        if not event.ok:
            job.ready_gen.appendleft(d.group)
            return
        job.remaining_tokens -= job.turn_tokens
        job.groups[d.group].context_tokens += event.tokens
        job.ready_env.append(d.group)

    def on_load(self, d: LoadAdapter, running: Running, event: WorkDone, now: float) -> None:
        """An adapter load finished: its generation starts next round (or, when the load
        failed, the slot is freed and the group waits to be placed again)."""
        job, engine, ledger = self._by_name[d.job], running.engine, self.ledger
        assert engine is not None
        ledger.record("adapter_load", job, (engine.device,), running.start_s, now, event,
                      version=d.version)  # fmt: skip
        generate = self._after_load.pop(d.work_id)
        engine.loaded((d.job, d.version))
        ledger.idle.mark(engine.device)
        if not event.ok or job.cancelled:
            engine.release(generate.seqs, kv_reserve(generate), (d.job, d.version))
            if not event.ok:  # the executor left nothing on the engine: forget the slot
                engine.evict((d.job, d.version))
            job.in_gen -= 1
            job.attained_tokens -= job.turn_tokens
            if not job.cancelled:
                job.ready_gen.appendleft(generate.group)
            return
        ledger.add_compute(engine.device, 1)
        ledger.due.append(lambda t, out: self._generate_after_load(job, generate, engine, t, out))

    def _generate_after_load(
        self, job: JobState, generate: Generate, engine: Engine, now: float, out: list
    ) -> None:
        """Start a group whose adapter load finished (or give its room back: the job was
        cancelled in between)."""
        if job.cancelled:
            self.ledger.add_compute(engine.device, -1)
            engine.release(generate.seqs, kv_reserve(generate), (job.name, generate.version))
            job.in_gen -= 1
            return
        self.ledger.begin(generate, now, out, engine=engine)


def next_group(job: JobState) -> tuple[Group, int]:
    """The job's next group to generate (a continuing episode first) and its KV reserve."""
    rl = job.spec.rl
    group = job.groups[job.ready_gen[0]] if job.ready_gen else job.new_group(job.new_group_index)
    return group, group.kv_reserve(rl.group_size, rl.max_new_tokens)


def next_need(job: JobState) -> Need:
    """The room the job's next group needs: (sequences, KV reserve, adapter), as
    :func:`next_group` would make it."""
    if job.ready_gen:
        group = job.groups[job.ready_gen[0]]
        context, version, shared = group.context_tokens, group.version, group.shared_tokens
    else:
        new = job.new_group_index
        context, version = job.prompt_reserve_of(new), job.published
        shared = job.shared_prompt_of(new)
    reserve = context - (job.group_size - 1) * shared + job.answer_reserve
    return job.group_size, reserve, (job.name, version)


def kv_reserve(generate: Generate) -> int:
    """KV tokens a group reserves on its engine: its context (a shared prompt once) plus room
    for every sample."""
    shared = (generate.seqs - 1) * generate.shared_tokens
    return generate.context_tokens - shared + generate.seqs * generate.max_new_tokens
