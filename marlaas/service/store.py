"""The job store: tenants, jobs, their durable steps and state changes, and the event log,
in the service's database (:mod:`marlaas.service.db`). Every method is one transaction, safe
from any thread.

A job's state as a tenant sees it: ``queued`` (submitted, not admitted), ``running``
(admitted; cancelling included), ``done``, ``cancelled``, ``failed`` (its work failed too
often in a row) or ``refused`` (a quota, with the reason). Its ``step`` is the newest
durable adapter version: the step's adapter, optimizer state, reward point and event-log
rows are all in place (:meth:`JobStore.step_done`, one transaction after the trainer's save).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import delete, func, select, text, update

from marlaas.core.job_spec import JobSpec
from marlaas.core.tenant_spec import TenantSpec
from marlaas.executors.journal import json_values
from marlaas.service import keys
from marlaas.service.db import (
    DatabaseError,
    Job,
    JobEvent,
    Part,
    Step,
    Tenant,
    WorkRow,
    open_database,
)

QUEUED, RUNNING, DONE, CANCELLED, FAILED, REFUSED = (
    "queued", "running", "done", "cancelled", "failed", "refused",
)  # fmt: skip
ENDED = (DONE, CANCELLED, FAILED, REFUSED)
SERVICE_LOCK = 0x6D61726C61617321
"""The PostgreSQL advisory lock a service holds on its database ("marlaas!")."""
LIVE = (QUEUED, RUNNING)
MAX_LISTED_ENDED = 1000
"""Jobs that ended a list of jobs shows, the newest (with every queued or running one)."""
DROPPED_SPEC = ""
"""What a refused submission's spec becomes once it is past the ones kept (``service:
refused_specs_kept``): its row and its reason stay, ``traffic`` leaves it out."""

QUOTA_FIELDS = ("max_active_jobs", "max_queued_jobs")
"""The quotas a tenant's row keeps (:meth:`JobStore.set_quota` sets them by name)."""

LISTED_REWARDS = 200
"""The rewards of a job's latest steps that the list of jobs carries (its sparkline); one job's
own view carries every step's (a list of 1,000 jobs of 100,000 steps each was 100 M numbers)."""


class TenantError(ValueError):
    """A tenant that cannot be added or revoked (a name in use, no such tenant)."""


@dataclass(frozen=True)
class TenantView:
    """A tenant as the store reports it."""

    id: int
    name: str
    quota: TenantSpec
    created_at: float
    revoked: bool


def new_tenant_name(name: str) -> str:
    """``name`` when a new tenant may have it; a TenantError naming the name (cut short) and
    what is wrong otherwise (:func:`~marlaas.service.tenant_names.check_tenant_name`)."""
    from marlaas.core.spec_fields import shown_name
    from marlaas.service.tenant_names import check_tenant_name

    try:
        return check_tenant_name(name)
    except ValueError as err:
        raise TenantError(f"tenant name {shown_name(name)}: {err}") from None


def core_name(job_id: int) -> str:
    """The scheduler's (and the adapter store's) name for job ``job_id``."""
    return f"j{job_id}"


def _dumps(value) -> str:
    return json.dumps(value, allow_nan=False)


