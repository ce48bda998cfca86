"""The job store and the operator's commands: keys kept only as keyed hashes, tenants added,
listed and revoked, the schema migrated by Alembic, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from sqlalchemy import text

from marlaas.cli import main
from marlaas.core.tenant_spec import TenantSpec
from marlaas.service.config import ServiceConfig
from marlaas.service.db import database_url, open_database
from marlaas.service.serve_command import _record_base_model
from marlaas.service.store import JobStore, TenantError


@pytest.fixture
def store(tmp_path, db_url):
    opened = JobStore(database_url(tmp_path, db_url), tmp_path)
    yield opened
    opened.close()


def test_a_key_is_kept_only_as_its_keyed_hash(store, tmp_path, db_url):
    key = store.add_tenant("alice", TenantSpec(max_active_jobs=2))
    assert store.authenticate(key).name == "alice"
    assert store.authenticate(key + "x") is None and store.authenticate("") is None
    with store.engine.connect() as connection:
        hashes = connection.execute(text("SELECT key_hash FROM tenants")).scalars().all()
    assert key not in hashes[0] and len(hashes[0]) == 64
    if db_url is None:  # nowhere in the database file either
        assert key.encode() not in (tmp_path / "service.db").read_bytes()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret.key").write_bytes(os.urandom(32))
    other = JobStore(database_url(tmp_path, db_url), tmp_path / "elsewhere")
    try:  # another secret: the same key no longer matches (the hash is keyed)
        assert other.authenticate(key) is None
    finally:
        other.close()


def test_tenants_are_added_once_listed_and_revoked(store):
    store.add_tenant("alice")
    with pytest.raises(TenantError, match="exists"):
        store.add_tenant("alice")
    with pytest.raises(TenantError, match="tenant name"):
        store.add_tenant("bad\nname")
    with pytest.raises(TenantError) as err:  # a long name is echoed cut short
        store.add_tenant("x" * 5000)
    assert str(err.value) == f"tenant name {'x' * 40!r}...: at most 64 characters (got 5000)"
    store.add_tenant("bob", TenantSpec(max_queued_jobs=0))
    assert [(t.name, t.quota.max_queued_jobs) for t in store.tenants()] == [
        ("alice", None), ("bob", 0)]  # fmt: skip
    store.revoke_tenant("bob")
    assert [t.revoked for t in store.tenants()] == [False, True]
    with pytest.raises(TenantError, match="no tenant"):
        store.revoke_tenant("carol")


RULE = "a tenant name is ASCII letters, digits, '-', '_' and '.' only"


@pytest.mark.parametrize("name, says", [
    ("", "must not be empty"),
    ("a b", f"holds ' ': {RULE}"),
    ("tab\tname", f"holds '\\t': {RULE}"),
    ("nul\x00", f"holds '\\x00': {RULE}"),
    ("café", f"holds 'é': {RULE}"),
    ("a/b", f"holds '/': {RULE}"),
    ("a:b", f"holds ':': {RULE}"),
    (".hidden", "must not start with '.'"),
    ("-rf", "must not start with '-' (a command line reads it as an option)"),
    ("x" * 65, "at most 64 characters (got 65)"),
])  # fmt: skip
def test_a_new_tenants_name_is_letters_digits_dashes_underscores_and_dots(store, name, says):
    """A tenant could be named with a space, a tab, a slash or 128 characters (any printable
    name): `tenants list`'s columns then misaligned, and the name went as it was into log
    lines and messages. A new tenant's name is refused, saying what is wrong with it."""
    with pytest.raises(TenantError) as err:
        store.add_tenant(name)
    assert str(err.value).endswith(f": {says}"), str(err.value)
    assert str(err.value).startswith("tenant name ")
    assert store.tenants() == []
    for good in ("a", "Team_1.prod-2", "x" * 64, "9lives"):
        store.add_tenant(good)
    assert [t.name for t in store.tenants()] == ["a", "Team_1.prod-2", "x" * 64, "9lives"]


