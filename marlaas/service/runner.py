"""The driver loop of a service, on its own thread, recording what happens in the job store.

    HTTP request -> JobStore row (queued) -> inbox Submit -> the scheduler admits, refuses
    admitted     -> running               (the executor was asked to build the job's state)
    step durable -> steps row, event-log rows, job.step   (one transaction, after the save)
    job ended    -> done / cancelled / failed / refused

On start, every job the store has as queued or running is submitted again at its last
durable step (versions past it, written by a step that never became durable, are removed);
the run's clock continues where the store's records end. Nothing here decides: the scheduler
core does, as in a batch run.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path

from marlaas.core.job_spec import JobSpec
from marlaas.core.outcomes import ACTIVE, CANCELLED, FINISHED, REFUSED, Admission, JobOutcome
from marlaas.core.scheduler import Scheduler
from marlaas.core.tenant_spec import TenantSpec
from marlaas.core.work import AdmitJob, Decision, WorkDone
from marlaas.drive import drive
from marlaas.drive.inbox import Cancel, Inbox, InboxClosedError, SetQuota, Submit
from marlaas.executors.journal_observer import JournalObserver
from marlaas.executors.resume import drop_undurable
from marlaas.service import store as S
from marlaas.service.config import ServiceConfig
from marlaas.service.gauges import Gauges
from marlaas.service.journal import StoreJournal
from marlaas.service.requests import JobRequestError, check_envelope

log = logging.getLogger("marlaas.service")

ADAPTERS_DIR = "adapters"
ANSWER_WAIT_S = 30.0
"""How long a submission waits for the scheduler's answer before it is reported queued [s]."""
ANSWER_POLL_S = 0.1
"""How often a submission waiting for its answer looks whether the driver stopped [s]."""


