"""The simulated world: every decision's work as SimPy timeouts sized by the cost model.

One ``simpy.Environment``, no globals. Engines are :class:`EngineModel` instances that
schedule a wake-up for their next finishing group; a newer wake-up empties the older one, and
the emptied ones leave SimPy's heap once as many were emptied as a quarter of the heap holds.
Environments, adapter loads, swaps, training steps and syncs are plain timeouts (on a
shared processor an adapter load also pauses the decoding engines:
:meth:`SimPyExecutor._load_pauses_engines`). Each timeout is a small :class:`Due` put on
SimPy's event heap the way SimPy schedules its own (the same time, priority and id, so the
same order), without a ``simpy.Timeout`` per event: an object with an attribute dict, built
by Python code, and most of the objects a run has in flight. All randomness is common random
numbers seeded by the run's seed (:mod:`marlaas.sim.turn_draws`: a group turn's response
lengths and environment waits are the same under every schedule), so a workload and seed
give one event log. A replay passes a :class:`~marlaas.sim.recording.Recording` of a real
run: each group turn then generates what it generated for real, each environment step takes
what it took, and the groups the real run dropped as all alike (rl.resample_alike) are
dropped again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heapify, heappop, heappush
from typing import Any

import simpy

from marlaas.core.cluster import Cluster
from marlaas.core.job_spec import JobSpec
from marlaas.core.work import (
    AbortGeneration,
    AdmitJob,
    Decision,
    EnvStep,
    EvictAdapter,
    Generate,
    LoadAdapter,
    ReleaseJob,
    SwapIn,
    SwapOut,
    Sync,
    Train,
    WorkDone,
)
from marlaas.drive.executor import Completions
from marlaas.sim.cost_model import CostModel, train_work
from marlaas.sim.engine_model import EngineModel
from marlaas.sim.recording import Recording
from marlaas.sim.turn_draws import TurnDraws


class _Step:
    """A training step on an overlapped processor: its work left at ``since_s`` in seconds of
    the step alone, the rate it progresses at since then (1 alone, 1 / overlap_train_slowdown
    while engines decode), and its pending end."""

    __slots__ = ("done", "due", "left_s", "rate", "since_s")

    def __init__(self, left_s: float, since_s: float, done: WorkDone) -> None:
        self.left_s, self.since_s, self.rate, self.done = left_s, since_s, 1.0, done
        self.due: Due | None = None


class Due:
    """A timeout on SimPy's event heap: the callbacks to run when it is due (None once run;
    emptied when superseded) and its value."""

    def __init__(self, callback: Callable[[Any], None], value: Any) -> None:
        self.callbacks: list[Callable[[Any], None]] | None = [callback]
        self.value = value


class SimPyExecutor:
    """Enacts decisions on a model of the cluster: engines (continuous batching, multi-LoRA
    cost), environments (latency distributions), trainers (tokens per second), syncs."""

    def __init__(
        self,
        cluster: Cluster,
        cost: CostModel | None = None,
        seed: int = 0,
        recording: Recording | None = None,
    ) -> None:
        self.seed = seed
        self.recording = recording
        self.cost = cost or CostModel()
        self.env = simpy.Environment()
        self.engines = {e.name: EngineModel(self.cost) for e in cluster.engines}
        self.colocated = cluster.colocated
        self.shared_compute = cluster.shared_compute
        self.overlap = cluster.overlap
        """Training steps run while engines decode on the shared processor, each slowed."""
        self._stepping: dict[int, _Step] = {}
        """Training steps in progress on an overlapped processor, by work id."""
        self._decoding = False
        """Whether an engine decodes (on an overlapped processor, as of the last change)."""
        self.step_devices = {t.name: cluster.step_devices(t) for t in cluster.trainers}
        """Each trainer's devices a step is divided over (one on a shared processor)."""
        self.reuses_sampling_logprobs = all(
            e.spec.reuses_sampling_logprobs for e in cluster.engines
        )
        """An on-policy step makes no forward pass for its starting log-probs (EngineSpec)."""
        self.steps = 0
        """SimPy events processed."""
        self._jobs: dict[str, JobSpec] = {}
        """The admitted jobs' specs (from AdmitJob to ReleaseJob)."""
        self._draws: dict[str, TurnDraws] = {}
        """Each admitted job's response lengths and environment waits per group turn."""
        self._tokens: dict[int, tuple[int, int]] = {}
        """(tokens, longest sample's tokens) each running generation will produce, by id."""
        self._done: list[WorkDone] = []
        self._wakes: dict[str, Due] = {}
        """Each engine's pending wake-up (an older one is emptied of its callback)."""
        self._superseded = 0
        """Wake-ups emptied since the event heap was last cleared of them (some of them may
        have been popped since)."""
        self._fire = {name: self._fire_for(name) for name in self.engines}
        """Each engine's wake-up callback."""
        self._starts: dict[type, Callable[[Any, float], None]] = {
            Generate: self._start_generate, EnvStep: self._start_env,
            LoadAdapter: self._start_load, SwapIn: self._start_swap, Train: self._start_train,
            Sync: self._start_sync, EvictAdapter: self._start_nothing,
            SwapOut: self._start_nothing, AdmitJob: self._admit, ReleaseJob: self._release,
            AbortGeneration: self._abort,
        }  # fmt: skip

    # ----------------------------------------------------------------------------- protocol
    def start(self, decision: Decision, now: float) -> None:
        """Schedule the decision's completion by the cost model."""
        start = self._starts.get(type(decision))
        if start is None:
            raise TypeError(f"unknown decision {decision!r}")
        start(decision, now)

    def _start_load(self, d: LoadAdapter, now: float) -> None:
        wait = self.cost.adapter_load_wait_iterations * self._busiest_iteration_s(d, now)
        self._after(self.cost.adapter_load_s + wait, WorkDone(d.work_id))
        if self.shared_compute and self.cost.adapter_load_s > 0:
            self._schedule(wait, self._load_pauses_engines, self.cost.adapter_load_s)

    def _load_pauses_engines(self, due: Due) -> None:
        """An adapter load on a shared processor begins (its wait for a step is over): the
        real executor makes it on the one thread every in-process engine steps on, between
        two steps (vLLM adds a LoRA between steps), so the decoding engines wait for it.
        Approximations: the load itself does not wait for a pause already under way (two
        loads at once pause the engines twice as long and end together), an engine that
        does not decode yet is not held back, and engines in processes of their own (Ray's
        actors), which the simulator also has take turns, are paused alike."""
        self._pause_running(self.env.now, due.value)

    def _pause_running(self, now: float, seconds: float, but: str | None = None) -> None:
        """Every decoding engine but ``but`` waits ``seconds`` more, from ``now`` or from the
        end of a pause under way: another engine's prefill or an adapter load on the thread
        they take turns on."""
        for name, engine in self.engines.items():
            if name != but and engine.running:
                engine.pause(now, seconds)
                self._wake(name)

    def _start_swap(self, d: SwapIn, now: float) -> None:
        self._after(self.cost.trainer_swap_s, WorkDone(d.work_id))

    def _start_sync(self, d: Sync, now: float) -> None:
        switch = self.cost.colocated_switch_s if self.colocated else 0.0
        self._after(self.cost.sync_s + switch, WorkDone(d.work_id))

    def _start_nothing(self, d: EvictAdapter | SwapOut, now: float) -> None:
        """Evictions and swap-outs cost nothing here."""

    def _abort(self, d: AbortGeneration, now: float) -> None:
        """A cancelled job's group stops decoding at ``now``: its sequences leave the
        engine's batch (the others go on at the smaller batch's pace) and its completion
        comes back at ``now`` with no tokens, as the real executor's (an aborted request's
        tokens are not returned): the event log and the core's token rate
        (``backlog.generated``, which backlog policies read) are the same in both worlds.
        A group whose completion is already on its way is reported as it would have been:
        one that had nothing to generate, or whose engine's wake-up reported it, is left; one
        whose last sample ended at ``now``, its wake-up of that time not yet run, comes back
        with every token it generated (it finished before its abort)."""
        whole = self._tokens.pop(d.generate, None)
        if whole is None:
            return
        made = self.engines[d.engine].abort(now, d.generate)
        tokens, longest = whole if made == whole else (0, 0)
        self._after(0.0, WorkDone(d.generate, tokens=tokens, longest_tokens=longest))
        pending = self._wakes.get(d.engine)
        if pending is not None and pending.callbacks and not self.engines[d.engine].groups:
            pending.callbacks.clear()  # no group left to wake it for
            self._superseded += 1
        self._wake(d.engine)
        if self.shared_compute:
            self._share_processor(now)

    def _admit(self, d: AdmitJob, now: float) -> None:
        """A job's state: its spec and its draws, seeded as the core seeds its prompts."""
        self._jobs[d.job] = d.spec
        self._draws[d.job] = TurnDraws(d.spec, self.seed, d.index)

    def _release(self, d: ReleaseJob, now: float) -> None:
        del self._jobs[d.job], self._draws[d.job]

    def now(self) -> float:
        """The simulated clock [s]."""
        return self.env.now

    def wake(self) -> None:
        """Nothing waits for real here (the driver reads its inbox before each wait)."""

    def next_at(self) -> float | None:
        """When the next simulated event is due [s] (None: nothing is, ever)."""
        queue = self.env._queue
        at = queue[0][0] if queue else math.inf
        return None if at == math.inf else at

    def wait(self, until: float | None) -> Completions | None:
        """Run SimPy to the next completion, or to ``until`` [s] if that comes first.

        The loop is SimPy's ``Environment.step`` inline (its event heap popped here): every
        event the simulator schedules is a :class:`Due`, so a step only has to set the clock
        and run the event's callbacks. SimPy itself only runs the clock on to ``until`` when
        nothing is due before it."""
        env, done = self.env, self._done
        queue, steps = env._queue, 0
        limit = math.inf if until is None else until
        while not done:
            if not queue or (at := queue[0][0]) > limit or at == math.inf:
                self.steps += steps
                if until is not None and until > env.now:
                    env.run(until=until)
                return None
            entry = heappop(queue)  # (time, priority, id, event); indexed, not unpacked:
            env._now, event = entry[0], entry[3]  # unpacking an untyped tuple iterates it
            callbacks, event.callbacks = event.callbacks, None
            for callback in callbacks:
                callback(event)
            steps += 1
        self.steps += steps
        events = done[:]
        done.clear()  # the same list: the engines' wake-ups append to it
        return env.now, events

    # ----------------------------------------------------------------------------- work
    def _after(self, delay: float, done: WorkDone) -> None:
        self._schedule(delay, self._collect, done)

    def _schedule(self, delay: float, callback: Callable[[Any], None], value: Any) -> Due:
        """Call ``callback(due)`` in ``delay`` [s], as ``env.timeout(delay, value)`` with that
        callback would: the heap entry ``Environment.schedule`` makes for a Timeout."""
        env = self.env
        due = Due(callback, value)
        heappush(env._queue, (env._now + delay, 1, next(env._eid), due))  # 1: simpy.NORMAL
        return due

    def _collect(self, event: Due) -> None:
        """A timeout of :meth:`_after` fired: its work is done."""
        self._done.append(event.value)

    def _start_generate(self, d: Generate, now: float) -> None:
        cap, shortest = d.max_new_tokens, 1
        drawn = self._draws[d.job].responses(d.group, d.turn, d.seqs)
        prompt = d.context_tokens / d.seqs
        if self.recording is not None:
            key = (d.job, d.group, d.turn)
            drawn = self.recording.lengths(key, d.seqs, drawn)
            prompt = self.recording.prompt_tokens.get(key, prompt)
            shortest = 0  # a real turn may have had nothing left to generate
        # rounded half to even (as numpy's rint), then clipped to [shortest, max_new_tokens]
        lengths = [
            r if shortest <= (r := round(x)) <= cap else (shortest if r < shortest else cap)
            for x in drawn.tolist()
        ]
        if not any(lengths):  # nothing to generate: done at once
            self._after(0.0, WorkDone(d.work_id, tokens=0, longest_tokens=0))
            return
        engine = self.engines[d.engine]
        shared = min(d.shared_tokens, prompt)  # a recorded prompt may be shorter
        prefill_s = engine.admit(now, d.work_id, lengths, prompt, (d.job, d.version), shared)
        self._tokens[d.work_id] = (sum(lengths), max(lengths))
        self._wake(d.engine)
        if self.shared_compute:
            self._pause_running(now, prefill_s, but=d.engine)  # they wait for its prefill
            self._share_processor(now)

    def _busiest_iteration_s(self, d: LoadAdapter, now: float) -> float:
        """The longest decode iteration running on the load's processor: its own engine, or
        every engine when they share one processor [s]."""
        if not self.cost.adapter_load_wait_iterations:
            return 0.0
        names = self.engines if self.shared_compute else [d.engine]
        return max(self.engines[name].iteration_s(now) for name in names)

    def _wake(self, name: str) -> None:
        """Schedule the engine's next group completion, superseding any earlier wake-up: the
        earlier timeout is emptied of its callback (popped as an event that does nothing, or
        taken out of the heap first by :meth:`_drop_superseded`)."""
        when = self.engines[name].next_group_done_s()
        if when is None:
            return
        pending = self._wakes.get(name)
        env = self.env
        if pending is not None and pending.callbacks:
            pending.callbacks.clear()  # superseded
            self._superseded += 1
            if 4 * self._superseded > len(env._queue):
                self._drop_superseded()
        now = env.now
        delay = when - now if when > now else 0.0
        self._wakes[name] = self._schedule(delay, self._fire[name], None)

    def _drop_superseded(self) -> None:
        """Take the emptied wake-ups out of SimPy's event heap (the same order for the rest:
        entries are ordered by time, priority and a unique id): they would only be popped."""
        queue = self.env._queue
        queue[:] = [entry for entry in queue if entry[3].callbacks]
        heapify(queue)
        self._superseded = 0

    def _fire_for(self, name: str):
        """The callback of engine ``name``'s wake-up: report the groups that finished."""
        engine, tokens, done, env = self.engines[name], self._tokens, self._done, self.env

        def fire(event) -> None:
            now = env.now
            finished = engine.pop_finished(now)
            for work_id in finished:
                total, longest = tokens.pop(work_id)
                done.append(WorkDone(work_id, tokens=total, longest_tokens=longest))
            self._wake(name)
            if finished and self.shared_compute:
                self._share_processor(now)

        return fire

    def _share_processor(self, now: float) -> None:
        """On one shared processor the engines take turns, step by step (the real executor
        runs every in-process engine on one thread): while several decode, an iteration of
        each takes all of theirs (each engine's own iteration time, summed), and a prefill
        pauses the others (:meth:`_start_generate`), as an adapter load pauses them all
        (:meth:`_load_pauses_engines`); overlapped, decode and prefill take
        ``overlap_decode_slowdown`` times as long again while a training step runs, and a
        step ``overlap_train_slowdown`` times as long while any engine decodes."""
        if not self.shared_compute:
            return
        alone: dict[str, float] = {}
        for name, engine in self.engines.items():
            if engine.running:
                seconds = engine.iteration_s(now)  # advanced to now: its last may end now
                if engine.running:
                    alone[name] = seconds / engine.slowdown
        busy = list(alone)
        together = sum(alone.values())
        overlap = self.cost.overlap_decode_slowdown if self._stepping else 1.0
        for name in busy:
            engine = self.engines[name]
            factor = (together / alone[name] if len(busy) > 1 else 1.0) * overlap
            if engine.slowdown != factor or engine.prefill_slowdown != overlap:
                engine.set_slowdown(now, factor, overlap)
                self._wake(name)
        decoding = bool(busy)
        if decoding != self._decoding:
            self._decoding = decoding
            rate = 1.0 / self.cost.overlap_train_slowdown if decoding else 1.0
            for step in self._stepping.values():
                self._retime(step, now, rate)

    def _start_env(self, d: EnvStep, now: float) -> None:
        spec = self._jobs[d.job].env
        latency = max(self._draws[d.job].env_waits(d.group, d.turn, d.seqs).tolist())
        if self.recording is not None:
            latency = self.recording.env_s.get((d.job, d.group, d.turn), latency)
        added = 0 if d.last_turn else spec.observation_tokens * d.seqs
        alike = False
        if d.last_turn:
            if self.recording is not None:
                alike = (d.job, d.group) in self.recording.resampled
            else:
                alike = self._draws[d.job].alike(d.group)
        self._after(latency, WorkDone(d.work_id, tokens=added, alike=alike))

    def _start_train(self, d: Train, now: float) -> None:
        spec, cost = self._jobs[d.job], self.cost
        shared = d.shared_tokens if cost.train_shares_prompts else 0
        reused = d.staleness == 0 and self.reuses_sampling_logprobs  # no proximal pass
        compute = train_work(cost, d.tokens - shared, spec.lora_rank, spec.rl.minibatches,
                             proximal_pass=not reused)  # fmt: skip
        devices = self.step_devices[d.trainer]  # data-parallel; one processor: no speed-up
        duration = cost.train_overhead_s + compute / (cost.train_tokens_per_s * devices)
        unread = shared if cost.train_shares_prompts else -1  # -1: the record as before it
        done = WorkDone(d.work_id, tokens=d.tokens, prompt_tokens=unread)
        if not self.overlap:
            self._after(duration, done)
            return
        step = self._stepping[d.work_id] = _Step(duration, now, done)
        self._retime(step, now, 1.0 / cost.overlap_train_slowdown if self._decoding else 1.0)
        self._share_processor(now)  # the engines decode slower from now

    def _retime(self, step: _Step, now: float, rate: float) -> None:
        """Move an overlapped step's end for its new rate (its work done so far kept)."""
        step.left_s -= (now - step.since_s) * step.rate
        step.since_s, step.rate = now, rate
        pending = step.due
        if pending is not None and pending.callbacks:
            pending.callbacks.clear()  # superseded
            self._superseded += 1
        step.due = self._schedule(max(step.left_s, 0.0) / rate, self._end_step, step)

    def _end_step(self, event: Due) -> None:
        """An overlapped step's work is done: the engines decode at their own pace again."""
        step = event.value
        del self._stepping[step.done.work_id]
        self._done.append(step.done)
        self._share_processor(self.env.now)