class JobStore:
    """The service's database, opened at ``url`` and migrated; ``data_dir`` holds the secret
    the API keys' hashes are keyed with. ``with_keys=False`` opens it for a reader of jobs
    that never makes or checks a key (``marlaas traffic``): the secret is neither read nor
    made, and :meth:`add_tenant` and :meth:`authenticate` are refused. ``read_only``: for a
    command that only reads (``traffic``, ``tenants list``): the database is opened
    read-only and not migrated (:func:`~marlaas.service.db.open_database`), and the secret is
    checked where ``with_keys``, never made."""

    def __init__(self, url: str, data_dir: Path, with_keys: bool = True,
                 read_only: bool = False) -> None:  # fmt: skip
        self.url = url
        self._held = None
        """What holds the database for one service (:meth:`hold`): a descriptor, or a
        connection."""
        self.engine, self._session = open_database(url, read_only)
        self._sqlite = self.engine.dialect.name == "sqlite"
        try:
            self._secret: bytes | None = None
            if with_keys:
                with self._session() as session:
                    made = session.scalar(select(func.count(Tenant.id)))
                self._secret = keys.load_secret(data_dir, made, make=not read_only)
        except BaseException:
            self.engine.dispose()
            raise

    def hold(self) -> None:
        """Hold the database for one service while this store is open: another ``serve`` on
        it is DatabaseError (two drivers would run the same jobs, each writing their steps).
        The data folder's lock does not cover it: two data folders can name one ``--db``.
        SQLite: an exclusive ``flock`` of the database file (SQLite's own locks are ``fcntl``
        ones, apart); PostgreSQL: an advisory lock, held by a connection of its own."""
        shown = self.engine.url.render_as_string(hide_password=True)
        refused = DatabaseError(f"database {shown}: another marlaas serve is serving it (one "
                                "service to a database); stop that one first")  # fmt: skip
        if self._sqlite:
            fd = os.open(self.engine.url.database, os.O_RDONLY | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise refused from None
            self._held = fd
            return
        connection = self.engine.connect()
        if not connection.scalar(text("SELECT pg_try_advisory_lock(:key)"), {"key": SERVICE_LOCK}):
            connection.close()
            raise refused
        self._held = connection

    def close(self) -> None:
        """Close every connection (and give the database back, if held)."""
        held, self._held = self._held, None
        if isinstance(held, int):
            os.close(held)
        elif held is not None:
            held.close()
        self.engine.dispose()

    def _keyed(self) -> bytes:
        """The keys' secret; a store opened with ``with_keys=False`` has none to use."""
        if self._secret is None:
            raise RuntimeError("the job store was opened without the keys' secret (with_keys)")
        return self._secret

    # ----------------------------------------------------------------------------- tenants
    def add_tenant(self, name: str, quota: TenantSpec | None = None) -> str:
        """Add tenant ``name``; returns its API key (not kept: only its keyed hash is). A
        new tenant's name must follow :func:`~marlaas.service.tenant_names.check_tenant_name`
        (a TenantError naming what is wrong otherwise). A revoked tenant is given a new key
        (its old one stays refused) and ``quota``, and keeps its jobs (its name as stored,
        even one from before the rule)."""
        from marlaas.core.spec_fields import check_name

        try:
            check_name(name)
        except ValueError:  # a name never stored (a control character, a NUL): not looked up
            new_tenant_name(name)
        quota = quota or TenantSpec()
        key = keys.new_key()
        with self._session.begin() as session:
            known = session.scalar(select(Tenant).where(Tenant.name == name))
            if known is None:
                new_tenant_name(name)
            elif known.revoked_at is None:
                raise TenantError(f"tenant {name!r} exists (revoke it first to give it a new "
                                  "key, or pick a name)")  # fmt: skip
            if known is not None:
                known.key_hash, known.revoked_at = keys.key_hash(self._keyed(), key), None
                known.max_active_jobs = quota.max_active_jobs
                known.max_queued_jobs = quota.max_queued_jobs
                return key
            session.add(Tenant(
                name=name, key_hash=keys.key_hash(self._keyed(), key),
                max_active_jobs=quota.max_active_jobs, max_queued_jobs=quota.max_queued_jobs,
                created_at=time.time(),
            ))  # fmt: skip
        return key

    def set_quota(self, name: str, **changes: int | None) -> TenantSpec:
        """Set the quotas ``changes`` names (``max_active_jobs``, ``max_queued_jobs``; None:
        the cluster file's) of ``name``, its other quotas and its key kept; its quotas now.
        Only the columns named are written, in one transaction: two operators changing
        different quotas at once both keep theirs. They reach the scheduler with the
        tenant's next request, as those of ``add_tenant``."""
        unknown = sorted(set(changes) - set(QUOTA_FIELDS))
        if unknown:
            raise TypeError(f"set_quota: {', '.join(unknown)} is not a quota ({QUOTA_FIELDS})")
        with self._session.begin() as session:
            tenant = session.scalar(select(Tenant).where(Tenant.name == name))
            if tenant is None:
                raise TenantError(f"no tenant named {name!r}")
            if tenant.revoked_at is not None:
                raise TenantError(f"tenant {name!r} is revoked; `tenants add {name}` gives it a "
                                  "new key and the quotas it names")  # fmt: skip
            session.execute(update(Tenant).where(Tenant.id == tenant.id).values(**changes))
            session.refresh(tenant)
            return _tenant_view(tenant).quota

    def revoke_tenant(self, name: str) -> None:
        """Revoke ``name``'s key: its requests are refused from now on (its jobs stay)."""
        with self._session.begin() as session:
            tenant = session.scalar(select(Tenant).where(Tenant.name == name))
            if tenant is None:
                raise TenantError(f"no tenant named {name!r}")
            if tenant.revoked_at is None:
                tenant.revoked_at = time.time()

    def tenants(self) -> list[TenantView]:
        """Every tenant, oldest first."""
        with self._session() as session:
            rows = session.scalars(select(Tenant).order_by(Tenant.id)).all()
            return [_tenant_view(row) for row in rows]

    def quota(self, name: str) -> TenantSpec | None:
        """``name``'s quotas as the store has them now (None: no such tenant)."""
        with self._session() as session:
            row = session.scalar(select(Tenant).where(Tenant.name == name))
            return None if row is None else _tenant_view(row).quota

    def authenticate(self, key: str) -> TenantView | None:
        """The tenant whose key ``key`` is, None when none (or it was revoked)."""
        digest = keys.key_hash(self._keyed(), key)
        with self._session() as session:
            row = session.scalar(select(Tenant).where(Tenant.key_hash == digest))
            if row is None or row.revoked_at is not None:
                return None
            return _tenant_view(row)

    def job_counts(self) -> dict[str, dict[str, int]]:
        """Per tenant name, its jobs per state."""
        with self._session() as session:
            rows = session.execute(
                select(Tenant.name, Job.state, func.count(Job.id))
                .join(Job, Job.tenant_id == Tenant.id)
                .group_by(Tenant.name, Job.state)
            ).all()
        counts: dict[str, dict[str, int]] = {}
        for name, state, count in rows:
            counts.setdefault(name, {})[state] = count
        return counts

    # ----------------------------------------------------------------------------- jobs
    def add_job(self, tenant: TenantView, spec: JobSpec, submitted_s: float) -> int:
        """Record ``tenant``'s new job (queued); returns its id."""
        with self._session.begin() as session:
            job = Job(
                tenant_id=tenant.id, name=spec.name, spec=_dumps(spec.model_dump()),
                state=QUEUED, reason="", step=0, steps=spec.rl.steps, staleness_max=0,
                cancel_requested=False, submitted_at=time.time(), submitted_s=submitted_s,
            )  # fmt: skip
            session.add(job)
            session.flush()
            self._event(session, job.id, "state", {"state": QUEUED})
            return job.id

    def forget_unsent(self, job_id: int) -> bool:
        """Remove job ``job_id`` and its events: a submission that never reached the
        scheduler (its inbox was closed: the service is stopping), or that the driver stopped
        before answering, answered 503. Only a job still queued is removed (True); any other
        is left as it is (False)."""
        with self._session.begin() as session:
            self._lock(session, job_id)
            job = session.get(Job, job_id)
            if job is None or job.state != QUEUED:
                return False
            session.execute(delete(JobEvent).where(JobEvent.job_id == job_id))
            session.delete(job)
            return True

    def job(self, job_id: int, tenant_id: int | None = None) -> dict | None:
        """Job ``job_id`` as the API shows it (None: no such job, or another tenant's)."""
        with self._session() as session:
            query = select(Job, Tenant.name).join(Tenant, Tenant.id == Job.tenant_id)
            query = query.where(Job.id == job_id)
            if tenant_id is not None:
                query = query.where(Job.tenant_id == tenant_id)
            row = session.execute(query).first()
            if row is None:
                return None
            return self._view(session, row[0], row[1])

    def job_state(self, job_id: int) -> str | None:
        """Job ``job_id``'s state alone (None: no such job): one indexed read, for an event
        stream's every poll."""
        with self._session() as session:
            return session.scalar(select(Job.state).where(Job.id == job_id))

    def jobs(self, tenant_id: int | None = None, limit: int = MAX_LISTED_ENDED) -> list[dict]:
        """Every queued or running job (of one tenant) and the newest ``limit`` that ended,
        newest first: jobs that ended, however many (a tenant's refused submissions have no
        bound), never hide one that runs."""
        with self._session() as session:
            query = select(Job, Tenant.name).join(Tenant, Tenant.id == Job.tenant_id)
            if tenant_id is not None:
                query = query.where(Job.tenant_id == tenant_id)
            live = session.execute(query.where(Job.state.in_(LIVE))).all()
            ended = session.execute(query.where(Job.state.not_in(LIVE))
                                    .order_by(Job.id.desc()).limit(limit)).all()  # fmt: skip
            rows = sorted([*live, *ended], key=lambda row: row[0].id, reverse=True)
            rewards = self._rewards(session, [job.id for job, _ in rows], LISTED_REWARDS)
            return [self._view(session, job, name, rewards.get(job.id, [])) for job, name in rows]

    def live_jobs(self) -> list[tuple[int, JobSpec, int, bool, str]]:
        """(id, spec, durable step, cancel requested, why it failed) of every queued or
        running job, oldest first: what a restarted service submits again. Why it failed:
        "" unless the job failed and was being stopped (:meth:`note_failure`)."""
        with self._session() as session:
            rows = session.scalars(select(Job).where(Job.state.in_(LIVE)).order_by(Job.id))
            return [(row.id, JobSpec.model_validate_json(row.spec), row.step,
                     row.cancel_requested, row.reason) for row in rows]  # fmt: skip

    def note_failure(self, job_id: int, reason: str) -> None:
        """Keep why live job ``job_id`` failed while the scheduler stops it (its work in
        flight ends first): a service stopped before its end marks it failed with ``reason``
        when it starts again, where it resumed the job (the reason was held in memory only).
        The job's state is unchanged until its end; its reason is shown meanwhile."""
        with self._session.begin() as session:
            self._lock(session, job_id)
            job = session.get(Job, job_id)
            if job is not None and job.state in LIVE:
                job.reason = reason

    def request_cancel(self, job_id: int, at_s: float) -> bool:
        """Mark a live job's cancel requested at ``at_s`` [s, run clock]; False if it ended."""
        with self._session.begin() as session:
            done = session.execute(
                update(Job)
                .where(Job.id == job_id, Job.state.in_(LIVE), Job.cancel_requested.is_(False))
                .values(cancel_requested=True, cancelled_s=at_s)
            ).rowcount
            if done:
                self._event(session, job_id, "state", {"state": "cancelling"})
            return bool(done)

    def set_state(
        self, job_id: int, state: str, reason: str = "", refused_kept: int | None = None,
        refused_rows_kept: int | None = None,
    ) -> None:  # fmt: skip
        """Job ``job_id`` is now ``state`` (an ended state is final). A refusal with
        ``refused_kept`` also drops, in the same transaction, the spec of each of the
        tenant's refused submissions past its newest ``refused_kept`` (their rows and reasons
        stay): a tenant's refused submissions have no bound, and their specs (up to 1 MiB
        each) were all kept. Usually one row: every older one's was dropped before (and
        :meth:`drop_refused_specs` drops them all where the bound was larger, or none). With
        ``refused_rows_kept``, the tenant's refused submissions past its newest
        ``refused_rows_kept`` are deleted in it too, rows and events
        (:meth:`delete_refused`)."""
        with self._session.begin() as session:
            self._lock(session, job_id)
            job = session.get(Job, job_id)
            if job is None or job.state in ENDED or job.state == state:
                return
            job.state, job.reason = state, reason
            if state in ENDED:
                job.ended_at = time.time()
            self._event(session, job_id, "state", {"state": state, "reason": reason})
            if state == REFUSED and refused_kept is not None:
                self._drop_refused_past(session, job.tenant_id, refused_kept)
            if state == REFUSED and refused_rows_kept is not None:
                self._delete_refused_past(session, job.tenant_id, refused_rows_kept)

    def delete_refused(self, kept: int) -> int:
        """Delete every refused submission of each tenant but its newest ``kept`` (``kept``
        >= 1), with its events; how many were deleted. Once, when the service starts (a
        smaller bound than the last start's, or a store from before the bound); a refusal
        deletes the one past it (:meth:`set_state`). A job that ran is never deleted."""
        with self._session.begin() as session:
            return sum(self._delete_refused_past(session, tenant_id, kept)
                       for tenant_id in session.scalars(select(Tenant.id)).all())  # fmt: skip

    @classmethod
    def _delete_refused_past(cls, session, tenant_id: int, kept: int) -> int:
        """Delete the tenant's refused submissions past its newest ``kept`` and their events;
        how many. One that made a durable step is kept (a job that ran, refused when a
        restart submitted it again: its steps refer to it). The newest job of the store is
        never one of them (``kept`` >= 1), so that SQLite never gives its id to another."""
        if kept < 1:
            raise ValueError(f"refused_kept must be at least 1, got {kept}")
        past = cls._first_refused_past(session, tenant_id, kept)
        if past is None:
            return 0
        stepless = ~select(Step.job_id).where(Step.job_id == Job.id).exists()
        which = (Job.tenant_id == tenant_id, Job.state == REFUSED, Job.id <= past, stepless)
        doomed = select(Job.id).where(*which).scalar_subquery()
        session.execute(delete(JobEvent).where(JobEvent.job_id.in_(doomed)))
        return session.execute(delete(Job).where(*which)).rowcount

    def drop_refused_specs(self, kept: int) -> int:
        """Drop the spec of every refused submission of each tenant but its newest ``kept``
        (their rows and reasons stay); how many were dropped. Once, when the service starts:
        a smaller bound than the last start's, or a store from before the bound."""
        with self._session.begin() as session:
            return sum(self._drop_refused_past(session, tenant_id, kept)
                       for tenant_id in session.scalars(select(Tenant.id)).all())  # fmt: skip

    @classmethod
    def _drop_refused_past(cls, session, tenant_id: int, kept: int) -> int:
        """Drop the spec of each of the tenant's refused submissions but its newest ``kept``;
        how many were dropped. Every one past them, not the one just past: a refusal of an
        older submission after newer ones (a queued job refused past a quota lowered
        meanwhile) falls further back than the one just past, whose spec was dropped."""
        past = cls._first_refused_past(session, tenant_id, kept)
        if past is None:
            return 0
        return session.execute(
            update(Job)
            .where(Job.tenant_id == tenant_id, Job.state == REFUSED, Job.id <= past,
                   Job.spec != DROPPED_SPEC)
            .values(spec=DROPPED_SPEC)
        ).rowcount  # fmt: skip

    @staticmethod
    def _first_refused_past(session, tenant_id: int, kept: int) -> int | None:
        """The id of the tenant's refused submission just past its newest ``kept``, if any."""
        return session.scalar(
            select(Job.id)
            .where(Job.tenant_id == tenant_id, Job.state == REFUSED)
            .order_by(Job.id.desc()).offset(kept).limit(1)
        )  # fmt: skip

    def step_done(self, job_id: int, point: dict, records: Iterable[dict], part: int) -> None:
        """A step of job ``job_id`` is durable: its reward point and the event-log rows so far,
        in one transaction (the trainer saved its adapter and optimizer state before)."""
        with self._session.begin() as session:
            self._lock(session, job_id)
            self._add_records(session, records, part)
            step = int(point["step"])
            staleness = int(point.get("staleness") or 0)
            session.merge(Step(job_id=job_id, step=step, reward=point.get("mean_reward"),
                               staleness=staleness, body=_dumps(point)))  # fmt: skip
            job = session.get(Job, job_id)
            job.step = max(job.step, step + 1)
            job.staleness_max = max(job.staleness_max, staleness)
            self._event(session, job_id, "step", {"step": step, "version": step + 1,
                                                  "reward": point.get("mean_reward")})  # fmt: skip

    def add_records(self, records: Iterable[dict], part: int) -> None:
        """Append event-log rows (work records as plain data, times on the run clock)."""
        with self._session.begin() as session:
            self._add_records(session, records, part)

    def records(self) -> list[dict]:
        """Every event-log row, in the order written."""
        with self._session() as session:
            return [json.loads(body) for body in session.scalars(
                select(WorkRow.body).order_by(WorkRow.id))]  # fmt: skip

    def rewards(self, job_id: int) -> list[float | None]:
        """The mean reward of each durable step of job ``job_id``, in step order."""
        with self._session() as session:
            return self._rewards(session, [job_id]).get(job_id, [])

    def steps(self, job_id: int) -> list[dict]:
        """Job ``job_id``'s durable steps' reward points, in step order."""
        with self._session() as session:
            rows = session.scalars(select(Step.body).where(Step.job_id == job_id)
                                   .order_by(Step.step))  # fmt: skip
            return [json.loads(body) for body in rows]

    def events_after(self, job_id: int, last_id: int, limit: int = 500) -> list[tuple]:
        """Job ``job_id``'s (id, kind, body) events after id ``last_id``, in order."""
        with self._session() as session:
            rows = session.execute(
                select(JobEvent.id, JobEvent.kind, JobEvent.body)
                .where(JobEvent.job_id == job_id, JobEvent.id > last_id)
                .order_by(JobEvent.id).limit(limit)
            ).all()  # fmt: skip
            return [(row.id, row.kind, json.loads(row.body)) for row in rows]

    def traffic(self) -> tuple[list[tuple[dict, float, float | None]], dict[str, TenantSpec]]:
        """Every submission as (job row, submitted_s, cancelled_s), oldest first, and the
        tenants' quotas: the service's traffic. A refused one whose spec was dropped
        (:data:`DROPPED_SPEC`) has ``spec`` None."""
        with self._session() as session:
            rows = session.execute(select(Job).order_by(Job.id)).scalars().all()
            jobs = [({"id": r.id, "spec": json.loads(r.spec) if r.spec != DROPPED_SPEC else None},
                     r.submitted_s, r.cancelled_s) for r in rows]  # fmt: skip
        tenants = {t.name: t.quota for t in self.tenants()}
        return jobs, tenants

    # ----------------------------------------------------------------------------- parts
    def new_part(self) -> tuple[int, float]:
        """A start of the service: (part number, where its clock starts [s]): the end of
        everything recorded so far."""
        with self._session.begin() as session:
            ends = [session.scalar(select(func.max(Job.submitted_s))) or 0.0]
            for (body,) in session.execute(select(WorkRow.body).order_by(WorkRow.id.desc())
                                           .limit(1000)):  # fmt: skip
                ends.append(float(json.loads(body).get("end_s") or 0.0))
            for (body,) in session.execute(select(Step.body)):
                ends.append(float(json.loads(body).get("time_s") or 0.0))
            offset = max(ends)
            part = (session.scalar(select(func.max(Part.id))) or 0) + 1
            session.add(Part(id=part, started_at=time.time(), offset_s=offset))
            return part, offset

    # ----------------------------------------------------------------------------- helpers
    def _lock(self, session, job_id: int) -> None:
        """Lock job ``job_id``'s row for this transaction (PostgreSQL's FOR NO KEY UPDATE, as
        an UPDATE of it takes; SQLite serialises every write). Every transaction that adds a
        job's event takes it before its other writes: they then commit in the order of their
        events' ids, so a stream that has sent id n never later finds an n - 1. It does not
        conflict with the key-share lock a row referring to the job takes, so two writers of
        one job wait for each other and never deadlock.

        On SQLite it is a write of the row to itself: the transaction takes the database's
        write lock first, waiting for it (``busy_timeout``). A read first would keep a snapshot
        open (the SELECT's statement not finished), and its upgrade to a write fails at once,
        "database is locked", whatever the timeout, when another writer committed meanwhile:
        the driver recording a step stopped so, under a burst of requests."""
        if self._sqlite:
            claim = update(Job).where(Job.id == job_id).values(state=Job.state)
            session.execute(claim.execution_options(synchronize_session=False))
            return
        no_key_update = select(Job.id).where(Job.id == job_id).with_for_update(key_share=True)
        session.execute(no_key_update)

    def _event(self, session, job_id: int, kind: str, body: dict) -> None:
        """Add a job event (after :meth:`_lock`)."""
        self._lock(session, job_id)
        session.add(JobEvent(job_id=job_id, kind=kind, body=_dumps(body), at=time.time()))
        session.flush()

    def _add_records(self, session, records: Iterable[dict], part: int) -> None:
        session.add_all(WorkRow(part=part, body=_dumps(json_values(r))) for r in records)

    def _rewards(
        self, session, job_ids: list[int], latest: int | None = None
    ) -> dict[int, list[float | None]]:
        """Each job's reward per step, in step order (``latest``: of its latest so many)."""
        if not job_ids:
            return {}
        steps = select(Step.job_id, Step.step, Step.reward).where(Step.job_id.in_(job_ids))
        if latest is not None:
            newest_first = func.row_number().over(partition_by=Step.job_id,
                                                  order_by=Step.step.desc())  # fmt: skip
            ranked = steps.add_columns(newest_first.label("rank")).subquery()
            steps = select(ranked.c.job_id, ranked.c.step, ranked.c.reward).where(
                ranked.c.rank <= latest
            )
        ordered = steps.subquery()
        out: dict[int, list[float | None]] = {}
        rows = session.execute(select(ordered.c.job_id, ordered.c.reward)
                               .order_by(ordered.c.job_id, ordered.c.step))  # fmt: skip
        for job_id, reward in rows:
            out.setdefault(job_id, []).append(reward)
        return out

    def _view(self, session, job: Job, tenant: str, rewards=None) -> dict:
        if rewards is None:
            rewards = self._rewards(session, [job.id]).get(job.id, [])
        return {
            "id": job.id, "tenant": tenant, "name": job.name, "state": job.state,
            "step": job.step, "steps": job.steps, "rewards": rewards,
            "staleness_max": job.staleness_max, "reason": job.reason,
            "cancel_requested": job.cancel_requested, "submitted_at": job.submitted_at,
            "ended_at": job.ended_at,
        }  # fmt: skip


def _tenant_view(row: Tenant) -> TenantView:
    quota = TenantSpec(max_active_jobs=row.max_active_jobs, max_queued_jobs=row.max_queued_jobs)
    return TenantView(row.id, row.name, quota, row.created_at, row.revoked_at is not None)
