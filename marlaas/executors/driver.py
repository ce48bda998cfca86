"""The asyncio driver: the scheduler core over real generation, environments and training.

The same loop as the SimPy driver (marlaas.sim.simulator), with real work instead of timeouts::

    decisions = scheduler.decide(now)      -> one asyncio task per decision:
        Generate    -> generator.generate(job, version, prompt or contexts)
        EnvStep     -> env.step for every sample of the group, concurrently
        LoadAdapter -> publish that adapter version to the generator if not yet
        SwapIn      -> nothing: the one PeftTrainer holds every job's adapter and optimizer
        Train       -> trainer.train_step in a worker thread (GRPO, clipped importance ratio)
        Sync        -> save the new version in the AdapterStore, publish it to the generator
    event = next finished task             -> scheduler.on_event(WorkDone(...), its end time)

The clock (``time.monotonic()`` minus the loop's start) is read here and nowhere in the core.
Adapter versions the scheduler knows (0, 1, ...) are the trainer's versions minus the job's
resume offset; vLLM's integer LoRA ids stay inside the generator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

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
from marlaas.envs import make_env
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backends import (
    make_generator,
    max_positions,
    model_dir_of,
    resolve_backend,
)
from marlaas.executors.episodes import ChatFormat, GroupEpisode, add_completions, start_group
from marlaas.executors.episodes import step_envs as run_env_steps
from marlaas.executors.gate import ComputeGate
from marlaas.executors.resume import remaining_workload, resume_offsets

log = logging.getLogger("marlaas.real")


class RealRunError(RuntimeError):
    """A real run that cannot go on (a piece of work failed too often, or it stalled)."""


@dataclass(frozen=True, slots=True)
class RewardPoint:
    """One training step of one job: the reward curve's point and the trainer's statistics."""

    job: str
    tenant: str
    step: int
    """Training step (adapter version before it), counting resumed steps."""
    mean_reward: float
    """Mean episode reward of the step's samples."""
    time_s: float
    """When the step finished [s since the run's start]."""
    staleness: int
    """Largest version lag of a sample in the batch, measured by the trainer [versions]."""
    max_staleness: int
    """The job's bound [versions]."""
    mean_ratio: float
    clip_fraction: float
    loss: float
    samples: int


@dataclass
class RealResult:
    """What a real run produced (the counterpart of SimResult)."""

    records: list[WorkRecord]
    makespan_s: float
    """Wall-clock time from the loop's start to the last published adapter version [s]."""
    job_finish_s: dict[str, float | None]
    policy: str
    seed: int
    wall_s: float
    """Wall-clock time including model loading [s]."""
    settings: dict
    rewards: list[RewardPoint]
    backend: str
    offsets: dict[str, int] = field(default_factory=dict)
    """Versions each job had already trained before this run (``--resume``)."""
    failures: int = 0
    """Pieces of work that failed and were retried."""


