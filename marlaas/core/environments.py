"""The environment stage: finished turns wait for environment workers (one per sample), in
policy order; a step either ends the episodes or sends the group back to generation."""

from __future__ import annotations

from marlaas.core.jobs import JobState
from marlaas.core.least import Least
from marlaas.core.ledger import Ledger, Running
from marlaas.core.policies import Policy
from marlaas.core.policy_queue import PolicyQueue
from marlaas.core.work import Decision, EnvStep, WorkDone


class Environments:
    """Starts environment steps while workers are free and takes their results."""

    def __init__(
        self,
        jobs: dict[int, JobState],
        by_name: dict[str, JobState],
        ledger: Ledger,
        policy: Policy,
        workers: int,
    ) -> None:
        self.jobs, self.ledger, self.policy = jobs, ledger, policy
        """The live jobs by index (the scheduler's map, shared)."""
        self._by_name = by_name
        self.workers = workers
        """Environment workers in all."""
        self.free = workers
        """Environment workers not in use."""
        self.ready: set[int] = set()
        """Active jobs with groups waiting for an environment step."""
        self._queue = PolicyQueue()
        """The ready jobs in policy order (their keys as of the last start with free
        workers, or since: see _stale)."""
        self._stale: set[int] = set()
        """Ready jobs whose key may have moved (or that are not queued yet) since the last
        start with free workers: they are queued with their key then, not at every change
        (while the workers are all busy, as they often are, no order is needed)."""
        self._keys: dict[int, tuple] = {}
        """Stale jobs' keys as the scheduler computed them at their last change (given to
        set_ready): the key at the next start too, unless the job changed since (it is then
        in ``ledger.touched``, and keyed again)."""
        self._group_sizes = Least()
        """The admitted jobs' group sizes: no group starts with fewer free workers than the
        smallest."""

    def add_job(self, job: JobState) -> None:
        """A job was admitted: count its group size in."""
        self._group_sizes.add(job.group_size)

    def remove_job(self, job: JobState) -> None:
        """A job ended: forget it (it has no step in flight)."""
        self.set_ready(job.index, False)
        self._group_sizes.remove(job.group_size)

    def set_ready(self, index: int, ready: bool, key: tuple | None = None) -> None:
        """The job changed: whether it has groups waiting for an environment step (``key``:
        its policy key now, if the caller has it and it moves only when the job changes)."""
        if ready:
            self.ready.add(index)
            self._stale.add(index)
            if key is None:
                self._keys.pop(index, None)
            else:
                self._keys[index] = key
        elif index in self.ready:
            self.ready.discard(index)
            self._stale.discard(index)
            self._keys.pop(index, None)
            self._queue.discard(index)

    def start(self, now: float, out: list[Decision]) -> None:
        """Start the waiting groups' steps, in policy order, while workers are free."""
        smallest = self._group_sizes.value
        if not self.ready or self.free < smallest:
            return
        queue, policy, jobs, stale, keys = (
            self._queue,
            self.policy,
            self.jobs,
            self._stale,
            self._keys,
        )
        touched = self.ledger.touched
        for index in touched:  # keys may have moved since the jobs' refresh
            if index in self.ready:
                stale.add(index)
        for index in stale:
            key = None if index in touched else keys.get(index)
            queue.put(index, policy.key(jobs[index]) if key is None else key)
        stale.clear()
        keys.clear()
        visited = []
        while self.free >= smallest and (popped := queue.pop()) is not None:
            visited.append(popped)
            self.start_job(self.jobs[popped], now, out)
        for index in visited:
            if self.jobs[index].ready_env:
                queue.put(index, policy.key(self.jobs[index]))

    def start_job(self, job: JobState, now: float, out: list[Decision]) -> None:
        """Start ``job``'s waiting groups' steps, oldest first, while workers are free."""
        seqs = job.spec.rl.group_size
        while job.ready_env and self.free >= seqs:
            group = job.groups[job.ready_env.popleft()]
            self.free -= seqs
            job.in_env += 1
            self.ledger.touched.add(job.index)
            last = group.turn == job.spec.rl.turns - 1
            step = EnvStep(
                self.ledger.new_id(), job.name, job.step_of(group.index), group.index,
                group.turn, seqs, last,
            )  # fmt: skip
            self.ledger.begin(step, now, out)

    def on_env(self, d: EnvStep, running: Running, event: WorkDone, now: float) -> None:
        """A group's step finished: its episodes end, or its next turn waits for generation
        (failed: the step is taken again)."""
        job = self._by_name[d.job]
        self.free += d.seqs
        job.in_env -= 1
        group = job.groups[d.group]
        dropped = (
            event.ok and event.alike and d.last_turn and not job.cancelled
            and job.drop_alike(d.group)
        )  # fmt: skip
        self.ledger.record(
            "env", job, (), running.start_s, now, event, step=d.step, group=d.group,
            turn=d.turn, seqs=d.seqs, tokens=event.tokens, version=group.version,
            reward=event.reward, resampled=dropped,
        )  # fmt: skip
        if job.cancelled:
            job.groups.pop(d.group, None)
            return
        if not event.ok:
            job.ready_env.appendleft(d.group)
            return
        group.context_tokens += event.tokens
        if dropped:
            del job.groups[d.group]
        elif d.last_turn:
            job.finished.setdefault(d.step, []).append(job.groups.pop(d.group))
        else:
            group.turn += 1
            job.ready_gen.append(d.group)
