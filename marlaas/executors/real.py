"""The real world: an engine per inference device, a trainer per trainer, environments.

``RealExecutor`` enacts every decision exactly as the scheduler made it::

    Generate      one call on the engine the decision names (vLLM or HF + PEFT generator)
    LoadAdapter   that engine loads the adapter version from the adapter store
    EvictAdapter  that engine drops it (instant; the only way an adapter leaves an engine)
    AbortGeneration  a cancelled job's Generate in flight is stopped (instant): its task is
                  cancelled, which aborts its requests in the engine (vLLM's abort_request;
                  the HF generator stops its rows at the next decode step), and its WorkDone
                  comes back then (tokens 0: an aborted request's tokens are not returned)
    AdmitJob      the job's state: its spec, its episodes, its adapter's first version
                  (written to the store by a trainer, in the background: the job's first
                  load or swap waits for it), a resumed job's leftovers of a killed save
    ReleaseJob    the job's state is dropped (its adapters left the engines and trainers),
                  its environments closed (``Environment.close``, in the background)
    EnvStep       every sample's environment step, then the workload's declared latency
    SwapIn        the trainer loads the job's adapter and optimizer state from the store
    SwapOut       the trainer drops the job's state (instant; it is in the store)
    Train         the named trainer's PEFT step (GRPO, truncated importance weight), in a thread
                  (data-parallel over the trainer's devices where they are several GPUs)
    Sync          the trainer saves the new version with its optimizer state to the store

It keeps no second copy of what the scheduler owns: adapter residency, versions and capacity
live in the core; the engines and trainers hold what the decisions put there, which a test can
read back from them. What is physically shared (one CPU) is the workload's
``cluster.shared_compute``, which the scheduler honours: there is no gate here.

Where the engines, trainers and environments run is the business of its backends
(:class:`~marlaas.executors.placement.Backends`), not its own: in this process
(:class:`~marlaas.executors.local.LocalBackends`) or as Ray actors across a cluster
(:class:`~marlaas.executors.ray_backends.RayBackends`), behind the same methods, so the code
below is the same for both. A backend that was restarted (a Ray actor that died) says so
(``restarted``); before its next use this executor re-enacts its own record of what it put
there (:mod:`marlaas.executors.backend_restarts`). The work in flight when it died failed back
to the core, which retries it.

Its constructor only keeps its settings; :meth:`open` (or ``with``) builds the backends, and
a job's state is built when the job is admitted. It runs its own asyncio loop: ``start``
schedules a task, ``wait`` runs the loop until a task finishes or ``wake`` is called (from
any thread: a tenant's submission). Times are seconds since the backends were built
(``time.monotonic``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pandas as pd

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
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backend_restarts import BackendRecord
from marlaas.executors.backends import EngineSizing, max_positions, model_load_error
from marlaas.executors.disk_writes import disk_write_error, raise_if_disk_failed
from marlaas.executors.engine_steps import StepMeter, steps_frame
from marlaas.executors.episode_runner import EpisodeRunner, RewardPoint
from marlaas.executors.episodes import ChatFormat
from marlaas.executors.loop_interrupts import quiet_interrupts, read_interrupt
from marlaas.executors.memory import tree_rss_mb
from marlaas.executors.placement import BackendRestarted, Backends
from marlaas.executors.trainers import TrainerPool
from marlaas.executors.warmup import warm_up, warm_up_trainer
from marlaas.executors.yardstick import yardstick

log = logging.getLogger("marlaas.real")


class RealExecutor:
    """Real generation, environments and training, as the scheduler decides, over
    ``backends`` (in this process or Ray actors: :mod:`marlaas.executors.placement`).

    ``sizing``: what the cluster's engines are built to hold (a batch workload's
    :meth:`EngineSizing.of_workload`, a service's declared limits); the jobs themselves come
    from the scheduler's AdmitJob decisions. ``store``: the adapter store (every version of
    every job), on a path every backend reads. ``model_dir``: the base model's folder, whose
    context length caps ``max_model_len`` [tokens]. Use it as a context manager (``open`` on
    entry, ``close`` on exit).
    """

    def __init__(
        self,
        sizing: EngineSizing,
        cluster: Cluster,
        *,
        store: AdapterStore,
        backends: Backends,
        model_dir: Path,
        seed: int = 0,
        max_model_len: int | None = None,
        chat_template: bool | None = None,
    ) -> None:
        self.seed = seed
        self.sizing, self.cluster, self.store = sizing, cluster, store
        self.backends = backends
        self.rewards: list[RewardPoint] = []
        self.warmup_s: dict[str, float] = {}
        """Each engine's warm-up before the clock started [s] (marlaas.executors.warmup)."""
        self.yardstick_s_per_token: dict[str, float] = {}
        """Each engine's yardstick, timed after its warm-up [s per generated token]
        (marlaas.executors.yardstick)."""
        self._model_dir = model_dir
        self._max_model_len_asked = max_model_len
        self._max_model_len = 0  # known once open() read the model's config
        self._chat_template = chat_template
        self._specs: dict[str, JobSpec] = {}
        """The admitted jobs' specs (shared with the trainers and the episodes)."""
        self._bounds: dict[str, int] = {}
        """The admitted jobs' enforced staleness bounds (AdmitJob), for rewards.csv."""
        self._created: dict[str, asyncio.Task] = {}
        """Each new job's first version being written (awaited by its first load or swap)."""
        self._unwaited: set[asyncio.Task] = set()
        """First versions still being written for jobs that ended before they were needed."""
        self._tasks: dict[asyncio.Task, Decision] = {}
        self._aborted: set[int] = set()
        """Work ids of the generations an AbortGeneration cancelled, until they came back."""
        self._setting_up: asyncio.Task | None = None
        """:meth:`open`'s setup while it runs (cancelled by a close that interrupts it)."""
        self.trainers: TrainerPool | None = None  # built by open()
        self.episodes: EpisodeRunner | None = None  # built by open()
        self.record: BackendRecord | None = None  # built by open()
        """What this executor put on each engine and trainer, put back on one restarted."""
        self._finished: list[tuple[float, int, WorkDone]] = []
        self._runner: asyncio.Runner | None = None
        self._woken: asyncio.Event | None = None
        self._closed = False
        self._t0 = 0.0

    # ----------------------------------------------------------------------------- setup
    def open(self) -> RealExecutor:
        """Build the backends (the models load), warm the engines up and time their yardstick
        (marlaas.executors.yardstick); the clock starts when done."""
        if self._runner is not None:
            return self
        limit = max_positions(self._model_dir)
        self._max_model_len = min(self._max_model_len_asked or limit, limit)
        self._runner = asyncio.Runner()
        self._runner.get_loop().set_exception_handler(quiet_interrupts)
        self._woken = asyncio.Event()
        try:
            self._runner.run(self._setup())
        except BaseException as err:
            self._close_after(err)
            full = disk_write_error("building the engines and trainers", err, self.store.root)
            if full is not None:  # a library's error on a full disk is not the model's
                raise full from err
            failed = model_load_error(err, self._model_dir, "building the engines and trainers")
            if failed is not None:
                raise failed from err
            raise
        self._t0 = time.monotonic()
        return self

    async def _setup(self) -> None:
        self._setting_up = asyncio.current_task()
        backends = self.backends
        await backends.open(self.sizing, self.cluster, self._max_model_len, self.seed)
        self.warmup_s = await self._warm_up(backends)
        self.yardstick_s_per_token = await yardstick(backends.engines)
        self.trainers = TrainerPool(backends.trainers, self.store, self._specs)
        self.record = BackendRecord(backends, self.store, self.trainers)
        self.episodes = EpisodeRunner(
            self._specs, ChatFormat(backends.tokenizer, self._chat_template),
            self._max_model_len, self.seed, make_env=backends.make_env,
            env_threads=backends.kind == "local",  # Ray's run in its actors already
        )  # fmt: skip

    async def _warm_up(self, backends) -> dict[str, float]:
        """Warm the first trainer up (a throwaway adapter of the largest rank the engines
        hold, in the store), then the engines (marlaas.executors.warmup); return the engines'
        warm-up times."""
        trainer = next(iter(backends.trainers.values()), None)
        if trainer is not None:
            root, rank = self.store.root, self.sizing.max_lora_rank
            spent = warm_up_trainer(trainer, root, rank, self.seed)
            log.info("trainer warm-up: %.3f s", spent)
        return await warm_up(backends.engines)

    @property
    def kind(self) -> str:
        """Where the backends run: ``local`` (this process) or ``ray``."""
        return self.backends.kind

    # ----------------------------------------------------------------------------- protocol
    def now(self) -> float:
        """Seconds since setup ended."""
        return time.monotonic() - self._t0

    @property
    def clock_zero(self) -> float:
        """The monotonic time [s] this executor's clock (``now``) counts from."""
        return self._t0

    def engine_steps(self, offset_s: float = 0.0) -> pd.DataFrame:
        """Every step the in-process engines took since the clock started, measured
        (marlaas.executors.engine_steps), ``start_s`` on this clock plus ``offset_s``; no rows
        for engines out of this process."""
        meters = {}
        for name, engine in self.backends.engines.items():
            meter = getattr(engine, "meter", None)
            if isinstance(meter, StepMeter):
                meters[name] = meter.steps
        return steps_frame(meters, self._t0, offset_s)

    def yardstick_again(self) -> dict[str, float]:
        """Each engine's yardstick timed now, once the run's work is done [s per token]; call
        it after :meth:`engine_steps` is read (its batches are no run's steps, and that frame
        keeps every step since the clock started). An engine that fails it (restarted, or
        gone) leaves the run as it is: the yardstick is a measurement, not work, so it logs a
        warning and gives none."""
        try:
            return self._opened().run(yardstick(self.backends.engines))
        except Exception as err:
            log.warning("the engines' yardstick after the work failed (%s): none recorded", err)
            return {}

    def start(self, decision: Decision, now: float) -> None:
        """Start the decision's work (instant decisions are done when this returns)."""
        runner = self._opened()
        if isinstance(decision, EvictAdapter):
            runner.run(self._evict(decision))
        elif isinstance(decision, SwapOut):
            self._swap_out(decision)
        elif isinstance(decision, AdmitJob):
            self._admit(decision)
        elif isinstance(decision, AbortGeneration):
            self._abort(decision)
        elif isinstance(decision, ReleaseJob):
            runner.run(self._release(decision))
        else:
            task = runner.get_loop().create_task(self._work(decision))
            task.add_done_callback(read_interrupt)
            self._tasks[task] = decision

    def wait(self, until: float | None) -> Completions | None:
        """The earliest finished work, running the event loop until some finishes, the
        clock reaches ``until`` [s], or :meth:`wake` is called."""
        if not self._finished:
            timeout = None if until is None else max(until - self.now(), 0.0)
            self._opened().run(self._collect(timeout))
        if not self._finished:
            return None
        self._finished.sort(key=lambda item: item[:2])
        end, _, event = self._finished.pop(0)
        return end, [event]

    def wake(self) -> None:
        """Make a ``wait`` in progress (or the next one) return at once; from any thread."""
        if self._runner is not None and not self._closed:
            self._runner.get_loop().call_soon_threadsafe(self._woken.set)

    def _opened(self) -> asyncio.Runner:
        if self._runner is None or self._closed:
            raise RuntimeError("the executor is not open: use it in a `with` block")
        return self._runner

    async def _collect(self, timeout: float | None) -> None:
        woken = self._woken
        if woken.is_set():
            woken.clear()
            return
        if not self._tasks and timeout is None:
            return  # nothing to wait for
        waiter = asyncio.ensure_future(woken.wait())
        try:
            done, _ = await asyncio.wait(
                {*self._tasks, waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            waiter.cancel()
        woken.clear()
        for task in done:
            if task is waiter:
                continue
            decision = self._tasks.pop(task)
            if task.cancelled() and decision.work_id in self._aborted:  # before it began
                self._aborted.discard(decision.work_id)
                event, end = WorkDone(decision.work_id), self.now()
            else:
                event, end = task.result()
            self._finished.append((end, event.work_id, event))

    def _admit(self, d: AdmitJob) -> None:
        """The job's state; a new job's first version is written in the background."""
        self._specs[d.job] = d.spec
        self._bounds[d.job] = d.max_staleness
        self.store.clean_partial(d.job)
        self.episodes.admit(d.job, d.index)
        if d.version == 0:
            create = self._create_first(d.job, d.spec)
            self._created[d.job] = self._opened().get_loop().create_task(create)

    def _abort(self, d: AbortGeneration) -> None:
        """Cancel the task of generation ``d.generate``: the generator aborts its requests in
        the engine as the cancellation reaches them, and the task comes back with its
        WorkDone (:meth:`_work`). A task that has already ended is left: its own completion
        comes back."""
        for task, decision in self._tasks.items():
            if decision.work_id == d.generate:
                if not task.done():
                    self._aborted.add(d.generate)
                    task.cancel()
                return

    async def _create_first(self, job: str, spec: JobSpec) -> None:
        first = next(iter(self.trainers.trainers))
        await self.record.restored_trainer(first)
        await asyncio.to_thread(self.trainers.create, job, spec, self.seed)

    async def _release(self, d: ReleaseJob) -> None:
        """Drop the job's state; its environments are closed in the background (on this
        loop, which runs it)."""
        self.episodes.release_job(d.job)
        created = self._created.pop(d.job, None)
        if created is not None and not created.done():  # cancelled before its first load
            self._unwaited.add(created)
            created.add_done_callback(self._unwaited.discard)
        del self._specs[d.job], self._bounds[d.job]

    async def _created_first(self, job: str) -> None:
        """Wait until the job's first version is in the store (a new job's)."""
        created = self._created.get(job)
        if created is not None:
            await asyncio.shield(created)

    # ----------------------------------------------------------------------------- work
    async def _work(self, d: Decision) -> tuple[WorkDone, float]:
        handler: Callable = {
            Generate: self._generate, EnvStep: self._env_step, LoadAdapter: self._load,
            SwapIn: self._swap_in, Train: self._train, Sync: self._sync,
        }[type(d)]  # fmt: skip
        try:
            outcome = await handler(d)
        except asyncio.CancelledError:
            if d.work_id not in self._aborted:  # the run is stopping
                raise
            self._aborted.discard(d.work_id)  # stopped by an AbortGeneration: done now
            return WorkDone(d.work_id), self.now()
        except Exception as exc:
            raise_if_disk_failed(d, exc, self.store.root)
            why = " ".join(f"{type(exc).__name__}: {exc}".split())
            log.warning("%s of %s failed: %s", type(d).__name__, d.job, why)
            return WorkDone(d.work_id, ok=False, error=why), self.now()
        return WorkDone(d.work_id, **outcome), self.now()

    async def _generate(self, d: Generate) -> dict:
        engine = await self.record.restored_engine(d.engine)
        tokens, longest, context = await self.episodes.generate(d, engine)
        return {"tokens": tokens, "longest_tokens": longest, "prompt_tokens": context}

    async def _env_step(self, d: EnvStep) -> dict:
        tokens, reward, alike = await self.episodes.env_step(d)
        return {"tokens": tokens, "reward": reward, "alike": alike}

    async def _load(self, d: LoadAdapter) -> dict:
        await self._created_first(d.job)
        engine = await self.record.restored_engine(d.engine)
        await engine.publish(d.job, d.version, str(self.store.path(d.job, d.version)))
        self.record.loaded.add((d.engine, d.job, d.version))
        return {}

    async def _evict(self, d: EvictAdapter) -> None:
        engine = await self.record.restored_engine(d.engine)
        self.record.loaded.discard((d.engine, d.job, d.version))
        with contextlib.suppress(BackendRestarted):  # a new engine holds nothing to retire
            await engine.retire(d.job, d.version)

    async def _swap_in(self, d: SwapIn) -> dict:
        await self._created_first(d.job)
        await self.record.restored_trainer(d.trainer)
        await asyncio.to_thread(self.trainers.swap_in, d.job, d.version, d.trainer)
        self.record.on_trainer[(d.trainer, d.job)] = d.version
        return {}

    def _swap_out(self, d: SwapOut) -> None:
        if getattr(self.backends.trainers[d.trainer], "restarted", False):
            self._opened().run(self.record.restored_trainer(d.trainer))
        self.record.on_trainer.pop((d.trainer, d.job), None)
        self.record.unsynced.pop((d.trainer, d.job), None)
        with contextlib.suppress(BackendRestarted):  # a new trainer holds nothing to drop
            self.trainers.swap_out(d.job, d.trainer)

    async def _train(self, d: Train) -> dict:
        await self.record.restored_trainer(d.trainer)
        samples, mean_reward = self.episodes.batch(d)
        stats = await asyncio.to_thread(self.trainers.train, d.job, d.trainer, samples)
        if stats.version != d.version_out:
            raise RuntimeError(
                f"{d.job}: trainer at version {stats.version}, expected {d.version_out}"
            )
        self.record.unsynced[(d.trainer, d.job)] = samples
        spec = self._specs[d.job]
        self.rewards.append(
            RewardPoint(
                d.job, spec.tenant, d.step, mean_reward, self.now(),
                stats.max_staleness, self._bounds[d.job], stats.mean_weight,
                stats.clip_fraction, stats.loss, stats.samples, round(tree_rss_mb(), 1),
                stats.extra.get("trust_clip_fraction", 0.0), len(d.dropped),
            )
        )  # fmt: skip
        self.episodes.release(d)
        # The groups' prompt repeats the trainer did not read (it read each shared beginning
        # once): the core's count, at most what it read less than its samples hold (0: it
        # read them whole); -1 when it does not count what it read.
        saved = stats.sample_tokens - stats.read_tokens
        unread = min(d.shared_tokens, saved) if stats.read_tokens else -1
        return {"tokens": stats.tokens, "prompt_tokens": unread}

    async def _sync(self, d: Sync) -> dict:
        await self.record.restored_trainer(d.trainer)
        await asyncio.to_thread(self.trainers.sync, d.job, d.version, d.trainer)
        self.record.on_trainer[(d.trainer, d.job)] = d.version
        self.record.unsynced.pop((d.trainer, d.job), None)
        return {}

    # ----------------------------------------------------------------------------- views
    def engine_adapters(self, engine: str) -> set[tuple[str, int]]:
        """The (job, version) pairs the engine itself reports holding."""
        return set(self._opened().run(self.backends.engines[engine].resident()))

    def latest_rewards(self) -> dict[str, str]:
        """Each tenant's latest mean reward, for a progress bar."""
        latest = {p.tenant: p.mean_reward for p in self.rewards}
        return {tenant: f"{reward:.2f}" for tenant, reward in latest.items()}

    # ----------------------------------------------------------------------------- teardown
    def close(self) -> None:
        """Cancel unfinished work; close the backends built here, and leave engines that
        were passed in without the adapters this run loaded."""
        if self._closed:
            return
        self._closed = True
        if self._runner is None:
            return
        try:
            self._runner.run(self._shutdown())
        finally:
            self._runner.close()

    async def _shutdown(self) -> None:
        if self._tasks and self.trainers is not None:  # stopped with work in flight:
            self.trainers.interrupt()  # its training step ends at the next micro-batch
        restores = () if self.record is None else self.record.restores
        pending = [*self._tasks, *self._created.values(), *self._unwaited, *restores]
        if self._setting_up is not None and not self._setting_up.done():
            pending.append(self._setting_up)  # open() interrupted (Ctrl-C): no more actors
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self._tasks.clear()
        self._created.clear()
        # Every environment closed, then the jobs' threads (their calls cancelled), the
        # adapters this run loaded on engines it was given retired, and the backends closed:
        # each of them when one before failed or was interrupted, and the first Ctrl-C or
        # SIGTERM met raised after them all, else the first error (a retire's error raised
        # in a `finally` replaced the interruption, and left the backends open).
        failed: list[BaseException] = []
        if self.episodes is not None:
            await _noting(self.episodes.close(), failed)
        if self.record is not None:
            for engine, job, version in sorted(self.record.loaded):
                if not self.backends.owns(engine):
                    await _noting(self.backends.engines[engine].retire(job, version), failed)
            self.record.loaded.clear()
        await _noting(self.backends.close(), failed)
        if failed:
            raise next((e for e in failed if isinstance(e, KeyboardInterrupt | SystemExit)),
                       failed[0])  # fmt: skip

    def __enter__(self) -> RealExecutor:
        return self.open()

    def __exit__(self, exc_type, exc, tb) -> None:
        self._close_after(exc)

    def _close_after(self, exc: BaseException | None) -> None:
        """:meth:`close`, the block ended by ``exc`` (None: it did not raise). When ``exc`` is
        Ctrl-C or SIGTERM's (or SystemExit), an error of the close is a warning and the
        interruption goes on: raised here, the error replaced it (the run ended as failed, not
        interrupted)."""
        try:
            self.close()
        except Exception as err:
            if not isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            log.warning("the executor's close after the interruption failed: %s: %s",
                        type(err).__name__, err)  # fmt: skip


async def _noting(step: Coroutine[Any, Any, Any], failed: list[BaseException]) -> None:
    """Await ``step`` of a stop; what it raises (Ctrl-C, SIGTERM, a cancellation, an error) is
    added to ``failed`` for the stop to raise once its other steps ran."""
    try:
        await step
    except BaseException as err:
        failed.append(err)