class RealRun:
    """Train every job of ``workload`` for real, scheduled by ``policy`` (name or object).

    ``out_dir`` holds the adapter store (``out_dir/adapters``). ``generator`` and ``trainer``
    may be passed in (tests share one engine); otherwise they are built from the jobs'
    ``model_dir`` (``backend``: auto = vLLM when it imports, else HF). With ``resume`` each job
    continues from its newest saved adapter version and runs only its remaining steps.
    ``chat_template``: wrap prompts and observations in the tokenizer's chat template
    (None: when it has one). ``exclusive_compute``: never generate while a training step
    computes (one shared CPU; see marlaas.executors.gate).
    """

    def __init__(
        self,
        workload: Workload,
        policy: Policy | str | None = None,
        *,
        out_dir: str | Path,
        backend: str = "auto",
        seed: int | None = None,
        resume: bool = False,
        generator=None,
        trainer=None,
        base_dir: Path | None = None,
        micro_batch_size: int = 16,
        max_model_len: int | None = None,
        max_failures: int = 3,
        chat_template: bool | None = None,
        exclusive_compute: bool = True,
        progress: bool = True,
    ) -> None:
        self.workload = workload
        self.seed = workload.seed if seed is None else seed
        self.store = AdapterStore(Path(out_dir) / "adapters")
        self.offsets = resume_offsets(self.store, workload) if resume else {}
        self.scheduler = Scheduler(remaining_workload(workload, self.offsets), policy)
        self.backend = "external" if generator is not None else resolve_backend(backend)
        self.model_dir = model_dir_of(workload, base_dir)
        limit = max_positions(self.model_dir)
        self.max_model_len = min(max_model_len or limit, limit)
        self._gen, self._own_gen = generator, generator is None
        self._trainer, self.micro_batch_size = trainer, micro_batch_size
        self.max_failures, self.progress = max_failures, progress
        self.chat_template = chat_template
        self.exclusive_compute = exclusive_compute
        self._specs = {j.name: j for j in workload.jobs}
        self._index = {j.name: i for i, j in enumerate(workload.jobs)}
        self._episodes: dict[tuple[str, int], GroupEpisode] = {}
        self._group_version: dict[tuple[str, int], int] = {}
        """Trainer version of every group started and not yet trained (adapters in use)."""
        self._publishing: dict[tuple[str, int], asyncio.Task] = {}
        self._chores: set[asyncio.Task] = set()
        self._fails: dict[tuple[str, str], int] = defaultdict(int)
        self.failures = 0
        self.rewards: list[RewardPoint] = []
        self._t0 = 0.0

    # ----------------------------------------------------------------------------- setup
    def run(self) -> RealResult:
        """Run to completion (a new event loop) and return the records and figures."""
        return asyncio.run(self.run_async())

    async def run_async(self) -> RealResult:
        """Run to completion inside the running event loop."""
        started = time.monotonic()
        await self._setup()
        try:
            end = await self._loop()
        finally:
            await self._teardown()
        records = self.scheduler.finish(end)
        sched = self.scheduler
        return RealResult(
            records=records, makespan_s=end,
            job_finish_s={j.name: j.finish_s for j in sched.jobs}, policy=sched.policy.name,
            seed=self.seed, wall_s=time.monotonic() - started,
            settings=sched.scheduling.model_dump(), rewards=list(self.rewards),
            backend=self.backend, offsets=dict(self.offsets), failures=self.failures,
        )  # fmt: skip

    async def _setup(self) -> None:
        if self._trainer is None:
            from marlaas.executors.peft_trainer import PeftTrainer

            self._trainer = await asyncio.to_thread(
                PeftTrainer, self.model_dir, micro_batch_size=self.micro_batch_size
            )
        if self._gen is None:
            self._gen = make_generator(
                self.backend, self.model_dir, self.workload, self.max_model_len, self.seed
            )
        self._gate = ComputeGate() if self.exclusive_compute else None
        self.fmt = ChatFormat(self._gen.tokenizer, self.chat_template)
        for job in self.scheduler.jobs:
            spec, offset = job.spec, self.offsets.get(job.name, 0)
            rank = spec.lora_rank
            if offset:
                self._trainer.add_job(
                    job.name, rank, 2 * rank, spec.rl.learning_rate,
                    init_dir=self.store.path(job.name, offset), version=offset,
                )  # fmt: skip
            else:
                self._trainer.add_job(
                    job.name, rank, 2 * rank, spec.rl.learning_rate, seed=self.seed
                )
                self.store.save_from(self._trainer, job.name, overwrite=True)
            self.store.clean_partial(job.name)

    async def _teardown(self) -> None:
        await asyncio.gather(*self._chores, return_exceptions=True)
        if self._own_gen:
            await self._gen.close()
            return
        for key, task in list(self._publishing.items()):  # a shared engine: leave it clean
            if task.done() and task.exception() is None:
                await self._gen.retire(*key)
        self._publishing.clear()

    # ----------------------------------------------------------------------------- loop
    def _now(self) -> float:
        return time.monotonic() - self._t0

    async def _loop(self) -> float:
        """The driver loop; returns the time of the last event [s]."""
        sched = self.scheduler
        total = sum(j.steps for j in sched.jobs)
        bar = tqdm(total=total, unit="step", desc="training", disable=not self.progress)
        self._bar, self._t0 = bar, time.monotonic()
        pending: dict[asyncio.Task, Decision] = {}
        last = now = 0.0
        try:
            while not sched.done:
                for decision in sched.decide(now):
                    pending[self._dispatch(decision)] = decision
                if sched.done:
                    break
                arrival = sched.next_arrival(now)
                if not pending and arrival is None:
                    stuck = [j.name for j in sched.jobs if not j.done]
                    raise RealRunError(f"the run stalled at t={now:.1f} s; unfinished: {stuck}")
                timeout = None if arrival is None else max(arrival - self._now(), 0.0)
                done, _ = await asyncio.wait(
                    pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                finished = sorted(done, key=lambda t: (t.result()[1], t.result()[0].work_id))
                # Each event is followed by a decision round at its own time, as in the
                # simulator, so that a device freed by an event is busy or idle from that
                # instant on (the log partitions) however many tasks one wait returned.
                for i, task in enumerate(finished):
                    event, end = task.result()
                    decision = pending.pop(task)
                    last = max(last, end)
                    sched.on_event(event, last)
                    self._after(decision, event)
                    if i < len(finished) - 1 and not sched.done:
                        for follow_up in sched.decide(last):
                            pending[self._dispatch(follow_up)] = follow_up
                now = last if finished else max(self._now(), last)
        except BaseException:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            raise
        finally:
            bar.close()
        return last

    def _dispatch(self, d: Decision) -> asyncio.Task:
        """Start a decision's work; bookkeeping that must not wait happens here."""
        if isinstance(d, Generate) and d.turn == 0:
            self._group_version.setdefault((d.job, d.group), self._version(d.job, d.version))
        return asyncio.create_task(self._work(d))

    async def _work(self, d: Decision) -> tuple[WorkDone, float]:
        handler = {
            Generate: self._generate, EnvStep: self._env_step, LoadAdapter: self._load,
            SwapIn: self._swap_in, Train: self._train, Sync: self._sync,
        }[type(d)]  # fmt: skip
        try:
            tokens, reward = await handler(d)
        except Exception as exc:
            log.warning("%s of %s failed: %r", type(d).__name__, d.job, exc, exc_info=exc)
            self._count_failure(d, exc)
            return WorkDone(d.work_id, ok=False), self._now()
        self._fails.pop((type(d).__name__, d.job), None)
        return WorkDone(d.work_id, tokens=int(tokens), reward=reward), self._now()

    def _count_failure(self, d: Decision, exc: Exception) -> None:
        self.failures += 1
        key = (type(d).__name__, d.job)
        self._fails[key] += 1
        if self._fails[key] > self.max_failures:
            raise RealRunError(
                f"{key[0]} of job {d.job!r} failed {self._fails[key]} times in a row: {exc!r}"
            ) from exc

    def _after(self, d: Decision, event: WorkDone) -> None:
        """Housekeeping once the scheduler knows: retire adapter versions nobody uses now."""
        if isinstance(d, Sync) and event.ok:
            latest = self._version(d.job, d.version)
            keep = {v for (job, _), v in self._group_version.items() if job == d.job} | {latest}
            for job, version in list(self._publishing):
                if job == d.job and version not in keep:
                    self._chore(self._retire(job, version))

    def _chore(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    # ----------------------------------------------------------------------------- work
    def _version(self, job: str, version: int) -> int:
        """The trainer's version for the scheduler's ``version`` of ``job``."""
        return self.offsets.get(job, 0) + version

    def _group_seed(self, job: str, group: int) -> int:
        """Seed of a group's prompt; resumed runs continue with new prompts."""
        spec = self._specs[job]
        absolute = self.offsets.get(job, 0) * spec.rl.prompts_per_step + group
        return (self.seed * 1_000_003 + self._index[job] * 10_007 + absolute) % 2**31

    async def _generate(self, d: Generate) -> tuple[int, float]:
        spec, version = self._specs[d.job], self._version(d.job, d.version)
        await self._publish(d.job, version)
        key, rl = (d.job, d.group), spec.rl
        seed = self._group_seed(d.job, d.group) * 131 + d.turn
        if d.turn == 0:
            episode = self._episodes.get(key)
            if episode is None:
                envs = [make_env(spec.env.name, spec.env.args) for _ in range(d.seqs)]
                episode, _ = await start_group(
                    d.job, d.group, version, envs, self._group_seed(d.job, d.group), self.fmt
                )
                self._episodes[key] = episode
            live = episode.samples
            prompts, n = [live[0].context], d.seqs
        else:
            episode = self._episodes[key]
            for sample in episode.live:
                if len(sample.context) + 1 >= self.max_model_len:
                    sample.done = True  # no room left in the context: the episode ends here
            live = episode.live
            prompts, n = [s.context for s in live], 1
        if not live:
            return 0, math.nan
        room = self.max_model_len - max(len(s.context) for s in live)
        if room <= 0:
            raise RealRunError(f"{d.job}: the prompt does not fit max_model_len")
        async with self._compute("generation"):
            groups = await self._gen.generate(
                d.job, version, prompts, n, min(d.max_new_tokens, room), rl.temperature, seed
            )
        completions = [c for group in groups for c in group]
        return add_completions(live, completions), math.nan

    async def _env_step(self, d: EnvStep) -> tuple[int, float]:
        episode = self._episodes[(d.job, d.group)]
        added, mean = await run_env_steps(episode, d.last_turn, self.fmt)
        return added, (mean if d.last_turn else math.nan)

    async def _load(self, d: LoadAdapter) -> tuple[int, float]:
        await self._publish(d.job, self._version(d.job, d.version))
        return 0, math.nan

    async def _swap_in(self, d: SwapIn) -> tuple[int, float]:
        return 0, math.nan  # the one PeftTrainer holds every job's adapter and optimizer

    async def _train(self, d: Train) -> tuple[int, float]:
        episodes = [self._episodes[(d.job, g)] for g in d.groups]
        samples = [s for e in episodes for s in e.train_samples()]
        async with self._compute("training"):
            stats = await asyncio.to_thread(self._trainer.train_step, d.job, samples)
        expected = self._version(d.job, d.version_out)
        if stats.version != expected:
            raise RealRunError(f"{d.job}: trainer at version {stats.version}, expected {expected}")
        mean = sum(e.mean_reward for e in episodes) / len(episodes)
        job = self.scheduler.job(d.job)
        self.rewards.append(
            RewardPoint(
                d.job, job.tenant, self._version(d.job, d.step), mean, self._now(),
                stats.max_staleness, job.max_staleness, stats.mean_ratio, stats.clip_fraction,
                stats.loss, stats.samples,
            )
        )  # fmt: skip
        for g in d.groups:
            del self._episodes[(d.job, g)]
            del self._group_version[(d.job, g)]
        self._show_progress()
        return stats.tokens, math.nan

    async def _sync(self, d: Sync) -> tuple[int, float]:
        version = self._version(d.job, d.version)
        await asyncio.to_thread(self.store.save_from, self._trainer, d.job, overwrite=True)
        await self._publish(d.job, version)
        return 0, math.nan

    def _compute(self, kind: str):
        """The compute gate's entry for ``kind`` (a no-op context without a gate)."""
        if self._gate is None:
            return contextlib.nullcontext()
        return getattr(self._gate, kind)()

    # ----------------------------------------------------------------------------- adapters
    async def _publish(self, job: str, version: int) -> None:
        """Publish (job, version) from the store once; concurrent callers share the call."""
        key = (job, version)
        task = self._publishing.get(key)
        if task is None or (task.done() and task.exception() is not None):
            path = self.store.path(job, version)
            task = asyncio.ensure_future(self._gen.publish(job, version, str(path)))
            self._publishing[key] = task
        await asyncio.shield(task)

    async def _retire(self, job: str, version: int) -> None:
        task = self._publishing.pop((job, version), None)
        if task is None:
            return
        try:
            await task
            await self._gen.retire(job, version)
        except Exception as exc:  # retiring is housekeeping: log, go on
            log.warning("retiring %s v%d failed: %r", job, version, exc)

    def _show_progress(self) -> None:
        latest: dict[str, float] = {}
        for point in self.rewards:
            latest[point.tenant] = point.mean_reward
        self._bar.set_postfix({t: f"{r:.2f}" for t, r in latest.items()}, refresh=False)
        self._bar.update(1)
