"""The service for real, over HTTP on loopback: ``marlaas serve`` on the tiny model (HF +
PEFT), two tenants, and a ``kill -9`` in the middle of their training.

A reference service trains both tenants' jobs undisturbed: both learn, each fetches its
adapter and loads it with PEFT, and neither reaches the other's job. A second service gets
the same submissions, is killed once some steps are durable, and is started again on the
same data: every job finishes; the event log and the reward history have every step exactly
once; the rewards (up to a token flipped by float noise) and final adapters are the
reference's (the optimizer state came back: Adam's moments shape every later step); an SSE
client reconnects with Last-Event-ID and misses nothing. The jobs are on-policy, so that each
step's samples come from the same adapter version whatever the asynchronous schedule did.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.client import Client
from tests.child_env import python_path_first
from tests.tiny_cluster import tiny_cluster_yaml

REPO = Path(__file__).resolve().parents[2]
STEPS = 12
PROMPTS_PER_STEP, GROUP_SIZE = 4, 4
SAMPLES_PER_STEP = PROMPTS_PER_STEP * GROUP_SIZE
START_TIMEOUT_S = 300
RUN_TIMEOUT_S = 600


def cluster_text(model: Path) -> str:
    """The tiny cluster as a service's cluster file."""
    service = "service: {max_lora_rank: 8, max_sequence_tokens: 256}\n"
    return tiny_cluster_yaml("service-real-test", model) + service


def job(target: str) -> dict:
    """A tenant's on-policy job: learn to emit ``target``; each environment step waits
    0.2 s, so that a kill sent after some durable steps lands while the jobs still train."""
    return {
        "name": f"emit-{target}", "lora_rank": 8,
        "rl": {"steps": STEPS, "prompts_per_step": PROMPTS_PER_STEP, "group_size": GROUP_SIZE,
               "max_new_tokens": 8, "max_staleness": 0, "learning_rate": 0.05},
        "prompt_tokens": {"dist": "constant", "value": 24},
        "response_tokens": {"dist": "constant", "value": 8},
        "env": {"name": "target_char", "args": {"target": target},
                "latency_s": {"dist": "constant", "value": 0.2}},
    }  # fmt: skip


