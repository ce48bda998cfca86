"""The dashboard (``GET /``) rendered in headless Chromium over a simulated service on
loopback: the operator's key shows every tenant's jobs and the cluster's cards, a tenant's key
its own jobs only, a wrong key the login form and an error, no jobs."""

from __future__ import annotations

import re

import pytest

from tests.service.browser import Element, dump_dom, parse, screenshot
from tests.service.conftest import JOB, serve
from tests.system_tools import needs_chromium

pytestmark = needs_chromium

COLUMNS = ("id", "tenant", "name", "state", "progress", "reward", "staleness", "reason")
"""The job table's columns, in order."""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A service where alice's two jobs (one done, one cancelled) and bob's one have ended;
    (service, {tenant: key}, {job id: job as the operator's API shows it})."""
    service = serve(tmp_path_factory.mktemp("dashboard") / "data")
    keys = {name: service.key(name) for name in ("alice", "bob")}
    alice, bob = service.client(keys["alice"]), service.client(keys["bob"])
    ids = [alice.submit(JOB)["id"], bob.submit({**JOB, "name": "other"})["id"]]
    long = alice.submit({**JOB, "name": "long", "rl": {**JOB["rl"], "steps": 500}})["id"]
    alice.cancel(long)
    for client, job_id in ((alice, ids[0]), (bob, ids[1]), (alice, long)):
        client.wait(job_id, 0.05, 60)
    jobs = {job["id"]: job for job in service.client(service.operator_key).jobs()}
    yield service, keys, jobs
    service.stop()


def page(service, key: str | None, profile) -> tuple[Element, list[str]]:
    """The dashboard's DOM as ``key``'s holder sees it (no key: a bare ``/``)."""
    url = f"{service.url}/" + ("" if key is None else f"#key={key}")
    html, errors = dump_dom(url, profile)
    return parse(html), errors


def rows(dom: Element) -> dict[int, dict[str, str]]:
    """The job table's rows: per job id, each column's text."""
    out = {}
    for row in dom.find_all("tr", data_job=True):
        cells = [cell.text.strip() for cell in row.find_all("td")]
        assert len(cells) == len(COLUMNS), cells
        out[int(row.attrs["data-job"])] = dict(zip(COLUMNS, cells, strict=True))
    return out


def cards(dom: Element) -> dict[str, str]:
    """The cluster's cards: per label, its figure."""
    out = {}
    for card in dom.by_id("cards").find_all("div", **{"class": "card"}):
        figure = card.find_all("b")[0].text
        out[card.text.removeprefix(figure).strip()] = figure
    return out


def assert_rows_are(dom: Element, jobs: dict[int, dict]) -> None:
    """The table shows exactly ``jobs``, each with its tenant, name, state and progress."""
    shown = rows(dom)
    assert sorted(shown) == sorted(jobs)
    for job_id, job in jobs.items():
        row = shown[job_id]
        assert row["id"] == str(job_id) and row["tenant"] == job["tenant"]
        assert row["name"] == job["name"] and row["state"] == job["state"]
        assert row["progress"] == f"{job['step']}/{job['steps']}"
        assert row["reason"] == job["reason"]


def test_the_operator_sees_every_tenants_jobs_and_the_cluster(served, tmp_path):
    service, _, jobs = served
    dom, errors = page(service, service.operator_key, tmp_path / "profile")
    assert errors == []
    assert dom.find_all("body")[0].attrs.get("data-loaded") == "yes"
    assert_rows_are(dom, jobs)
    assert {job["tenant"] for job in jobs.values()} == {"alice", "bob"}
    assert sorted(job["state"] for job in jobs.values()) == ["cancelled", "done", "done"]
    shown = cards(dom)
    assert set(shown) == {"jobs running", "jobs queued", "rollout busy (1 min)",
                          "train busy (1 min)", "simulation behind"}  # fmt: skip
    assert shown["jobs running"] == "0" == shown["jobs queued"]
    for pool in ("rollout", "train"):  # the mean over the last minute, which saw work
        assert re.fullmatch(r"\d{1,3}%", shown[f"{pool} busy (1 min)"])
    assert re.fullmatch(r"\d+\.\d s", shown["simulation behind"])
    assert dom.by_id("subtitle").text == "svc-test · policy fair · simulated"
    assert "hidden" in dom.by_id("login").attrs and "hidden" not in dom.by_id("jobs").attrs
    assert dom.by_id("error").text == ""
    shot = screenshot(f"{service.url}/#key={service.operator_key}", tmp_path / "shot.png",
                      tmp_path / "profile")  # fmt: skip
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_a_tenant_sees_only_its_own_jobs(served, tmp_path):
    service, keys, jobs = served
    dom, errors = page(service, keys["alice"], tmp_path / "profile")
    assert errors == []
    mine = {job_id: job for job_id, job in jobs.items() if job["tenant"] == "alice"}
    assert len(mine) == 2
    assert_rows_are(dom, mine)
    assert "bob" not in dom.by_id("jobs").text


def test_a_wrong_key_gets_the_login_form_and_an_error_and_no_jobs(served, tmp_path):
    service, keys, _ = served
    dom, errors = page(service, keys["alice"][:-4] + "xxxx", tmp_path / "profile")
    assert errors == []
    assert rows(dom) == {} and cards(dom) == {}
    assert "hidden" not in dom.by_id("login").attrs and "hidden" in dom.by_id("jobs").attrs
    assert dom.by_id("error").text == "that key is not accepted"
    assert "data-loaded" not in dom.find_all("body")[0].attrs


def test_no_key_gets_the_login_form_and_no_error(served, tmp_path):
    dom, errors = page(served[0], None, tmp_path / "profile")
    assert errors == []
    assert rows(dom) == {} and dom.by_id("error").text == ""
    assert "hidden" not in dom.by_id("login").attrs and "hidden" in dom.by_id("jobs").attrs