class ServiceRunner:
    """Runs the scheduler over the real executor (or the simulator on the wall clock) with an
    inbox that stays open until :meth:`stop`; see the module docstring.

    ``options``: for the real executor, ``backend``, ``ray`` (the Ray cluster's address, to
    run the engines, trainers and environments as actors) and the executor's settings
    (:func:`~marlaas.executors.open_real.open_real_executor`); for the
    simulator, ``simulate=True`` with ``speed`` (simulated seconds per wall second) and
    ``cost`` (a CostModel)."""

    def __init__(
        self,
        config: ServiceConfig,
        base_dir: Path,
        data_dir: Path,
        store: S.JobStore,
        *,
        simulate: bool = False,
        speed: float = 1.0,
        cost=None,
        backend: str = "auto",
        **options,
    ) -> None:
        self.config, self.base_dir, self.data_dir, self.store = config, base_dir, data_dir, store
        self.simulate, self.speed, self.cost = simulate, speed, cost
        self.backend, self.options = backend, options
        self.inbox = Inbox()
        self.ready = threading.Event()
        """Set once the executor is built and the store's live jobs are submitted again."""
        self.error: BaseException | None = None
        """What stopped the driver, if it stopped on its own."""
        self.stopped = threading.Event()
        """Set once the driver's thread has ended (its inbox then takes nothing more)."""
        self._gauges: Gauges | None = None
        self._offset = 0.0
        self._executor = None
        self._quotas: dict[str, TenantSpec] = {}
        """Each tenant's quotas as last sent to the scheduler."""
        self._quotas_sent = threading.Lock()
        """Orders the requests' sends of :attr:`_quotas` (requests run on many threads)."""
        self._failed: dict[str, str] = {}
        self._thread: threading.Thread | None = None
        self._on_stop = None
        self._stopping = threading.Lock()
        """Orders :meth:`when_stopped` with the driver's end: the callback is called once."""

    # ----------------------------------------------------------------------------- callers
    def start(self, timeout_s: float | None = None) -> None:
        """Start the driver's thread; wait until it is ready (or failed) or ``timeout_s``."""
        self._thread = threading.Thread(target=self._run, name="marlaas-driver", daemon=True)
        self._thread.start()
        self.ready.wait(timeout_s)
        if self.error is not None:
            raise self.error

    def misfits(self) -> list[tuple[str, str]]:
        """(its environment, ``job N: reason``) for every queued or running job of the store
        that this service's envelope (its ``service:`` block) no longer admits: a service
        started with a smaller envelope would fail them for good (:meth:`_resubmit`)."""
        found = []
        for job_id, spec, durable, cancelled, failed in self.store.live_jobs():
            if cancelled or failed or durable >= spec.rl.steps:
                continue
            try:
                check_envelope(spec, self.config)
            except JobRequestError as err:
                found.append((spec.env.name, f"job {job_id}: {err}"))
        return found

    def when_stopped(self, callback) -> None:
        """Call ``callback`` when the driver stops (on the driver's thread), e.g. to stop the
        server; at once (on this thread) if it has stopped already: a driver that stopped
        between :meth:`start` and this call (a policy that raised on the first round, keying
        a job resumed from the store) found no one to tell, and ``serve`` went on serving."""
        with self._stopping:
            self._on_stop = callback
            stopped = self.stopped.is_set()
        if stopped:
            callback()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop the driver: work in flight is left (the jobs resume on the next start)."""
        self.inbox.stop()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def error_line(self) -> str | None:
        """What stopped the driver (:attr:`error`) in one line, for anyone to read
        (``/v1/health`` needs no key); None while it runs."""
        return None if self.error is None else self._said(self.error)

    def _said(self, err: BaseException) -> str:
        """``err`` in one line: a database's error as the driver said it, without the
        statement and its values that SQLAlchemy's text holds (a job spec, a key's hash)."""
        from sqlalchemy.exc import SQLAlchemyError

        if isinstance(err, SQLAlchemyError):
            from marlaas.service.db import failed_database

            return str(failed_database(self.store.url, err, ""))
        return " ".join(str(err).split()) or type(err).__name__

    @property
    def alive(self) -> bool:
        """Whether the driver's thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def now(self) -> float:
        """The service's run clock [s]: continued over restarts."""
        executor = self._executor
        return self._offset + (executor.now() if executor is not None else 0.0)

    def submit(self, tenant: S.TenantView, spec: JobSpec) -> tuple[int, str, str]:
        """Record and submit ``tenant``'s job; (id, state, reason) once the scheduler's
        admission round answered (queued or running; refused with the reason: the row stays,
        refused, and the traffic replays it while the store keeps its spec, ``service:
        refused_specs_kept``). A submission the inbox does not take
        (InboxClosedError: the service is stopping), or that the driver stopped before
        answering (a policy that raised: no scheduler will ever answer it), leaves nothing in
        the store: its row is removed before the error reaches the caller (unless the driver
        had admitted it: then it is reported as the store has it). One whose answer takes over
        :data:`ANSWER_WAIT_S` is reported queued and stays a job."""
        self._send_quota(tenant)  # before its job: judged under them
        job_id = self.store.add_job(tenant, spec, self.now())
        answer: list[Admission] = []
        heard = threading.Event()

        def hear(admission: Admission) -> None:
            answer.append(admission)
            heard.set()

        core = spec.model_copy(update={"name": S.core_name(job_id)})
        try:
            self.inbox.put(Submit(core, 0, heard=hear, index=job_id))
        except InboxClosedError:
            self.store.forget_unsent(job_id)
            raise
        deadline = time.monotonic() + ANSWER_WAIT_S
        while not heard.wait(ANSWER_POLL_S):
            if self.stopped.is_set() and not heard.is_set():
                if self.store.forget_unsent(job_id):
                    raise InboxClosedError("the driver stopped before the scheduler answered")
                job = self.store.job(job_id) or {}
                return job_id, job.get("state", S.QUEUED), job.get("reason", "")
            if time.monotonic() > deadline:
                return job_id, S.QUEUED, ""
        admission = answer[0]
        if admission.state == REFUSED:
            return job_id, S.REFUSED, admission.reason
        return job_id, S.RUNNING if admission.state == ACTIVE else S.QUEUED, ""

    def cancel(self, job_id: int) -> bool:
        """Ask the scheduler to cancel job ``job_id``; False when it has ended. While the
        service stops (its inbox closed), the cancel is recorded and a restart cancels the job
        (:meth:`_resubmit`)."""
        if not self.store.request_cancel(job_id, self.now()):
            return False
        with contextlib.suppress(InboxClosedError):  # recorded: the restart cancels it
            self.inbox.put(Cancel(S.core_name(job_id)))
        return True

    @property
    def utilization(self) -> dict[str, float]:
        """Per pool, the fraction of its devices busy over the last minute."""
        return {} if self._gauges is None else self._gauges.utilization

    @property
    def queued(self) -> int:
        """Jobs waiting for admission."""
        return 0 if self._gauges is None else self._gauges.queued

    @property
    def running(self) -> int:
        """Jobs admitted and not ended."""
        return 0 if self._gauges is None else self._gauges.running

    @property
    def lag_s(self) -> float:
        """How late the simulator reported its latest completion [simulated s] (0 for a
        real executor): --simulate at a speed this machine cannot keep up with."""
        return getattr(self._executor, "lag_s", 0.0)

    def adapter_versions(self, job_id: int) -> list[int]:
        """Job ``job_id``'s adapter versions on disk (none in a simulation)."""
        if self.simulate:
            return []
        from marlaas.executors.adapter_store import AdapterStore

        return AdapterStore(self.data_dir / ADAPTERS_DIR).versions(S.core_name(job_id))

    def adapter_path(self, job_id: int, version: int) -> Path:
        """The folder of job ``job_id``'s adapter ``version``."""
        return self.data_dir / ADAPTERS_DIR / S.core_name(job_id) / f"v{version}"

    def take_quota(self, tenant: S.TenantView) -> None:
        """Tell the scheduler ``tenant``'s quotas (as the store has them on its request) when
        they changed (``tenants quota``, ``tenants add``): a quota raised admits its queued
        jobs with its next request of any kind, not only its next submission. Nothing once
        the driver has stopped (its requests for jobs are still answered)."""
        with contextlib.suppress(InboxClosedError):
            self._send_quota(tenant)

    def _send_quota(self, tenant: S.TenantView) -> None:
        """Tell the scheduler ``tenant``'s quotas when they changed (``tenants add``,
        ``tenants quota``). ``tenant`` is as a request's authentication read it, which may be
        before a change another request has sent since: what is sent is the store's now, so
        that a slow request never sends quotas older than those sent (the scheduler judged
        the tenant's next jobs under the old ones), and the sends are one at a time (two at
        once could leave the scheduler with one and :attr:`_quotas` noting the other)."""
        with self._quotas_sent:
            if self._quotas.get(tenant.name) == tenant.quota:
                return
            quota = self.store.quota(tenant.name)
            if quota is None or self._quotas.get(tenant.name) == quota:
                return
            # put before it is noted, under the lock: a submission after it in the inbox is
            # judged under these quotas
            self.inbox.put(SetQuota(tenant.name, quota))
            self._quotas[tenant.name] = quota

    # ----------------------------------------------------------------------------- driver
    def _run(self) -> None:
        """The driver's thread. What stops it on its own is kept in :attr:`error` (health
        reports it, ``serve`` exits with it): a policy that raised is one log line (its
        traceback at debug level: the policy's own code, not the service's); the inbox is
        stopped first, so that no submission waits on a driver that is gone. Every store write
        is one transaction, so the jobs stand at their last durable step, and a restart
        continues them."""
        try:
            self._drive()
        except BaseException as err:  # the service reports it (health, logs) and stops
            from sqlalchemy.exc import SQLAlchemyError

            from marlaas.policy_path import PolicyError

            self.inbox.stop()
            if isinstance(err, PolicyError):
                log.error("the driver stopped: %s", err)
                log.debug("the policy's traceback", exc_info=err)
            elif isinstance(err, SQLAlchemyError):  # one line, as serve's: no statement
                log.error("the driver stopped: %s", self._said(err))
                log.debug("the database's traceback", exc_info=err)
            else:
                log.exception("the driver stopped")
            self.error = err
        finally:
            with self._stopping:
                self.stopped.set()
                callback = self._on_stop
            self.ready.set()
            if callback is not None:
                callback()

    def _drive(self) -> None:
        config = self.config
        scheduler = Scheduler(config.cluster, config.scheduling, config.policy, config.seed)
        for tenant in self.store.tenants():
            self._send_quota(tenant)
        part, self._offset = self.store.new_part()
        deleted = self.store.delete_refused(config.service.refused_kept)
        if deleted:
            log.info("deleted %d older refused submissions (refused_kept %d per tenant)",
                     deleted, config.service.refused_kept)  # fmt: skip
        dropped = self.store.drop_refused_specs(config.service.refused_specs_kept)
        if dropped:
            log.info("dropped the specs of %d older refused submissions (refused_specs_kept "
                     "%d per tenant)", dropped, config.service.refused_specs_kept)  # fmt: skip
        with self._open_executor(scheduler) as executor:
            self._executor = executor
            self._resubmit(executor)
            journal = StoreJournal(self.store, part, self._offset)
            keeper = JournalObserver(scheduler, executor, journal)
            watching = _Admissions(executor, self.store)
            self._gauges = Gauges(scheduler).start()
            self.ready.set()
            try:
                drive(
                    scheduler, watching, self.inbox, observers=[keeper, self._count_jobs],
                    on_ended=self._ended, on_job_failed=self._job_failed, check=False,
                )  # fmt: skip
            finally:
                self._gauges.stop()
                journal.close()

    def _open_executor(self, scheduler: Scheduler):
        if self.simulate:
            from contextlib import nullcontext

            from marlaas.service.realtime import RealTimeExecutor
            from marlaas.sim.executor import SimPyExecutor

            inner = SimPyExecutor(scheduler.cluster, self.cost, scheduler.seed)
            return nullcontext(RealTimeExecutor(inner, self.speed))
        from marlaas.executors.adapter_store import AdapterStore
        from marlaas.executors.backends import (
            EngineSizing,
            max_positions,
            model_dir_of,
            resolve_backend,
        )
        from marlaas.executors.open_real import open_real_executor

        limits = self.config.service
        model_dir = model_dir_of(self.config, self.base_dir)
        longest = max_positions(model_dir)
        if limits.max_sequence_tokens > longest:
            from marlaas.core.workload import WorkloadError

            raise WorkloadError(
                f"service.max_sequence_tokens: {limits.max_sequence_tokens:,} is more than "
                f"the base model holds ({longest:,} positions)"
            )
        sizing = EngineSizing(self.config.cluster.engine, limits.max_sequence_tokens,
                              limits.max_lora_rank)  # fmt: skip
        return open_real_executor(
            sizing, scheduler.cluster, store=AdapterStore(self.data_dir / ADAPTERS_DIR),
            model_dir=model_dir, backend=resolve_backend(self.backend), seed=scheduler.seed,
            env_workers=self.config.cluster.env_workers, sandbox_caps=limits.sandbox_caps(),
            **self.options,
        )  # fmt: skip

    def _resubmit(self, executor) -> None:
        """Submit every live job of the store again, at its last durable step."""
        store = getattr(executor, "store", None)  # the real executor's adapter store
        for job_id, spec, durable, cancelled, failed in self.store.live_jobs():
            name = S.core_name(job_id)
            if failed:  # it failed, and the service stopped before the job's end
                self.store.set_state(job_id, S.FAILED, failed)
                continue
            if cancelled:
                self.store.set_state(job_id, S.CANCELLED)
                continue
            if durable >= spec.rl.steps:
                self.store.set_state(job_id, S.DONE)
                continue
            try:
                check_envelope(spec, self.config)
            except JobRequestError as err:
                log.warning("job %s failed: it no longer fits this service: %s", name, err)
                self.store.set_state(job_id, S.FAILED, f"it no longer fits this service: {err}")
                continue
            lost = "" if store is None else drop_undurable(store, name, durable,
                                                           rank=spec.lora_rank)  # fmt: skip
            if lost:
                log.warning("job %s failed: %s", name, lost)
                self.store.set_state(job_id, S.FAILED, lost)
                continue
            core = spec.model_copy(update={"name": name})
            self.inbox.put(Submit(core, durable, index=job_id))
            log.info("job %s continues from step %d", name, durable)

    def _ended(self, outcome: JobOutcome) -> None:
        job_id = int(outcome.name[1:])
        if outcome.state == FINISHED:
            self.store.set_state(job_id, S.DONE)
        elif outcome.state == CANCELLED:
            failed = self._failed.pop(outcome.name, None)
            if failed is None:
                self.store.set_state(job_id, S.CANCELLED)
            else:
                self.store.set_state(job_id, S.FAILED, failed)
        else:
            limits = self.config.service
            self.store.set_state(job_id, S.REFUSED, outcome.reason,
                                 refused_kept=limits.refused_specs_kept,
                                 refused_rows_kept=limits.refused_kept)  # fmt: skip
        if self._gauges is not None:
            self._gauges.count_jobs()  # the job's last completion came before its end

    def _job_failed(self, name: str, reason: str) -> None:
        log.warning("job %s failed: %s", name, reason)
        self._failed[name] = reason
        self.store.note_failure(int(name[1:]), reason)  # a restart before its end: failed

    def _count_jobs(self, _decision: Decision, _event: WorkDone, _now: float) -> None:
        """An observer: the gauges count the jobs after every completion."""
        if self._gauges is not None:
            self._gauges.count_jobs()


class _Admissions:
    """The executor, as the driver sees it, marking each job running in the store when the
    scheduler admits it (an AdmitJob decision)."""

    def __init__(self, inner, store: S.JobStore) -> None:
        self.inner, self.store, self.seed = inner, store, inner.seed

    def start(self, decision: Decision, now: float) -> None:
        if isinstance(decision, AdmitJob):
            self.store.set_state(int(decision.job[1:]), S.RUNNING)
        self.inner.start(decision, now)

    def wait(self, until):
        return self.inner.wait(until)

    def now(self) -> float:
        return self.inner.now()

    def wake(self) -> None:
        self.inner.wake()

    def __getattr__(self, name: str):
        return getattr(self.inner, name)