def test_a_tenant_stored_before_the_name_rule_is_listed_quoted_and_stays_usable(
    store, tmp_path, db_url, capsys
):
    """A tenant named before the rule (here: a space, 100 characters) keeps its key, is
    listed quoted in columns that line up, and its quotas are set, its key revoked and
    given again by its name as stored."""
    from marlaas.service import keys
    from marlaas.service.db import Tenant

    old_key, old_names = "an old key", ["old name", "y" * 100]
    with store._session.begin() as session:
        for number, name in enumerate(old_names):
            key = old_key if number == 0 else f"{old_key} {number}"
            session.add(Tenant(name=name, key_hash=keys.key_hash(store._keyed(), key),
                               created_at=time.time()))  # fmt: skip
    store.add_tenant("alice")
    assert store.authenticate(old_key).name == "old name"
    store.set_quota("old name", max_active_jobs=3)
    assert store.quota("old name").max_active_jobs == 3
    db = [] if db_url is None else ["--db", db_url]
    assert main(["tenants", "list", "--data", str(tmp_path), *db]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert [row.split("  ")[0] for row in rows[1:]] == ["'old name'", f"{'y' * 40!r}...",
                                                        "alice"]  # fmt: skip
    end = rows[0].index("queued") + len("queued")  # the quota columns end where the header's do
    quotas = [row[end - 13 : end] for row in rows[1:]]
    assert quotas == ["     3      -", "     -      -", "     -      -"], rows
    store.revoke_tenant("old name")
    assert store.authenticate(old_key) is None
    new_key = store.add_tenant("old name")  # its name as stored: a new key
    assert store.authenticate(new_key).name == "old name"


def test_two_operators_changing_different_quotas_of_one_tenant_keep_both(
    tmp_path, db_url, monkeypatch, capsys
):
    """`tenants quota NAME --max-active-jobs 2` read the tenant's quotas, then wrote both
    back in another transaction: another operator's `--max-queued-jobs 0` committed in
    between was overwritten by the value read before it (a lost update). Only the quota a
    flag names is written now, read and written in one transaction, on SQLite and
    PostgreSQL."""
    data, db = tmp_path / "data", [] if db_url is None else ["--db", db_url]
    for name in ("alice", "bob"):
        assert main(["tenants", "add", name, "--data", str(data), *db,
                     "--max-queued-jobs", "1"]) == 0  # fmt: skip
    capsys.readouterr()
    other = JobStore(database_url(data, db_url), data)  # the other operator's
    set_quota = JobStore.set_quota

    def after_the_other_operator(self, *args, **kwargs):
        with other.engine.begin() as connection:  # committed before this one writes
            connection.execute(text("UPDATE tenants SET max_queued_jobs = 0 WHERE name = 'bob'"))
        return set_quota(self, *args, **kwargs)

    monkeypatch.setattr(JobStore, "set_quota", after_the_other_operator)
    try:
        assert main(["tenants", "quota", "bob", "--data", str(data), *db,
                     "--max-active-jobs", "2"]) == 0  # fmt: skip
        assert capsys.readouterr().out.strip() == (
            "tenant bob: at most 2 active and 0 queued (from its next request)"
        )  # the quota it names, and the other operator's
        assert other.quota("bob") == TenantSpec(max_active_jobs=2, max_queued_jobs=0)
        assert other.quota("alice") == TenantSpec(max_queued_jobs=1)
    finally:
        other.close()
    assert main(["tenants", "quota", "carol", "--data", str(data), *db,
                 "--max-active-jobs", "2"]) == 2  # fmt: skip
    assert capsys.readouterr().err.strip() == (
        "marlaas: error: tenants quota: no tenant named 'carol'"
    )


def test_tenants_add_refuses_a_bad_name_before_it_makes_the_data_folder(tmp_path, capsys):
    data = tmp_path / "fresh"
    assert main(["tenants", "add", "a b", "--data", str(data)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"marlaas: error: tenants add: tenant name 'a b': holds ' ': {RULE}"
    )
    assert not data.exists()


def test_a_revoked_tenant_added_again_gets_a_new_key_and_its_old_one_stays_refused(store):
    old = store.add_tenant("alice")
    store.revoke_tenant("alice")
    new = store.add_tenant("alice", TenantSpec(max_active_jobs=1))
    assert new != old and store.authenticate(old) is None
    assert store.authenticate(new).name == "alice"
    [alice] = store.tenants()
    assert not alice.revoked and alice.quota.max_active_jobs == 1
    with pytest.raises(TenantError, match=r"exists \(revoke it first to give it a new key"):
        store.add_tenant("alice")


def test_the_schema_is_alembics_newest_and_migrating_again_changes_nothing(store):
    with store.engine.connect() as connection:
        revision = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    assert revision == "0001"
    store.add_tenant("alice")
    open_database(store.url)[0].dispose()  # a second open migrates nothing away
    assert [t.name for t in store.tenants()] == ["alice"]


def test_tenants_commands_print_the_key_alone_on_the_last_line(tmp_path, capsys):
    data = str(tmp_path / "data")
    assert main(["tenants", "add", "alice", "--data", data, "--max-active-jobs", "3"]) == 0
    out, err = capsys.readouterr()
    key = out.strip().splitlines()[-1]
    assert key.startswith("mlk_") and len(out.strip().splitlines()) == 1 and "shown once" in err
    assert main(["tenants", "add", "alice", "--data", data]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["tenants", "list", "--data", data]) == 0
    listed = capsys.readouterr().out
    assert "alice" in listed and key not in listed
    assert main(["tenants", "revoke", "alice", "--data", data]) == 0
    assert main(["tenants", "list", "--data", data]) == 0
    assert "(revoked)" in capsys.readouterr().out
    assert main(["tenants", "revoke", "nobody", "--data", data]) == 2


def test_a_data_folder_that_is_not_a_services_is_refused(tmp_path, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("keep me")
    assert main(["tenants", "list", "--data", str(tmp_path / "mine")]) == 2
    assert "thesis.tex" in capsys.readouterr().err
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "keep me"


BAD_DATABASES = [
    ("bogus://x", "database bogus://x: not a usable database URL (Can't load plugin"),
    ("not a url", "database (the --db URL): not a usable database URL (Could not parse"),
    ("sqlite:////nonexistent/x.db", "cannot open it (unable to open database file)"),
    ("postgresql+psycopg://u:hunter2@127.0.0.1:1/db",
     "database postgresql+psycopg://u:***@127.0.0.1:1/db: cannot open it (connection"),
]  # fmt: skip


@pytest.mark.parametrize(("url", "says"), BAD_DATABASES)
def test_a_database_that_cannot_be_opened_is_one_line_and_writes_nothing(
    tmp_path, capsys, url, says
):
    """It was SQLAlchemy's traceback (and serve left an operator key and its lock behind)."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("service: {max_sequence_tokens: 64}\n")
    data = str(tmp_path / "data")
    for args in (["tenants", "add", "alice", "--data", data], ["tenants", "list", "--data", data],
                 ["serve", str(cluster), "--simulate", "--data", data]):  # fmt: skip
        if args[1] == "list":
            (tmp_path / "data").mkdir()
        assert main([*args, "--db", url]) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.startswith("marlaas: error: ") and says in err and "\n" not in err, err
        assert "hunter2" not in err and "Traceback" not in err
        expected = ["cluster.yaml", "data"] if args[1] == "list" else ["cluster.yaml"]
        assert sorted(p.name for p in tmp_path.iterdir()) == expected, args
        if args[1] == "list":
            assert list((tmp_path / "data").iterdir()) == []
            (tmp_path / "data").rmdir()


def test_traffic_and_tenants_list_on_a_folder_never_served_make_nothing(tmp_path, capsys):
    """They made the folder, its database and its secret before saying so."""
    missing, empty = tmp_path / "missing", tmp_path / "empty"
    empty.mkdir()
    out = str(tmp_path / "w.yaml")
    for data in (missing, empty):
        assert main(["traffic", "--data", str(data), "--out", out]) == 2
        assert "has no config.json; has it been served?" in capsys.readouterr().err
    for action in (["list"], ["revoke", "alice"]):
        assert main(["tenants", *action, "--data", str(missing)]) == 2
        assert "no such data folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
    assert list(empty.iterdir()) == []


def test_a_damaged_or_missing_secret_or_config_is_one_line_and_makes_no_new_secret(
    tmp_path, capsys
):
    """A damaged secret.key or config.json was a traceback; a missing secret.key was made
    anew, silently, and every tenant's key was refused from then on (401, no word of why)."""
    data = tmp_path / "data"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("service: {max_sequence_tokens: 64}\n")
    assert main(["tenants", "add", "alice", "--data", str(data)]) == 0
    capsys.readouterr()
    (data / "config.json").write_text("{bad")
    out = str(tmp_path / "w.yaml")
    assert main(["traffic", "--data", str(data), "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"marlaas: error: traffic: {data / 'config.json'}: damaged (")
    assert "\n" not in err and "Traceback" not in err
    secret = data / "secret.key"
    secret.write_bytes(b"short")
    assert main(["tenants", "list", "--data", str(data)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"marlaas: error: {secret}: damaged (shorter than 32 bytes); restore it"
    )
    secret.unlink()
    for args in (
        ["tenants", "list", "--data", str(data)],
        ["serve", str(cluster), "--simulate", "--port", "0", "--data", str(data)],
    ):
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"marlaas: error: {secret}: missing, and the database holds 1 "
                              "tenant(s)' keys made with it: restore it"), err  # fmt: skip
        assert "\n" not in err and not secret.exists()


def test_serve_refuses_another_base_model_for_a_data_folders_adapters(tmp_path, capsys):
    def model(name, hidden):
        folder = tmp_path / name
        folder.mkdir()
        config = {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": 2,
                  "num_attention_heads": 2}  # fmt: skip
        (folder / "config.json").write_text(json.dumps(config))
        (folder / "model.safetensors").write_bytes(b"weights")
        (folder / "tokenizer.json").write_text("{}")
        return folder

    first, other = model("first", 128), model("other", 256)
    data = tmp_path / "data"
    for base in (first, other):
        (tmp_path / f"{base.name}.yaml").write_text(
            f"base_model: {{name: tiny, path: {base}}}\nservice: {{max_sequence_tokens: 64}}\n"
        )
    _record_base_model(data_dir(data), ServiceConfig.model_validate(
        {"base_model": {"name": "tiny", "path": str(first)}}), tmp_path)  # fmt: skip
    assert main(["serve", str(tmp_path / "other.yaml"), "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert "were trained on base model 'tiny'" in err and "another --data folder" in err
    assert sorted(p.name for p in data.iterdir()) == ["base_model.json"]  # nothing written


def data_dir(path):
    path.mkdir()
    return path


def test_a_restart_continues_live_jobs_and_fails_one_that_no_longer_fits(tmp_path):
    from tests.service.conftest import CLUSTER, JOB, serve

    data = tmp_path / "data"
    served = serve(data)
    client = served.client(served.key("alice", max_active_jobs=5))
    long = {**JOB, "rl": {**JOB["rl"], "steps": 5000}}
    small, large = client.submit(long)["id"], client.submit({**long, "lora_rank": 16})["id"]
    served.stop()
    narrower = {**CLUSTER, "service": {**CLUSTER["service"], "max_lora_rank": 8}}
    served = serve(data, cluster=narrower)
    try:
        operator = served.client(served.operator_key)
        after = {j["id"]: j for j in operator.jobs()}
        assert after[large]["state"] == "failed" and "max_lora_rank" in after[large]["reason"]
        assert after[small]["state"] in ("queued", "running")
        step, deadline = after[small]["step"], time.monotonic() + 60
        while operator.job(small)["step"] <= step:  # it trains on from where it was
            assert time.monotonic() < deadline
            time.sleep(0.05)
        operator.cancel(small)
    finally:
        served.stop()


def test_a_job_that_failed_stays_failed_when_the_service_stops_before_its_end(tmp_path):
    """A job that fails is cancelled in the scheduler, and ends once its work in flight has
    (an environment step may hold it up to max_env_step_s). Why it failed was held in memory
    only: a service stopped in between resumed it at its last durable step, as if it had not
    failed. The reason is kept in the store at once, and a restart marks the job failed."""
    from tests.service.conftest import JOB, serve

    data = tmp_path / "data"
    served = serve(data)
    try:
        client = served.client(served.key("alice", max_active_jobs=5))
        long = {**JOB, "rl": {**JOB["rl"], "steps": 5000}}
        failing, other = client.submit(long)["id"], client.submit(long)["id"]
        # as the driver tells the service of a job whose work failed, the moment it does
        served.runner._job_failed(f"j{failing}", "reset() of job 'j1' raised OSError: gone")
        assert client.job(failing)["reason"] == "reset() of job 'j1' raised OSError: gone"
    finally:
        served.stop()  # before the job's end: its failure is not recorded by an end
    served = serve(data)
    try:
        operator = served.client(served.operator_key)
        after = operator.job(failing)
        assert (after["state"], after["reason"]) == (
            "failed",
            "reset() of job 'j1' raised OSError: gone",
        )
        assert operator.job(other)["state"] in ("queued", "running")  # it continues
        operator.cancel(other)
    finally:
        served.stop()


def test_serve_refuses_a_cluster_file_its_live_jobs_no_longer_fit(tmp_path, capsys):
    """``marlaas serve`` with a smaller envelope failed every such job for good, silently."""
    from tests.service.conftest import CLUSTER, JOB, serve

    data = tmp_path / "data"
    served = serve(data)
    try:
        client = served.client(served.key("alice", max_active_jobs=5))
        wide = client.submit({**JOB, "lora_rank": 16, "rl": {**JOB["rl"], "steps": 5000}})["id"]
    finally:
        served.stop()
    (data / "config.json").write_text("the last one\n")
    narrower = tmp_path / "narrower.yaml"
    narrower.write_text(yaml.safe_dump(
        {**CLUSTER, "service": {**CLUSTER["service"], "max_lora_rank": 8}}))  # fmt: skip
    assert main(["serve", str(narrower), "--simulate", "--data", str(data)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("marlaas: error: serve: 1 queued or running job(s) no longer fit")
    assert f"job {wide}: lora_rank: 16 is above" in err and "\n" not in err, err
    assert (data / "config.json").read_text() == "the last one\n"  # nothing written
    served = serve(data)
    try:  # the job was left as it was
        assert served.client(served.operator_key).job(wide)["state"] in ("queued", "running")
    finally:
        served.stop()


@pytest.mark.parametrize("speed", ["0", "-1", "nan", "inf", "1e7", "fast"])
def test_serve_refuses_a_speed_that_is_not_a_finite_positive_number(tmp_path, capsys, speed):
    """--speed inf hung the service and wrote an infinite clock that no restart could read."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("service: {max_sequence_tokens: 64}\n")
    assert main(["serve", str(cluster), "--simulate", "--speed", speed,
                 "--data", str(tmp_path / "data")]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "--speed" in err and "is not a number" in err and "\n" not in err, err
    assert not (tmp_path / "data").exists()


def test_submit_names_a_nan_in_the_spec_file_in_one_line(tmp_path, capsys, monkeypatch):
    """It was a traceback from JSON encoding; nothing is sent (no service listens here)."""
    spec = tmp_path / "job.yaml"
    spec.write_text("name: x\nrl: {steps: .nan}\n")
    monkeypatch.setenv("MARLAAS_URL", "http://127.0.0.1:9")
    assert main(["submit", str(spec)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"marlaas: error: {spec}: spec.rl.steps: not a finite number (JSON "
                   "carries no NaN or infinity)")  # fmt: skip


def test_serve_on_a_port_in_use_is_one_line_and_writes_nothing(tmp_path, capsys):
    """uvicorn bound the port only after the jobs resumed, printed "serving on" first and
    exited with its own code 3."""
    import socket

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("service: {max_sequence_tokens: 64}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(cluster), "--simulate", "--port", str(port),
                     "--data", str(tmp_path / "data")]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    says = f"serve: cannot listen on 127.0.0.1:{port} (Address already in use)"
    assert err == f"marlaas: error: {says}"
    assert not (tmp_path / "data").exists()


def test_serve_listens_before_it_says_it_serves(tmp_path, monkeypatch, capsys):
    """serve printed "serving on http://..." with its socket bound but not yet listening
    (uvicorn listens once it has started): a client that connected on that line, as a
    script waiting for it does, was refused (ECONNREFUSED; seen restarting a service in a
    test). It listens before it says so; connections wait in the backlog."""
    import socket

    import uvicorn

    connected = []

    def run(self, sockets):  # what a client does the moment the line is printed
        del self
        assert "serving on http://127.0.0.1:" in capsys.readouterr().err
        with socket.socket() as client:
            client.settimeout(5)
            connected.append(client.connect_ex(sockets[0].getsockname()))

    monkeypatch.setattr(uvicorn.Server, "run", run)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("service: {max_sequence_tokens: 64}\n")
    assert main(["serve", str(cluster), "--simulate", "--port", "0",
                 "--data", str(tmp_path / "data")]) == 0  # fmt: skip
    assert connected == [0]


def test_serve_on_a_data_folder_another_command_holds_names_data_not_out(tmp_path, capsys):
    """The refusal said to "choose another --out", an option serve does not have."""
    from marlaas.output.lock import lock_folder, unlock

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("service: {max_sequence_tokens: 64}\n")
    data = tmp_path / "data"
    data.mkdir()
    held = lock_folder(data)  # as a service serving it holds it
    try:
        assert main(["serve", str(cluster), "--simulate", "--port", "0",
                     "--data", str(data)]) == 2  # fmt: skip
    finally:
        unlock(data, held)
    err = capsys.readouterr().err.strip()
    assert err.endswith("wait for it to finish or choose another --data"), err
    assert "--out" not in err and "\n" not in err


def jobs_of_alice_and_bob(store: JobStore, count: int) -> dict[str, list[int]]:
    """``count`` queued jobs each of two new tenants, alice and bob, by tenant name."""
    from marlaas.core.job_spec import JobSpec

    ids = {}
    for name in ("alice", "bob"):
        tenant = store.authenticate(store.add_tenant(name))
        spec = JobSpec.model_validate({"name": "x", "tenant": name})
        ids[name] = [store.add_job(tenant, spec, 0.0) for _ in range(count)]
    return ids


def test_a_start_drops_the_specs_of_refused_submissions_past_a_lowered_bound(store):
    """``service.refused_specs_kept`` lowered between two starts (or a store from before the
    bound) left the older refusals' specs: a refusal drops one spec, the one just past the
    bound. The start drops every one past it, each tenant's newest kept."""
    ids = jobs_of_alice_and_bob(store, 5)
    for job in ids["alice"] + ids["bob"]:
        store.set_state(job, "refused", "a quota")  # no bound: every spec kept
    assert store.drop_refused_specs(2) == 6
    assert store.drop_refused_specs(2) == 0
    rows, _ = store.traffic()
    kept = {row["id"] for row, _, _ in rows if row["spec"] is not None}
    assert kept == {*ids["alice"][-2:], *ids["bob"][-2:]}
    assert all(store.job(job)["reason"] == "a quota" for job in ids["alice"] + ids["bob"])


def test_a_start_deletes_the_refused_submissions_past_a_lowered_bound(store):
    """A store from before ``service.refused_kept`` (or a bound lowered between two starts)
    kept every refused row and its events. The start deletes each tenant's refused ones
    past its newest ``refused_kept``, events included; jobs that did not end refused stay."""
    from sqlalchemy import func, select

    from marlaas.service.db import JobEvent

    ids = jobs_of_alice_and_bob(store, 6)
    for first, *rest in ids.values():
        for job in rest:
            store.set_state(job, "refused", "a quota")  # no bound: every row kept
        store.set_state(first, "done")
    assert store.delete_refused(2) == 6
    assert store.delete_refused(2) == 0
    left = {job["id"] for job in store.jobs()}
    assert left == {*ids["alice"][:1], *ids["alice"][-2:], *ids["bob"][:1], *ids["bob"][-2:]}
    with store._session() as session:
        evented = set(session.scalars(select(JobEvent.job_id).distinct()).all())
        assert evented == left
        assert session.scalar(select(func.count(JobEvent.id))) == 6 * 2  # queued, then ended
    with pytest.raises(ValueError, match="refused_kept must be at least 1, got 0"):
        store.delete_refused(0)


def test_a_refused_job_that_made_steps_is_never_deleted(store):
    """A job that ran can end refused: a restart submits it again at its last durable step,
    and a quota lowered meanwhile (or a cluster it no longer fits) refuses it. Deleting it
    as a refused submission past the bound broke its steps' foreign key: the refusal's
    transaction failed (IntegrityError: nothing recorded) and so did the start's
    delete_refused. Only refused submissions without a step are deleted."""
    from marlaas.core.job_spec import JobSpec

    alice = store.authenticate(store.add_tenant("alice"))
    spec = JobSpec.model_validate({"name": "x", "tenant": "alice"})
    ran, *later = (store.add_job(alice, spec, 0.0) for _ in range(4))
    store.set_state(ran, "running")
    store.step_done(ran, {"step": 0, "mean_reward": 0.5}, [], 0)
    store.set_state(ran, "refused", "a quota lowered", refused_rows_kept=1)
    for job in later[:2]:
        store.set_state(job, "refused", "a quota", refused_rows_kept=1)
    assert store.job(ran)["state"] == "refused" and store.rewards(ran) == [0.5]
    assert store.job(later[0]) is None and store.job(later[1])["state"] == "refused"
    store.set_state(later[2], "done")
    assert store.delete_refused(1) == 0
    assert {job["id"] for job in store.jobs()} == {ran, *later[1:]}


def test_a_refusal_out_of_submission_order_keeps_no_spec_past_the_bound(store):
    """A refusal dropped the one spec just past the tenant's newest ``refused_kept``: one of
    an older submission refused after newer ones (a queued job refused past a quota lowered
    meanwhile; refusals of one round in another order) fell further back, past a spec
    already dropped, and its own spec stayed until the next start."""
    from marlaas.core.job_spec import JobSpec

    alice = store.authenticate(store.add_tenant("alice"))
    spec = JobSpec.model_validate({"name": "x", "tenant": "alice"})
    ids = [store.add_job(alice, spec, 0.0) for _ in range(4)]
    for job in reversed(ids):  # the newest first
        store.set_state(job, "refused", "a quota", refused_kept=1)
    rows, _ = store.traffic()
    assert {row["id"] for row, _, _ in rows if row["spec"] is not None} == {ids[-1]}
    assert store.drop_refused_specs(1) == 0


def test_jobs_that_ended_however_many_never_hide_one_that_runs(store):
    """The list was the newest 1,000 jobs: a tenant's 1,000 refused submissions (no quota
    bounds them; 30 s of requests) hid every other tenant's running jobs from the operator's
    list and dashboard, and its own from itself."""
    from marlaas.core.job_spec import JobSpec

    alice, bob = (store.add_tenant(name) for name in ("alice", "bob"))
    alice, bob = store.authenticate(alice), store.authenticate(bob)
    spec = JobSpec.model_validate({"name": "x", "tenant": "alice"})
    queued = store.add_job(alice, spec, 0.0)
    running = store.add_job(alice, spec, 0.0)
    store.set_state(running, "running")
    mine = store.add_job(bob, spec, 0.0)
    store.set_state(mine, "running")
    refused = [store.add_job(bob, spec, 0.0) for _ in range(5)]
    for job in refused:
        store.set_state(job, "refused", "a quota")
    newest = refused[::-1]
    assert [j["id"] for j in store.jobs(None, limit=3)] == [*newest[:3], mine, running, queued]
    assert [j["id"] for j in store.jobs(bob.id, limit=2)] == [*newest[:2], mine]
    assert [j["id"] for j in store.jobs(alice.id, limit=0)] == [running, queued]
    assert len(store.jobs(None)) == 8  # under the limit: every job


def test_the_list_of_jobs_carries_each_jobs_latest_rewards_and_one_job_all(store):
    """The list carried every step's reward of every job listed: 1,000 jobs of 100,000 steps
    each made every poll of the dashboard 100 M numbers. It carries the latest
    LISTED_REWARDS of each (in step order); one job's own view carries all of them."""
    from marlaas.core.job_spec import JobSpec
    from marlaas.service.store import LISTED_REWARDS

    alice = store.authenticate(store.add_tenant("alice"))
    spec = JobSpec.model_validate({"name": "x", "tenant": "alice"})
    long, short = store.add_job(alice, spec, 0.0), store.add_job(alice, spec, 0.0)
    steps = LISTED_REWARDS + 30
    for step in range(steps):
        store.step_done(long, {"step": step, "mean_reward": step / 1000}, [], 0)
    for step in range(3):
        store.step_done(short, {"step": step, "mean_reward": None if step == 1 else -step}, [], 0)
    listed = {job["id"]: job["rewards"] for job in store.jobs(None)}
    assert listed[long] == [step / 1000 for step in range(30, steps)]
    assert listed[short] == [0, None, -2]
    assert store.job(long)["rewards"] == [step / 1000 for step in range(steps)]


def test_serve_refuses_an_environment_that_cannot_run_on_this_host(tmp_path, capsys, monkeypatch):
    """A real service that lists python_exec where its sandbox cannot run took every job
    that named it (201), and each failed at its first step (SandboxUnavailable, 4 times);
    ``marlaas train`` refuses such a workload before any model loads."""
    from marlaas.envs import sandbox_runtime

    monkeypatch.setattr(sandbox_runtime, "_probe", lambda: "`bwrap` not found on PATH")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("service: {max_sequence_tokens: 64, environments: [arithmetic, "
                       "python_exec]}\n")  # fmt: skip
    data = tmp_path / "data"
    assert main(["serve", str(cluster), "--port", "0", "--data", str(data)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"marlaas: error: serve: {cluster}: service.environments names "
                          "'python_exec', which cannot run on this host (the code sandbox is "
                          "unavailable: `bwrap` not found on PATH; install bubblewrap")  # fmt: skip
    assert "\n" not in err and not data.exists()


def _serve_under(limits: tuple[int, int], *args: str) -> subprocess.Popen:
    """``marlaas serve ARGS`` in a process whose RLIMIT_NOFILE is ``limits`` (soft, hard)."""
    import resource
    import sys

    return subprocess.Popen(
        [sys.executable, "-m", "marlaas", "serve", *args],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limits),
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_serve_makes_room_for_its_connections_and_its_own_files(tmp_path):
    """The connection limit keeps clients from taking the descriptors the database and the
    adapters need; but serve ran under whatever soft RLIMIT_NOFILE it was given (1,024 on
    many systems), so from --max-streams 500 on, or under a lower limit, clients could take
    them all. serve raises the soft limit to its connections + 512, and refuses, in one line,
    a hard limit below that."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("service: {max_sequence_tokens: 64}\n")
    common = (str(cluster), "--simulate", "--port", "0")
    refused = _serve_under((600, 600), *common, "--data", str(tmp_path / "a"))
    try:
        _, err = refused.communicate(timeout=60)
    finally:
        refused.kill()  # (it served, before: none is left running)
        refused.wait()
    assert refused.returncode == 2, err
    assert err.strip().endswith(
        "serve: 528 connections (the default --max-streams (256)) and 512 files of the "
        "service's own need 1,040 file descriptors; this process may open 600 (ulimit -Hn): "
        "raise the limit, or give a smaller --max-streams"), err  # fmt: skip
    assert not (tmp_path / "a").exists()
    served = _serve_under((600, 4096), *common, "--max-streams", "1000",
                          "--data", str(tmp_path / "b"))  # fmt: skip
    try:
        for line in served.stderr:
            if "serving on" in line:
                break
        limits = Path(f"/proc/{served.pid}/limits").read_text()
    finally:
        served.terminate()
        served.communicate(timeout=60)
    (row,) = [line for line in limits.splitlines() if line.startswith("Max open files")]
    assert row.split()[3:5] == ["1784", "4096"], row  # 1,000 + 16 + 256 + 512


def test_the_descriptor_refusal_names_the_default_max_streams_it_holds(monkeypatch):
    """serve's refusal of a hard RLIMIT_NOFILE too low for the default --max-streams wrote
    "the default --max-streams (256)" as text: a default changed in MAX_STREAMS left the
    line naming the old figure. It names the constant's."""
    import resource

    from marlaas.service import connections
    from marlaas.service.serve_command import _ensure_descriptors
    from marlaas.terminal import UsageError

    monkeypatch.setattr(connections, "MAX_STREAMS", 300)
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (100, 100))
    monkeypatch.setattr(resource, "setrlimit", lambda *_: pytest.fail("the limit was changed"))
    with pytest.raises(UsageError) as refused:
        _ensure_descriptors(None)
    assert str(refused.value) == (
        "serve: 572 connections (the default --max-streams (300)) and 512 files of the "
        "service's own need 1,084 file descriptors; this process may open 100 (ulimit -Hn): "
        "raise the limit, or give a smaller --max-streams"
    )


def test_serve_leaves_out_a_default_environment_that_cannot_run_here(tmp_path, capsys,
                                                                    monkeypatch):  # fmt: skip
    """Where bubblewrap is missing, a real service whose cluster file lists no environments
    (the default ones: python_exec among them) refused to start, naming python_exec, which the
    operator never asked for: the quick start's cluster file without `environments:` could not
    be served there at all. The default ones that cannot run are left out, saying so; a job
    naming one is 422."""
    from marlaas.envs import sandbox_runtime
    from marlaas.service.config import load_config
    from marlaas.service.requests import JobRequestError, job_from_request
    from marlaas.service.serve_command import _check_environments

    monkeypatch.setattr(sandbox_runtime, "_probe", lambda: "`bwrap` not found on PATH")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("service: {max_sequence_tokens: 64}\n")
    config, _ = load_config(cluster)
    offered = _check_environments(config, str(cluster))
    assert offered.service.environments == ["arithmetic", "calculator", "target_char"]
    err = capsys.readouterr().err.strip()
    assert err == ("marlaas: warning: serve: environment 'python_exec' is not offered: it "
                   "cannot run on this host (the code sandbox is unavailable: `bwrap` not found "
                   "on PATH; " + sandbox_runtime.INSTALL_HINT + ")")  # fmt: skip
    job = {"name": "j", "env": {"name": "python_exec", "args": {"tasks": [
        {"prompt": "p", "func": "f", "tests": [[[1], 2]]}]}}}  # fmt: skip
    with pytest.raises(JobRequestError, match="'python_exec' is not one of this service's"):
        job_from_request(job, "alice", offered)
    monkeypatch.setattr(sandbox_runtime, "_probe", lambda: sandbox_runtime.Runtime)  # it runs
    assert _check_environments(config, str(cluster)) is config


def test_serve_stopped_as_it_starts_says_what_it_left(tmp_path, capsys, monkeypatch):
    """SIGTERM or Ctrl-C while the executor was built (the model loading: tens of seconds)
    said "nothing was written", though the data folder, its database and keys were."""
    import signal

    from marlaas.interrupts import Interrupted
    from marlaas.service.runner import ServiceRunner

    def interrupted(self, timeout_s=None):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(ServiceRunner, "start", interrupted)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("service: {max_sequence_tokens: 64}\n")
    data = tmp_path / "data"
    assert main(["serve", str(cluster), "--simulate", "--port", "0",
                 "--data", str(data)]) == 143  # fmt: skip
    assert capsys.readouterr().err.strip().endswith(
        "marlaas: interrupted (SIGTERM); the service stopped; its jobs continue from their "
        "last durable step when it starts again")  # fmt: skip
    assert (data / "service.db").exists()


def test_serve_under_a_hard_limit_of_1024_lowers_its_default_streams(tmp_path):
    """0b846d8 refused every hard RLIMIT_NOFILE under 1,040 (528 connections + 512): the plain
    `marlaas serve`, no --max-streams given, on a host or container whose hard limit is 1,024
    (`docker run --ulimit nofile=1024:1024`, LimitNOFILE=1024) would not start, though it did
    before. The default is lowered to the streams that limit allows (240), saying so."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("service: {max_sequence_tokens: 64}\n")
    served = _serve_under((1024, 1024), str(cluster), "--simulate", "--port", "0",
                          "--data", str(tmp_path / "data"))  # fmt: skip
    lines = []
    try:
        for line in served.stderr:
            lines.append(line)
            if "serving on" in line or "error" in line:
                break
        limits = Path(f"/proc/{served.pid}/limits").read_text()
    finally:
        served.terminate()
        served.communicate(timeout=60)
    assert (
        "marlaas: warning: serve: --max-streams 240 (not 256): this process may open 1,024 "
        "files (ulimit -Hn), and each stream's connection is one of them\n" in lines
    ), lines
    assert any("serving on" in line for line in lines), lines
    (row,) = [line for line in limits.splitlines() if line.startswith("Max open files")]
    assert row.split()[3:5] == ["1024", "1024"], row  # 240 + 16 + 256 + 512


def test_one_service_to_a_database_however_many_data_folders_name_it(tmp_path, db_url):
    """The lock was the data folder's: two services on two data folders with one --db both
    ran, each submitting the same live jobs again and writing their steps (two drivers on job
    1: it went on at both, its steps from either)."""
    import shutil
    import sys

    url = db_url or f"sqlite:///{tmp_path / 'shared.db'}"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("service: {max_sequence_tokens: 64}\n")
    marlaas = [sys.executable, "-m", "marlaas"]
    first, second = tmp_path / "first", tmp_path / "second"
    subprocess.run([*marlaas, "tenants", "add", "alice", "--data", str(first), "--db", url],
                   check=True, capture_output=True)  # fmt: skip
    second.mkdir(mode=0o700)
    shutil.copy(first / "secret.key", second / "secret.key")  # the same keys: it may serve
    serving = subprocess.Popen([*marlaas, "serve", str(cluster), "--simulate", "--port", "0",
                                "--data", str(first), "--db", url],
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    other = None
    try:
        for line in serving.stderr:
            if "serving on" in line:
                break
        other = subprocess.Popen([*marlaas, "serve", str(cluster), "--simulate", "--port",
                                  "0", "--data", str(second), "--db", url],
                                 stderr=subprocess.PIPE, text=True)  # fmt: skip
        _, err = other.communicate(timeout=60)
        assert other.returncode == 2, err
        assert err.strip().splitlines()[-1].endswith(
            ": another marlaas serve is serving it (one service to a database); stop that "
            "one first"), err  # fmt: skip
        assert "secret" not in err
    finally:
        for process in (serving, other):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def test_a_restart_fails_a_job_whose_durable_adapter_is_not_the_one_written(tmp_path, db_url):
    """A restarted service checked a job's durable version for its optimizer state alone: a
    byte changed in its adapter's weights was resumed from (found only once a trainer loaded
    it). The job now fails at the restart, its reason naming the job and the file; the
    versions past its durable one are removed, and a job whose version is whole goes on."""
    from marlaas.core.job_spec import JobSpec
    from marlaas.executors.adapter_store import WEIGHTS_FILE, AdapterStore
    from marlaas.service.runner import ADAPTERS_DIR, ServiceRunner
    from tests.executors.test_resume_identity import save_version
    from tests.service.conftest import CLUSTER, JOB

    store = JobStore(database_url(tmp_path, db_url), tmp_path)
    try:
        store.add_tenant("frank")
        (tenant,) = store.tenants()
        spec = JobSpec.model_validate({**JOB, "tenant": "frank"})
        damaged, whole = (store.add_job(tenant, spec, 1.0) for _ in range(2))
        adapters = AdapterStore(tmp_path / ADAPTERS_DIR)
        for job_id in (damaged, whole):
            store.set_state(job_id, "running")
            store.step_done(job_id, {"step": 0, "mean_reward": 0.5}, [], 0)
            for version in (0, 1, 2):  # version 2: a step that never became durable
                save_version(adapters, f"j{job_id}", version, rank=spec.lora_rank)
        weights = adapters.path(f"j{damaged}", 1) / WEIGHTS_FILE
        data = bytearray(weights.read_bytes())
        data[-3] ^= 0x10  # in the tensor's data: its header and length whole
        weights.write_bytes(bytes(data))
        runner = ServiceRunner(ServiceConfig.model_validate(CLUSTER), tmp_path, tmp_path, store)

        class Executor:  # what _resubmit reads of the real executor: its adapter store
            store = adapters

        runner._resubmit(Executor())
        failed = store.job(damaged)
        assert failed["state"] == "failed", failed
        assert failed["reason"].startswith(f"j{damaged}: {weights}: damaged: its SHA-256 is ")
        assert store.job(whole)["state"] == "running"
        assert [item.job.name for item in runner.inbox.take(0.0)] == [f"j{whole}"]
        assert adapters.versions(f"j{damaged}") == adapters.versions(f"j{whole}") == [0, 1]
    finally:
        store.close()
