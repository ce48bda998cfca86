"""The generation stage: which job's rollout group goes next (the policy) and on which engine
(the mechanism: sequences, KV tokens and adapter slots), with the adapter loads and evictions
that placement implies."""

from __future__ import annotations

import heapq
from collections.abc import Callable

from marlaas.core.cluster import AdapterKey, Cluster, Engine
from marlaas.core.jobs import Group, JobState
from marlaas.core.ledger import Ledger, Running
from marlaas.core.policies import Policy
from marlaas.core.work import Decision, EvictAdapter, Generate, LoadAdapter, WorkDone

BarrierLimit = Callable[[JobState], int | None]
"""The step a job may not generate for yet under the step barrier (None: no barrier)."""


class Generation:
    """Places rollout groups on engines and takes their completions."""

    def __init__(
        self,
        jobs: list[JobState],
        cluster: Cluster,
        ledger: Ledger,
        policy: Policy,
        barrier_limit: BarrierLimit,
    ) -> None:
        self.jobs, self.cluster, self.ledger, self.policy = jobs, cluster, ledger, policy
        self.barrier_limit = barrier_limit
        self._by_name = {j.name: j for j in jobs}
        self.ready: set[int] = set()
        """Active jobs with a group to generate now."""
        self._after_load: dict[int, Generate] = {}
        """The generation waiting for each engine adapter load, by the load's work id."""
        self._served = 0

    def has_work(self, job: JobState) -> bool:
        """Whether ``job`` has a group to generate now (a continuing episode or a new group)."""
        return bool(job.ready_gen) or job.next_group_allowed(self.barrier_limit(job))

    # ------------------------------------------------------------------------------- start
    def start(self, now: float, out: list[Decision], engines: list[Engine]) -> None:
        """Place as many ready groups as fit on ``engines``, in policy order."""
        if not self.ready or not engines:
            return
        heap = [(self.policy.key(self.jobs[i]), i) for i in self.ready]
        heapq.heapify(heap)
        no_room: tuple[int, int] | None = None
        """The smallest (seqs, KV tokens) that found no engine with room this round: capacity
        only shrinks within a round, so anything as large is skipped without a scan."""
        while heap:
            _, index = heapq.heappop(heap)
            job = self.jobs[index]
            group, reserve = next_group(job)
            need = (job.spec.rl.group_size, reserve)
            if no_room is not None and need[0] >= no_room[0] and need[1] >= no_room[1]:
                continue
            engine, room = choose_engine(engines, *need, (job.name, group.version))
            if engine is not None:
                self._place(job, group, engine, reserve, now, out)
                if self.has_work(job):
                    heapq.heappush(heap, (self.policy.key(job), index))
            elif not room and (
                no_room is None or (need[0] <= no_room[0] and need[1] <= no_room[1])
            ):
                no_room = need

    def _place(
        self, job: JobState, group: Group, engine: Engine, reserve: int, now: float, out: list
    ) -> None:
        rl, ledger = job.spec.rl, self.ledger
        if job.ready_gen:
            job.ready_gen.popleft()
        else:
            job.groups[group.index] = group
            job.next_group += 1
        must_load, victim = engine.reserve(rl.group_size, reserve, (job.name, group.version))
        engine.check()
        job.in_gen += 1
        self._served += 1
        job.last_served = self._served
        job.attained_tokens += job.turn_tokens
        ledger.touched.add(job.index)
        generate = Generate(
            ledger.new_id(), job.name, job.step_of(group.index), group.index, group.turn,
            engine.name, group.version, rl.group_size, group.context_tokens, rl.max_new_tokens,
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
        ledger.record("adapter_load", job, (engine.device,), running.start_s, now, event,
                      version=d.version)  # fmt: skip
        generate = self._after_load.pop(d.work_id)
        engine.loading.discard((d.job, d.version))
        ledger.idle.mark(engine.device)
        if not event.ok:  # the executor left nothing on the engine: forget the slot
            engine.release(generate.seqs, kv_reserve(generate), (d.job, d.version))
            engine.evict((d.job, d.version))
            job.in_gen -= 1
            job.attained_tokens -= job.turn_tokens
            job.ready_gen.appendleft(generate.group)
            return
        ledger.add_compute(engine.device, 1)
        ledger.due.append(lambda t, out: ledger.begin(generate, t, out, engine=engine))


def next_group(job: JobState) -> tuple[Group, int]:
    """The job's next group to generate (a continuing episode first) and its KV reserve."""
    rl = job.spec.rl
    if job.ready_gen:
        group = job.groups[job.ready_gen[0]]
    else:
        context = job.prompt_reserve_of(job.next_group)  # the group's own prompt, per sample
        group = Group(job.next_group, job.published, context_tokens=context)
    return group, group.context_tokens + rl.group_size * rl.max_new_tokens


def choose_engine(
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


def kv_reserve(generate: Generate) -> int:
    """KV tokens a group reserves on its engine: its context plus room for every sample."""
    return generate.context_tokens + generate.seqs * generate.max_new_tokens
