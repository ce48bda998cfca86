"""The training stage: which ready job trains next (the policy) and on which trainer, the swaps
that move its state there, the step itself, and the sync that publishes the new version."""

from __future__ import annotations

from marlaas.core.cluster import CapacityError, Cluster, Trainer
from marlaas.core.jobs import JobState
from marlaas.core.ledger import Ledger, Running
from marlaas.core.policies import Policy
from marlaas.core.work import Decision, SwapIn, SwapOut, Sync, Train, WorkDone


class Training:
    """Starts training steps on free trainers and takes their swaps, steps and syncs."""

    def __init__(
        self,
        jobs: dict[int, JobState],
        by_name: dict[str, JobState],
        cluster: Cluster,
        ledger: Ledger,
        policy: Policy,
    ) -> None:
        self.jobs, self.cluster, self.ledger, self.policy = jobs, cluster, ledger, policy
        """The live jobs by index (the scheduler's map, shared)."""
        self._by_name = by_name
        self.ready: set[int] = set()
        """Active jobs whose next step has all its episodes and no step running."""
        self._position = {t.name: i for i, t in enumerate(cluster.trainers)}
        self._free = set(range(len(cluster.trainers)))
        """Positions of the trainers with no activity."""

    def busy(self) -> bool:
        """Whether any trainer is swapping, training or syncing."""
        return len(self._free) < len(self.cluster.trainers)

    def swap_out_all(self, job: JobState, out: list[Decision]) -> None:
        """Take an ended job's state off every trainer that holds it."""
        self.ready.discard(job.index)
        for trainer in self.cluster.trainers:
            if job.name in trainer.resident:
                del trainer.resident[job.name]
                out.append(SwapOut(self.ledger.new_id(), job.name, trainer.name))

    def _set_activity(self, trainer: Trainer, activity: str | None) -> None:
        self.ledger.set_activity(trainer, activity)
        if activity is None:
            self._free.add(self._position[trainer.name])
        else:
            self._free.discard(self._position[trainer.name])

    # ------------------------------------------------------------------------------- start
    def start(self, now: float, out: list[Decision]) -> None:
        """Give free trainers to ready jobs in policy order (a trainer already holding the
        job's state first, else the one holding the fewest other ready jobs' states)."""
        if not self.ready or not self._free:
            return
        free = [self.cluster.trainers[i] for i in sorted(self._free)]
        ready = sorted((self.jobs[i] for i in self.ready), key=self.policy.key)
        for job in ready:
            trainer = next((t for t in free if job.name in t.resident), None)
            if trainer is None:
                others = {j.name for j in ready if j is not job}
                trainer = min(free, key=lambda t: (len(others & t.resident.keys()), t.name))
            free.remove(trainer)
            job.training = True
            self.ledger.touched.add(job.index)
            if job.name in trainer.resident:
                self._start_step(job, trainer, now, out)
            else:
                self._swap_in(job, trainer, now, out)
            if not free:
                return

    def _swap_in(self, job: JobState, trainer: Trainer, now: float, out: list[Decision]) -> None:
        """Move the job's state onto ``trainer``: off the trainer that holds it, and the least
        recently used states off ``trainer`` when it is full."""
        ledger = self.ledger
        for other in self.cluster.trainers:
            if job.name in other.resident:
                del other.resident[job.name]
                out.append(SwapOut(ledger.new_id(), job.name, other.name))
        for victim in trainer.admit(job.name):
            out.append(SwapOut(ledger.new_id(), victim, trainer.name))
        self._set_activity(trainer, "adapter_load")
        ledger.begin(SwapIn(ledger.new_id(), job.name, job.trained, trainer.name), now, out,
                     trainer=trainer)  # fmt: skip

    def _start_step(self, job: JobState, trainer: Trainer, now: float, out: list) -> None:
        if job.cancelled:  # cancelled since its state arrived: the trainer stays free
            job.training = False
            return
        step = job.trained
        # in group order, not the order they finished in: a step's samples, and so its
        # trained weights to the last bit, do not depend on the schedule
        groups = sorted(job.finished[step], key=lambda g: g.index)
        staleness = step - min(g.version for g in groups)
        if staleness > job.max_staleness:
            raise CapacityError(f"{job.name}: step {step} would train {staleness} versions stale")
        tokens = sum(g.context_tokens for g in groups)
        shared = (job.group_size - 1) * sum(job.lengths.prompt(g.index) for g in groups)
        ledger = self.ledger
        decision = Train(
            ledger.new_id(), job.name, step, trainer.name, tuple(d.name for d in trainer.devices),
            tuple(g.index for g in groups), job.group_size * len(groups), tokens,
            staleness, step + 1, tuple(job.dropped.get(step, ())), shared,
        )  # fmt: skip
        self._set_activity(trainer, "train")
        trainer.touch(job.name)
        ledger.touched.add(job.index)  # its service (a policy key) grows
        for device in trainer.devices:
            ledger.add_compute(device, 1)
        job.attained_tokens += tokens
        ledger.begin(decision, now, out, trainer=trainer)

    def _start_sync(self, job: JobState, trainer: Trainer, now: float, out: list) -> None:
        if job.cancelled:  # cancelled since its step ended: nothing to publish
            self._set_activity(trainer, None)
            job.training = False
            return
        sync = Sync(self.ledger.new_id(), job.name, job.trained, trainer.name)
        self.ledger.begin(sync, now, out, trainer=trainer)

    # ------------------------------------------------------------------------------- events
    def on_swap(self, d: SwapIn, running: Running, event: WorkDone, now: float) -> None:
        """The job's state arrived: its step starts next round (failed: the slot is freed)."""
        job, trainer, ledger = self._by_name[d.job], running.trainer, self.ledger
        assert trainer is not None
        ledger.record("adapter_load", job, trainer.devices, running.start_s, now, event,
                      version=d.version)  # fmt: skip
        self._set_activity(trainer, None)
        if not event.ok:  # the executor left nothing on the trainer
            trainer.resident.pop(job.name, None)
            job.training = False
            return
        if job.cancelled:
            job.training = False
            return
        ledger.due.append(lambda t, out: self._start_step(job, trainer, t, out))

    def on_train(self, d: Train, running: Running, event: WorkDone, now: float) -> None:
        """A step finished: the new version is synced next round (failed: trained again)."""
        job, trainer, ledger = self._by_name[d.job], running.trainer, self.ledger
        assert trainer is not None
        for device in trainer.devices:
            ledger.add_compute(device, -1)
        ledger.record(
            "train", job, trainer.devices, running.start_s, now, event, step=d.step,
            seqs=d.seqs, tokens=d.tokens, version=d.version_out, staleness=d.staleness,
            prompt_tokens=event.prompt_tokens,
        )  # fmt: skip
        if not event.ok or job.cancelled:
            self._set_activity(trainer, None)
            job.training = False
            return
        job.trained += 1
        del job.finished[d.step]
        job.dropped.pop(d.step, None)
        self._set_activity(trainer, "weight_sync")
        ledger.due.append(lambda t, out: self._start_sync(job, trainer, t, out))

    def on_sync(self, d: Sync, running: Running, event: WorkDone, now: float) -> None:
        """The new version is published (failed: published again, the trainer stays on it)."""
        job, trainer, ledger = self._by_name[d.job], running.trainer, self.ledger
        assert trainer is not None
        ledger.record("sync", job, trainer.devices, running.start_s, now, event,
                      step=d.version - 1, version=d.version)  # fmt: skip
        if job.cancelled:
            self._set_activity(trainer, None)
            job.training = False
            return
        if not event.ok:
            ledger.due.append(lambda t, out: self._start_sync(job, trainer, t, out))
            return
        self._set_activity(trainer, None)
        job.training = False
        job.published = d.version
        if job.published >= job.steps:
            job.done = True
            job.finish_s = now
