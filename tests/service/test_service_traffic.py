"""A service's traffic replayed in the simulator: ``marlaas traffic`` writes its submissions
as a workload file, and ``marlaas simulate`` runs it; the same admission code decides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from marlaas.cli import main
from marlaas.workload_file import load_workload
from tests.service.conftest import CLUSTER, JOB, serve, store_with_a_job


def test_a_days_submissions_replay_in_the_simulator(tmp_path, capsys):
    served = serve(tmp_path / "data")
    try:
        (tmp_path / "data" / "config.json").write_text(json.dumps(CLUSTER))  # as serve saves it
        carol = served.client(served.key("carol", max_active_jobs=1, max_queued_jobs=1))
        dave = served.client(served.key("dave"))
        long = {**JOB, "rl": {**JOB["rl"], "steps": 5000}}  # runs until it is cancelled
        first, second = carol.submit(long), carol.submit(long)
        with pytest.raises(Exception, match="429"):
            carol.submit(long)
        later = dave.submit(JOB)
        carol.cancel(second["id"])
        dave.wait(later["id"], 0.1, 120)
        carol.cancel(first["id"])
        for client, job in ((carol, first), (carol, second), (dave, later)):
            client.wait(job["id"], 0.1, 120)
        jobs = {j["id"]: j for j in served.client(served.operator_key).jobs()}
    finally:
        served.stop()
    out = tmp_path / "day.yaml"
    assert main(["traffic", "--data", str(tmp_path / "data"), "--out", str(out)]) == 0
    day = load_workload(out)
    assert [j.name for j in day.jobs] == [f"j{i}" for i in sorted(jobs)]
    arrivals = [j.arrival_s for j in day.jobs]
    assert arrivals == sorted(arrivals) and arrivals[-1] > arrivals[0]
    assert day.tenants["carol"].max_active_jobs == 1 and "dave" in day.tenants
    cancelled = {j.name: j.cancel_after_s for j in day.jobs if j.cancel_after_s is not None}
    assert list(cancelled) == [f"j{first['id']}", f"j{second['id']}"]
    assert main(["simulate", str(out), "--out", str(tmp_path / "replay"), "--quiet"]) == 0
    summary = json.loads((tmp_path / "replay" / "summary.json").read_text())
    states = summary["job_states"]
    service_states = {f"j{i}": j["state"] for i, j in jobs.items()}
    # the same admission decides: carol's third job is refused in both worlds
    assert [n for n, s in states.items() if s == "refused"] == [
        n for n, s in service_states.items() if s == "refused"
    ]
    assert (
        states[f"j{later['id']}"]
        == "finished"
        == {"done": "finished"}[service_states[f"j{later['id']}"]]
    )
    # a file that is not a traffic file is not overwritten
    notes = tmp_path / "notes.yaml"
    notes.write_text(yaml.safe_dump({"mine": 1}))
    assert main(["traffic", "--data", str(tmp_path / "data"), "--out", str(notes)]) == 2
    assert yaml.safe_load(notes.read_text()) == {"mine": 1}
    capsys.readouterr()


def test_a_traffic_file_keeps_a_tenant_that_never_submitted(tmp_path):
    from marlaas.core.job_spec import JobSpec
    from marlaas.core.tenant_spec import TenantSpec
    from marlaas.service.config import ServiceConfig
    from marlaas.service.traffic import traffic_yaml

    # a tenant registered with a quota who submitted nothing is in the traffic file's
    # tenants: and not in its jobs: a workload file loads with it (why the loader does not
    # refuse a tenant that no job names)
    config = ServiceConfig.model_validate({k: v for k, v in CLUSTER.items() if k != "service"})
    tenants = {"carol": TenantSpec(max_active_jobs=1), "erin": TenantSpec(max_queued_jobs=0)}
    day = config.workload([JobSpec.model_validate({**JOB, "tenant": "carol"})], tenants)
    path = tmp_path / "day.yaml"
    path.write_text(traffic_yaml(day))
    loaded = load_workload(path)
    assert [j.tenant for j in loaded.jobs] == ["carol"]
    assert loaded.tenants["erin"].max_queued_jobs == 0


def test_traffic_past_what_a_workload_holds_writes_the_newest_that_fit(tmp_path, capsys):
    """Each job within the service's envelope (fdcc98d bounds one to 2,000,000 group-turns),
    two of 1,500,000 together were more than a workload holds: `marlaas traffic` then wrote
    nothing at all, every tenant's traffic ('3,000,000 group-turns in all ... at most
    2,000,000 fit one run'), and so it would with more than 10,000 submissions. It writes the
    newest submissions that fit, saying how many older ones it left out."""
    served = serve(tmp_path / "data")
    try:
        (tmp_path / "data" / "config.json").write_text(json.dumps(CLUSTER))  # as serve saves it
        client = served.client(served.key("erin", max_active_jobs=4, max_queued_jobs=4))
        big = {**JOB, "rl": {**JOB["rl"], "steps": 100_000, "prompts_per_step": 15}}
        ids = [client.submit(big)["id"], client.submit(big)["id"], client.submit(JOB)["id"]]
        for job in ids[:2]:
            client.cancel(job)
    finally:
        served.stop()
    capsys.readouterr()
    out = tmp_path / "day.yaml"
    assert main(["traffic", "--data", str(tmp_path / "data"), "--out", str(out)]) == 0
    err = capsys.readouterr().err.strip()
    assert err == ("marlaas: warning: traffic: the oldest 1 submissions are left out: a "
                   "workload holds at most 10,000 jobs and 2,000,000 group-turns in all (the "
                   "newest that fit are written)")  # fmt: skip
    day = load_workload(out)
    assert [j.name for j in day.jobs] == [f"j{ids[1]}", f"j{ids[2]}"]


def test_traffic_neither_makes_nor_needs_the_keys_secret(tmp_path, capsys):
    """`marlaas traffic` opened the job store as the service does, which makes ``secret.key``
    where there is none: a load generator's reader of a data folder (or of a --db read from
    a folder of its own) wrote the service's secret, and where the database held tenants it
    refused to run at all ('secret.key: missing ... restore it'). It reads jobs and quotas,
    never a key: it neither reads nor makes the secret."""
    data = tmp_path / "data"
    store_with_a_job(data)
    (data / "secret.key").unlink()  # kept apart from the database, or lost
    out = tmp_path / "day.yaml"
    assert main(["traffic", "--data", str(data), "--out", str(out)]) == 0, capsys.readouterr()
    assert not (data / "secret.key").exists()
    assert [j.tenant for j in load_workload(out).jobs] == ["frank"]
    fresh = tmp_path / "fresh"  # a folder that holds only the cluster file: nothing is made
    fresh.mkdir()
    (fresh / "config.json").write_text(json.dumps(CLUSTER))
    assert main(["traffic", "--data", str(fresh), "--out", str(tmp_path / "none.yaml")]) == 2
    assert "no submissions yet" in capsys.readouterr().err
    assert sorted(p.name for p in fresh.iterdir()) == ["config.json"]  # no secret, no database


def two_tenants_at_their_quota(tmp_path: Path, db_url: str | None, **limits):
    """A service whose cluster file's ``service`` section adds ``limits`` (the file saved as
    serve saves it), and its tenants gina and hal (1 active job, none queued), each running a
    long job: another submission of theirs is refused. (the service, gina's client, hal's,
    the long job, the running jobs' ids); the caller stops the service."""
    cluster = {**CLUSTER, "service": {**CLUSTER["service"], **limits}}
    served = serve(tmp_path / "data", db_url, cluster=cluster)
    try:
        (tmp_path / "data" / "config.json").write_text(json.dumps(cluster))  # as serve saves it
        gina = served.client(served.key("gina", max_active_jobs=1, max_queued_jobs=0))
        hal = served.client(served.key("hal", max_active_jobs=1, max_queued_jobs=0))
        long = {**JOB, "rl": {**JOB["rl"], "steps": 100_000}}  # holds the quota
        running = [gina.submit(long)["id"], hal.submit(long)["id"]]
    except BaseException:
        served.stop()
        raise
    return served, gina, hal, long, running


def test_refused_submissions_keep_the_spec_of_each_tenants_newest_only(tmp_path, db_url,
                                                                       capsys):  # fmt: skip
    """A tenant's refused submissions have no bound, and the store kept each one's spec:
    30 near 1 MiB each made about 70 MB of the job store. The spec of each tenant's newest
    ``service.refused_specs_kept`` refusals is kept; an older one keeps its row and reason,
    and `traffic` leaves it out, saying so. On SQLite and PostgreSQL."""
    from sqlalchemy import func, select

    from marlaas.service.db import Job

    served, gina, hal, long, running = two_tenants_at_their_quota(
        tmp_path, db_url, refused_specs_kept=4
    )
    try:
        task = {"prompt": "p" * 200_000, "func": "f", "tests": [[[1], 2]]}
        big = {**long, "env": {"name": "python_exec", "args": {"tasks": [task]}}}
        for client, times in ((gina, 12), (hal, 2)):
            for _ in range(times):
                with pytest.raises(Exception, match="429"):
                    client.submit(big)
        gina.cancel(running[0])
        hal.cancel(running[1])
        with served.store._session() as session:
            columns = (Job.id, Job.tenant_id, Job.state, Job.reason, func.length(Job.spec))
            rows = session.execute(select(*columns).order_by(Job.id)).all()
    finally:
        served.stop()
    refused = [row for row in rows if row.state == "refused"]
    assert len(refused) == 14 and all(row.reason for row in refused)  # every row, its reason
    tenants = sorted({row.tenant_id for row in refused})
    gina_kept = [row[4] > 200_000 for row in refused if row.tenant_id == tenants[0]]
    assert gina_kept == [False] * 8 + [True] * 4  # the newest 4 of 12
    assert [row[4] > 200_000 for row in refused if row.tenant_id == tenants[1]] == [True] * 2
    assert sum(row[4] for row in refused) < 7 * 201_000  # 6 specs, not 14
    out = tmp_path / "day.yaml"
    at = ["--db", db_url] if db_url else []
    capsys.readouterr()
    assert main(["traffic", "--data", str(tmp_path / "data"), *at, "--out", str(out)]) == 0
    assert capsys.readouterr().err.strip() == (
        "marlaas: warning: traffic: 8 older refused submissions are left out: the service "
        "keeps the spec of each tenant's newest refused ones only (service: "
        "refused_specs_kept, 4)"
    )
    assert len(load_workload(out).jobs) == 2 + 6


def test_a_tenants_refused_submissions_past_the_newest_kept_are_deleted(tmp_path, db_url,
                                                                       capsys):  # fmt: skip
    """Refused submissions past a tenant's newest ``refused_specs_kept`` lost their spec,
    but each kept its row, reason and two events for good: a tenant submitting in a loop
    past its quota grew the store without bound. Each tenant's newest
    ``service.refused_kept`` are kept; an older one is deleted with its events as the next
    refusal is recorded (its id then 404, as a job that never was), and jobs that ran are
    never deleted. On SQLite and PostgreSQL."""
    from sqlalchemy import select

    from marlaas.client import ServiceError
    from marlaas.service.db import Job, JobEvent

    served, gina, hal, long, running = two_tenants_at_their_quota(
        tmp_path, db_url, refused_kept=5, refused_specs_kept=2
    )
    try:
        refused: dict[str, list[int]] = {"gina": [], "hal": []}
        for name, client, times in (("gina", gina, 12), ("hal", hal, 2)):
            for _ in range(times):
                with pytest.raises(ServiceError, match="429"):
                    client.submit(long)
                refused[name].append(max(job["id"] for job in client.jobs()))
        assert len(set(refused["gina"])) == 12
        with pytest.raises(ServiceError, match="404"):
            gina.job(refused["gina"][0])
        assert gina.job(refused["gina"][-5])["state"] == "refused"
        gina.cancel(running[0])
        hal.cancel(running[1])
        with served.store._session() as session:
            jobs = dict(session.execute(select(Job.id, Job.state)).all())
            evented = set(session.scalars(select(JobEvent.job_id)).all())
    finally:
        served.stop()
    kept = {*refused["gina"][-5:], *refused["hal"]}
    assert {job for job, state in jobs.items() if state == "refused"} == kept
    assert set(running) <= set(jobs)  # jobs that ran stay
    assert evented == set(jobs)  # the deleted ones' events went with them
    out = tmp_path / "day.yaml"
    at = ["--db", db_url] if db_url else []
    capsys.readouterr()
    assert main(["traffic", "--data", str(tmp_path / "data"), *at, "--out", str(out)]) == 0
    assert "3 older refused submissions are left out" in capsys.readouterr().err
    assert len(load_workload(out).jobs) == 2 + 2 + 2  # the running ones, 2 specs each
