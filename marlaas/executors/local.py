"""The real world in this process: an engine per inference device, a trainer per trainer.

``LocalExecutor`` enacts every decision exactly as the scheduler made it::

    Generate      one call on the engine the decision names (vLLM or HF + PEFT generator)
    LoadAdapter   that engine loads the adapter version from the adapter store
    EvictAdapter  that engine drops it (instant; the only way an adapter leaves an engine)
    AdmitJob      the job's state: its spec, its episodes, its adapter's first version
                  (written to the store by a trainer, in the background: the job's first
                  load or swap waits for it), a resumed job's leftovers of a killed save
    ReleaseJob    the job's state is dropped (its adapters left the engines and trainers)
    EnvStep       every sample's environment step, then the workload's declared latency
    SwapIn        the trainer loads the job's adapter and optimizer state from the store
    SwapOut       the trainer drops the job's state (instant; it is in the store)
    Train         the named trainer's PEFT step (GRPO, clipped importance ratio), in a thread
    Sync          the trainer saves the new version with its optimizer state to the store

It keeps no second copy of what the scheduler owns: adapter residency, versions and capacity
live in the core; the engines and trainers hold what the decisions put there, which a test can
read back from them. What is physically shared (one CPU) is the workload's
``cluster.shared_compute``, which the scheduler honours: there is no gate here.

Its constructor only keeps its settings; :meth:`open` (or ``with``) builds the engines and
trainers on their devices, and a job's state is built when the job is admitted. It runs its
own asyncio loop: ``start`` schedules a task, ``wait`` runs the loop until a task finishes or
``wake`` is called (from any thread: a tenant's submission). Times are seconds since the
engines and trainers were built (``time.monotonic``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

from marlaas.core.cluster import Cluster
from marlaas.core.work import (
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
from marlaas.core.workload import JobSpec
from marlaas.drive.executor import Completions
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backends import EngineSizing, make_generator, max_positions
from marlaas.executors.devices import gpu_count, physical_devices, trainer_device
from marlaas.executors.episode_runner import EpisodeRunner, RewardPoint
from marlaas.executors.episodes import ChatFormat
from marlaas.executors.memory import tree_rss_mb
from marlaas.executors.trainers import TrainerPool
from marlaas.executors.warmup import warm_up

log = logging.getLogger("marlaas.real")


class LocalExecutor:
    """Real generation, environments and training in this process, as the scheduler decides.

    ``sizing``: what the cluster's engines are built to hold (a batch workload's
    :meth:`EngineSizing.of_workload`, a service's declared limits); the jobs themselves come
    from the scheduler's AdmitJob decisions.
    ``store``: the adapter store (every version of every job). ``generators``/``trainers``
    (engine/trainer name -> object) may be passed in, e.g. by tests; the others are built on
    the devices of :func:`marlaas.executors.devices.physical_devices` by :meth:`open`. Use it
    as a context manager (``open`` on entry, ``close`` on exit).
    """

    def __init__(
        self,
        sizing: EngineSizing,
        cluster: Cluster,
        *,
        store: AdapterStore,
        model_dir: Path,
        backend: str,
        seed: int = 0,
        generators: dict | None = None,
        trainers: dict | None = None,
        micro_batch_size: int = 8,
        activation_checkpointing: bool = True,
        max_model_len: int | None = None,
        chat_template: bool | None = None,
    ) -> None:
        self.seed = seed
        self.sizing, self.cluster, self.store = sizing, cluster, store
        self.backend = backend
        self.rewards: list[RewardPoint] = []
        self.warmup_s: dict[str, float] = {}
        """Each engine's warm-up before the clock started [s] (marlaas.executors.warmup)."""
        self._model_dir = model_dir
        self._max_model_len_asked = max_model_len
        self._max_model_len = 0  # known once open() read the model's config
        self._micro_batch_size = micro_batch_size
        self._checkpointing = activation_checkpointing
        self._chat_template = chat_template
        self._given = dict(generators or {})
        self._given_trainers = trainers
        self._engines: dict = dict(self._given)
        self._loaded: set[tuple[str, str, int]] = set()
        """(engine, job, version) this executor loaded and has not evicted."""
        self._specs: dict[str, JobSpec] = {}
        """The admitted jobs' specs (shared with the trainers and the episodes)."""
        self._bounds: dict[str, int] = {}
        """The admitted jobs' enforced staleness bounds (AdmitJob), for rewards.csv."""
        self._created: dict[str, asyncio.Task] = {}
        """Each new job's first version being written (awaited by its first load or swap)."""
        self._unwaited: set[asyncio.Task] = set()
        """First versions still being written for jobs that ended before they were needed."""
        self._tasks: dict[asyncio.Task, Decision] = {}
        self.trainers: TrainerPool | None = None  # built by open()
        self._finished: list[tuple[float, int, WorkDone]] = []
        self._runner: asyncio.Runner | None = None
        self._woken: asyncio.Event | None = None
        self._closed = False
        self._t0 = 0.0

    # ----------------------------------------------------------------------------- setup
    def open(self) -> LocalExecutor:
        """Build the engines (and warm them up) and the trainers; the clock starts when
        done."""
        if self._runner is not None:
            return self
        limit = max_positions(self._model_dir)
        self._max_model_len = min(self._max_model_len_asked or limit, limit)
        self._runner = asyncio.Runner()
        self._woken = asyncio.Event()
        try:
            self._runner.run(self._setup(self._given_trainers, self._chat_template))
        except BaseException:
            self.close()
            raise
        self._t0 = time.monotonic()
        return self

    async def _setup(self, trainers: dict | None, chat_template: bool | None) -> None:
        devices = physical_devices(self.cluster, gpu_count())
        on = {  # each trainer's one device (refused here, before any model loads)
            t.name: trainer_device(t.name, [d.name for d in t.devices], devices)
            for t in self.cluster.trainers
        }
        for engine in self.cluster.engines:
            if engine.name not in self._engines:
                self._engines[engine.name] = await asyncio.to_thread(
                    make_generator, self.backend, self._model_dir, self.sizing,
                    self._max_model_len, self.seed, devices[engine.device.name],
                )  # fmt: skip
        self.warmup_s = await warm_up(self._engines)
        if trainers is None:
            from marlaas.executors.peft_trainer import PeftTrainer

            trainers = {}
            for trainer in self.cluster.trainers:
                device = on[trainer.name]
                trainers[trainer.name] = await asyncio.to_thread(
                    PeftTrainer, self._model_dir, micro_batch_size=self._micro_batch_size,
                    device=device, activation_checkpointing=self._checkpointing,
                    shared_weights=self._plain_weights(device, devices),
                )  # fmt: skip
        self.trainers = TrainerPool(trainers, self.store, self._specs)
        tokenizer = next(iter(self._engines.values())).tokenizer
        self.episodes = EpisodeRunner(
            self._specs, ChatFormat(tokenizer, chat_template), self._max_model_len, self.seed
        )

    def _plain_weights(self, device: str, devices: dict[str, str]) -> dict:
        """Base-model tensors an engine built here on ``device`` keeps as loaded, for a trainer
        on the same device to use instead of its own copy (a vLLM engine in this process)."""
        for engine in self.cluster.engines:
            built = self._engines[engine.name]
            if engine.name not in self._given and devices[engine.device.name] == device:
                plain = getattr(built, "plain_weights", None)
                if plain is not None:
                    return plain()
        return {}

    # ----------------------------------------------------------------------------- protocol
    def now(self) -> float:
        """Seconds since setup ended."""
        return time.monotonic() - self._t0

    @property
    def clock_zero(self) -> float:
        """The monotonic time [s] this executor's clock (``now``) counts from."""
        return self._t0

    def start(self, decision: Decision, now: float) -> None:
        """Start the decision's work (instant decisions are done when this returns)."""
        runner = self._opened()
        if isinstance(decision, EvictAdapter):
            runner.run(self._evict(decision))
        elif isinstance(decision, SwapOut):
            self.trainers.swap_out(decision.job, decision.trainer)
        elif isinstance(decision, AdmitJob):
            self._admit(decision)
        elif isinstance(decision, ReleaseJob):
            self._release(decision)
        else:
            task = runner.get_loop().create_task(self._work(decision))
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
            self._tasks.pop(task)
            event, end = task.result()
            self._finished.append((end, event.work_id, event))

    def _admit(self, d: AdmitJob) -> None:
        """The job's state; a new job's first version is written in the background."""
        self._specs[d.job] = d.spec
        self._bounds[d.job] = d.max_staleness
        self.store.clean_partial(d.job)
        self.episodes.admit(d.job, d.index)
        if d.version == 0:
            create = asyncio.to_thread(self.trainers.create, d.job, d.spec, self.seed)
            self._created[d.job] = self._opened().get_loop().create_task(create)

    def _release(self, d: ReleaseJob) -> None:
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
        except Exception as exc:
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())
            log.warning("%s of %s failed: %s", type(d).__name__, d.job, reason)
            return WorkDone(d.work_id, ok=False, error=reason), self.now()
        return WorkDone(d.work_id, **outcome), self.now()

    async def _generate(self, d: Generate) -> dict:
        tokens, longest, context = await self.episodes.generate(d, self._engines[d.engine])
        return {"tokens": tokens, "longest_tokens": longest, "prompt_tokens": context}

    async def _env_step(self, d: EnvStep) -> dict:
        tokens, reward = await self.episodes.env_step(d)
        return {"tokens": tokens, "reward": reward}

    async def _load(self, d: LoadAdapter) -> dict:
        await self._created_first(d.job)
        engine = self._engines[d.engine]
        await engine.publish(d.job, d.version, str(self.store.path(d.job, d.version)))
        self._loaded.add((d.engine, d.job, d.version))
        return {}

    async def _evict(self, d: EvictAdapter) -> None:
        await self._engines[d.engine].retire(d.job, d.version)
        self._loaded.discard((d.engine, d.job, d.version))

    async def _swap_in(self, d: SwapIn) -> dict:
        await self._created_first(d.job)
        await asyncio.to_thread(self.trainers.swap_in, d.job, d.version, d.trainer)
        return {}

    async def _train(self, d: Train) -> dict:
        samples, mean_reward = self.episodes.batch(d)
        stats = await asyncio.to_thread(self.trainers.train, d.job, d.trainer, samples)
        if stats.version != d.version_out:
            raise RuntimeError(
                f"{d.job}: trainer at version {stats.version}, expected {d.version_out}"
            )
        spec = self._specs[d.job]
        self.rewards.append(
            RewardPoint(
                d.job, spec.tenant, d.step, mean_reward, self.now(),
                stats.max_staleness, self._bounds[d.job], stats.mean_ratio,
                stats.clip_fraction, stats.loss, stats.samples, round(tree_rss_mb(), 1),
            )
        )  # fmt: skip
        self.episodes.release(d)
        return {"tokens": stats.tokens}

    async def _sync(self, d: Sync) -> dict:
        await asyncio.to_thread(self.trainers.sync, d.job, d.version, d.trainer)
        return {}

    # ----------------------------------------------------------------------------- views
    def engine_adapters(self, engine: str) -> set[tuple[str, int]]:
        """The (job, version) pairs the engine itself reports holding."""
        return set(self._opened().run(self._engines[engine].resident()))

    def latest_rewards(self) -> dict[str, str]:
        """Each tenant's latest mean reward, for a progress bar."""
        latest = {p.tenant: p.mean_reward for p in self.rewards}
        return {tenant: f"{reward:.2f}" for tenant, reward in latest.items()}

    # ----------------------------------------------------------------------------- teardown
    def close(self) -> None:
        """Cancel unfinished work; shut down the engines built here, and leave engines that
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
        pending = [*self._tasks, *self._created.values(), *self._unwaited]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self._tasks.clear()
        self._created.clear()
        for name, engine in self._engines.items():
            if name not in self._given:
                await engine.close()
        for engine, job, version in sorted(self._loaded):
            if engine in self._given:
                await self._given[engine].retire(job, version)
        self._loaded.clear()

    def __enter__(self) -> LocalExecutor:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