def marlaas(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = python_path_first(REPO, base={**os.environ, **(env or {})})
    return subprocess.run([sys.executable, "-m", "marlaas.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


class Service:
    """``marlaas serve`` in a child process, on ``port`` (0: the one the system gives it, read
    from what serve says; a port found free beforehand can be taken by another process before
    serve binds it)."""

    def __init__(self, cluster: Path, data: Path, port: int = 0, *args: str,
                 env: dict | None = None) -> None:  # fmt: skip
        self.cluster, self.data, self.port = cluster, data, port
        self.args, self.env = args, env or {}
        """More arguments of ``serve``, and of its environment."""
        self.proc: subprocess.Popen | None = None
        self.log_path = data.parent / f"serve-{data.name}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Service:
        env = python_path_first(REPO, base={**os.environ, **self.env})
        command = [sys.executable, "-m", "marlaas.cli", "serve", str(self.cluster), "--data",
                   str(self.data), "--port", str(self.port), "--backend", "hf",
                   "--log-level", "warning", *self.args]  # fmt: skip
        self.log = open(self.log_path, "a")  # noqa: SIM115
        said_before = self.log.tell()
        self.proc = subprocess.Popen(command, env=env, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.tail()
            if self.port == 0:
                with open(self.log_path) as said:
                    said.seek(said_before)
                    serving = re.search(r"serving on http://127\.0\.0\.1:(\d+)", said.read())
                if serving is None:
                    time.sleep(0.2)
                    continue
                self.port = int(serving[1])
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=2).json()["status"] == "ok":
                    return self
            except (httpx.TransportError, ValueError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"the service did not start: {self.tail()}")

    def tail(self) -> str:
        return self.log_path.read_text()[-3000:]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL
        self.log.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(60) == 128 + signal.SIGTERM, self.tail()
            assert "continue from their last durable step" in self.tail()
        self.log.close()


def add_tenant(data: Path, name: str) -> str:
    done = marlaas("tenants", "add", name, "--data", str(data))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def submit_both(service: Service, keys: dict[str, str]) -> tuple[int, int]:
    """alice submits; bob submits once alice's job has a durable step (another time)."""
    alice, bob = Client(service.url, keys["alice"]), Client(service.url, keys["bob"])
    a = alice.submit(job("a"))["id"]
    wait_until(lambda: alice.job(a)["step"] >= 1)
    b = bob.submit(job("z"))["id"]
    return a, b


def port_below_the_ephemeral_range() -> int:
    """A loopback port free now, below the system's ephemeral range, for a service restarted
    on the port of its first start (a watcher's URL): the port 0 gives is ephemeral, and in
    the seconds between a kill -9 and the restart's bind an outgoing connection could take
    it; one below the range is taken only by a bind that names it."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.sample(range(max(1024, low - 8192), low), 64):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port below {low} in 64 tries")


def wait_until(condition, timeout_s: float = RUN_TIMEOUT_S, poll_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(poll_s)


def adapter_drift(mine: Path, reference: Path, start: Path) -> float:
    """How far ``mine`` is from ``reference``, relative to how far training moved the
    reference from ``start`` (norms over every LoRA tensor). Batches composed otherwise after
    a kill move log-probs by float noise, which Adam's normalised steps can turn into a
    whole step for a weight whose gradient is nearly 0: an elementwise bound is fragile."""
    from safetensors.torch import load_file

    ours, theirs, first = (load_file(str(p / "adapter_model.safetensors"))
                           for p in (mine, reference, start))  # fmt: skip
    apart = sum(float((ours[k] - theirs[k]).pow(2).sum()) for k in theirs) ** 0.5
    moved = sum(float((theirs[k] - first[k]).pow(2).sum()) for k in theirs) ** 0.5
    return apart / moved


def rewards_agree(ours: list[float], theirs: list[float]) -> bool:
    """Whether a restarted job's mean rewards per step are the reference's up to float noise.
    Batches composed otherwise after a kill move log-probs by float noise, which now and then
    flips a sampled token: one sample's reward, 1/16 of a step's mean here (CI saw one step
    1/128 apart, 2026-12-04). A step within 2/16, and 1/64 on average over the steps: a job
    that lost its adapter or trained a step twice falls behind by far more."""
    apart = [abs(x - y) for x, y in zip(ours, theirs, strict=True)]
    return max(apart) <= 2 / SAMPLES_PER_STEP and sum(apart) / len(apart) <= 1 / 64


def durable_steps(data: Path) -> int:
    """Durable steps of every job in the service's store (read with the service down)."""
    from marlaas.service.db import database_url
    from marlaas.service.store import JobStore

    store = JobStore(database_url(data, None), data)
    try:
        return sum(job["step"] for job in store.jobs())
    finally:
        store.close()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from marlaas.executors.models import build_tiny_model

    root = tmp_path_factory.mktemp("service-real")
    model = build_tiny_model(root / "tiny", seed=0)
    cluster = root / "cluster.yaml"
    cluster.write_text(cluster_text(model))
    return root, model, cluster


@pytest.fixture(scope="module")
def reference(setup):
    """A service that trains both jobs undisturbed: (service, keys, job ids, jobs)."""
    root, _, cluster = setup
    data = root / "reference"
    keys = {name: add_tenant(data, name) for name in ("alice", "bob")}
    service = Service(cluster, data).start()
    try:
        a, b = submit_both(service, keys)
        alice, bob = Client(service.url, keys["alice"]), Client(service.url, keys["bob"])
        jobs = {a: alice.wait(a, 0.2, RUN_TIMEOUT_S), b: bob.wait(b, 0.2, RUN_TIMEOUT_S)}
        yield service, keys, (a, b), jobs
    finally:
        service.stop()


@pytest.mark.slow
def test_two_tenants_learn_fetch_their_adapters_and_never_reach_each_other(reference, setup,
                                                                         tmp_path):  # fmt: skip
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    service, keys, (a, b), jobs = reference
    for job_id in (a, b):
        record = jobs[job_id]
        assert record["state"] == "done" and record["step"] == STEPS
        rewards = record["rewards"]
        assert len(rewards) == STEPS
        assert max(rewards[-3:]) > rewards[0] + 0.2, rewards  # it learned
        assert record["versions"] == list(range(STEPS + 1))
    env = {"MARLAAS_URL": service.url}
    out = tmp_path / "alice-adapter"
    fetched = marlaas("fetch", str(a), "--out", str(out),
                      env={**env, "MARLAAS_API_KEY": keys["alice"]})  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr
    base = AutoModelForCausalLM.from_pretrained(setup[1])
    model = PeftModel.from_pretrained(base, out)
    served = load_file(str(service.data / "adapters" / f"j{a}" / f"v{STEPS}" /
                           "adapter_model.safetensors"))  # fmt: skip
    loaded = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    assert len(loaded) == len(served) > 0
    assert not (out / "optimizer.pt").exists()  # the trainer's, not the tenant's
    # bob reaches nothing of alice's: 404, as for a job that does not exist
    bob = {"Authorization": f"Bearer {keys['bob']}"}
    for method, path in [("GET", f"/v1/jobs/{a}"), ("GET", f"/v1/jobs/{a}/events"),
                         ("GET", f"/v1/jobs/{a}/adapters/{STEPS}"),
                         ("GET", f"/v1/jobs/{a}/adapters/0"),
                         ("POST", f"/v1/jobs/{a}/cancel")]:  # fmt: skip
        response = httpx.request(method, service.url + path, headers=bob, timeout=30)
        assert response.status_code == 404, (method, path, response.text)
    refused = marlaas("fetch", str(a), "--out", str(tmp_path / "stolen"),
                      env={**env, "MARLAAS_API_KEY": keys["bob"]})  # fmt: skip
    assert refused.returncode == 2 and "no job" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "stolen").exists()
    wrong = httpx.get(f"{service.url}/v1/jobs/{a}", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401


@pytest.mark.slow
def test_kill_9_and_a_restart_continue_every_job_with_nothing_lost_or_twice(reference, setup):
    root, _, cluster = setup
    _, _, (ref_a, ref_b), _ = reference
    data = root / "killed"
    keys = {name: add_tenant(data, name) for name in ("alice", "bob")}
    service = Service(cluster, data, port_below_the_ephemeral_range()).start()
    a, b = submit_both(service, keys)
    assert (a, b) == (ref_a, ref_b)  # the same job numbers: the same samples
    seen: list = []
    listener = threading.Thread(target=lambda: seen.extend(
        Client(service.url, keys["alice"]).events(a, retry_s=0.5, reconnect_s=300)),
        daemon=True)  # fmt: skip
    listener.start()
    operator = Client(service.url, (data / "operator.key").read_text().strip())
    wait_until(lambda: sum(j["step"] for j in operator.jobs()) >= 4, poll_s=0.05)
    service.kill()
    killed_at = durable_steps(data)
    assert 4 <= killed_at < 2 * STEPS  # killed midway
    service = Service(cluster, data, service.port).start()  # the listener's URL, still free
    try:
        jobs = {a: Client(service.url, keys["alice"]).wait(a, 0.2, RUN_TIMEOUT_S),
                b: Client(service.url, keys["bob"]).wait(b, 0.2, RUN_TIMEOUT_S)}  # fmt: skip
        listener.join(60)
    finally:
        service.stop()
    assert_as_the_reference(data, jobs, reference)
    step_events = [e.data["step"] for e in seen if e.kind == "step"]
    assert step_events == list(range(STEPS))  # reconnected with Last-Event-ID: none lost
    assert [e.id for e in seen] == sorted({e.id for e in seen})
    assert seen[-1].data["state"] == "done"


def assert_as_the_reference(data: Path, jobs: dict[int, dict], reference) -> None:
    """Every job of the service on ``data`` (``jobs``: as it ended) finished with each step
    once, its rewards and final adapter the ``reference``'s, its optimizer state taken up
    again at every restart."""
    import torch

    from marlaas.service.db import database_url
    from marlaas.service.store import JobStore

    ref_service, _, _, ref_jobs = reference
    store = JobStore(database_url(data, None), data)
    try:
        records = store.records()
        steps = {job_id: [p["step"] for p in store.steps(job_id)] for job_id in jobs}
    finally:
        store.close()
    for job_id in jobs:
        assert jobs[job_id]["state"] == "done" and jobs[job_id]["step"] == STEPS
        assert steps[job_id] == list(range(STEPS))
        trained = sorted(r["step"] for r in records if r["kind"] == "train"
                         and r["job"] == f"j{job_id}" and r["outcome"] == "ok")  # fmt: skip
        assert trained == list(range(STEPS))  # every step's row once
        ours, theirs = jobs[job_id]["rewards"], ref_jobs[job_id]["rewards"]
        assert rewards_agree(ours, theirs), (ours, theirs)
        final = data / "adapters" / f"j{job_id}" / f"v{STEPS}"
        adam = torch.load(final / "optimizer.pt", weights_only=True)["state"]
        # Adam's step count went on through the kill: the saved state was taken up again
        # (a state lost at the restart from step k would count STEPS - k)
        assert {float(p["step"]) for p in adam.values()} == {float(STEPS)}
        drift = adapter_drift(final, ref_service.data / "adapters" / f"j{job_id}" / f"v{STEPS}",
                              data / "adapters" / f"j{job_id}" / "v0")  # fmt: skip
        assert drift < 0.05, drift  # float noise of batches composed otherwise after the kill
    ends = [r["end_s"] for r in records]
    assert max(ends) > 0


@pytest.mark.slow
def test_a_policy_that_raises_mid_run_stops_the_service_and_a_restart_continues(reference,
                                                                               setup):  # fmt: skip
    """A policy by import path that raises while the real service trains (here: once told
    to, after some durable steps) stops it in one line, status 2, no traceback; started again
    under another policy, every job finishes as the undisturbed reference's did: each step
    once, the same rewards and adapters (the jobs are on-policy: the schedule does not
    change their samples)."""
    from tests.service.raising_policy import RAISE_WHEN_ENV

    root, _, cluster = setup
    _, _, (ref_a, ref_b), _ = reference
    data, told = root / "policy-raised", root / "fail-now"
    keys = {name: add_tenant(data, name) for name in ("alice", "bob")}
    policy = "tests.service.raising_policy:RaiseOnNthKey"
    service = Service(cluster, data, 0, "--policy", policy,
                      env={RAISE_WHEN_ENV: str(told)}).start()  # fmt: skip
    try:
        a, b = submit_both(service, keys)
        assert (a, b) == (ref_a, ref_b)  # the same job numbers: the same samples
        operator = Client(service.url, (data / "operator.key").read_text().strip())
        wait_until(lambda: sum(j["step"] for j in operator.jobs()) >= 4, poll_s=0.05)
        told.touch()
        assert service.proc.wait(120) == 2, service.tail()
    finally:
        if service.proc.poll() is None:
            service.kill()
        service.log.close()
    said = service.tail()
    assert "Traceback" not in said, said
    assert f"the driver stopped: policy '{policy}': key(job " in said, said
    last = said.strip().splitlines()[-1]
    assert last.startswith(f"marlaas: error: serve: the service stopped: policy '{policy}'"), said
    assert 4 <= durable_steps(data) < 2 * STEPS  # stopped midway
    service = Service(cluster, data, 0, "--policy", "fair").start()
    try:
        jobs = {a: Client(service.url, keys["alice"]).wait(a, 0.2, RUN_TIMEOUT_S),
                b: Client(service.url, keys["bob"]).wait(b, 0.2, RUN_TIMEOUT_S)}  # fmt: skip
    finally:
        service.stop()
    assert_as_the_reference(data, jobs, reference)
