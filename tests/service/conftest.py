"""Fixtures of the service's tests: a database of each kind, and a service over real HTTP on
loopback (the simulator on the wall clock, so that jobs run in seconds without a model)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("sqlalchemy")

from marlaas.service.config import ServiceConfig
from tests.service.postgres import PostgresServer

REQUIRE_POSTGRES_ENV = "MARLAAS_REQUIRE_POSTGRES"
"""Set in CI (which installs PostgreSQL): a missing server fails instead of skipping."""

CLUSTER = {
    "name": "svc-test",
    "policy": "fair",
    "cluster": {
        "pools": [{"name": "rollout", "role": "inference", "devices": 2},
                  {"name": "train", "role": "training", "devices": 1}],
        "engine": {"max_seqs": 64, "kv_tokens": 20_000, "adapter_slots": 4},
    },
    "scheduling": {"tenant_max_active_jobs": 2, "tenant_max_queued_jobs": 1},
    "service": {"max_lora_rank": 16, "max_sequence_tokens": 2048},
}  # fmt: skip
"""A small simulated cluster: two engines, one trainer; two of a tenant's jobs at once."""

JOB = {
    "name": "math",
    "lora_rank": 8,
    "rl": {"steps": 3, "prompts_per_step": 2, "group_size": 4, "max_new_tokens": 128},
    "prompt_tokens": {"dist": "constant", "value": 64},
    "response_tokens": {"dist": "constant", "value": 64},
}
"""A tenant's job spec that the simulated cluster trains in about a second at speed 200."""


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server for the session (skipped where none is installed, except in CI)."""
    try:
        server = PostgresServer()
        server.start()
    except (FileNotFoundError, KeyError, OSError) as err:
        if os.environ.get(REQUIRE_POSTGRES_ENV):
            raise
        pytest.skip(f"no PostgreSQL here ({err}); apt-get install -y postgresql")
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """The URL of a new database: SQLite in the data folder (None), or PostgreSQL."""
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("postgres").url()


def store_with_a_job(data: Path) -> None:
    """A data folder as a service leaves it: a tenant ``frank``, a job of his, the cluster file
    saved."""
    import json

    from marlaas.core.job_spec import JobSpec
    from marlaas.service.db import database_url
    from marlaas.service.store import JobStore

    data.mkdir()
    store = JobStore(database_url(data, None), data)
    try:
        store.add_tenant("frank")
        (tenant,) = store.tenants()
        store.add_job(tenant, JobSpec.model_validate({**JOB, "tenant": "frank"}), 1.0)
    finally:
        store.close()
    (data / "config.json").write_text(json.dumps(CLUSTER))  # as serve saves it


def model_folder(path: Path) -> Path:
    """A base model's folder with what the service reads of it before its executor opens (a
    llama config of 512 positions; the weights and tokenizer are placeholders)."""
    import json

    path.mkdir()
    (path / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2,
        "hidden_size": 64, "max_position_embeddings": 512}))  # fmt: skip
    (path / "model.safetensors").write_bytes(b"weights")
    (path / "tokenizer.json").write_text("{}")
    return path


def wait_for(condition, timeout_s: float) -> bool:
    """Whether ``condition()`` turned true within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@dataclass
class Served:
    """A service running in this process: its URL, runner, store and data folder."""

    url: str
    runner: object
    store: object
    data: Path
    server: object
    thread: threading.Thread
    app: object = None
    """The FastAPI app (its ``state.streams`` counts the open event streams)."""

    def key(self, tenant: str, **quota) -> str:
        """Add ``tenant`` (with quotas) and return its API key."""
        from marlaas.core.tenant_spec import TenantSpec

        return self.store.add_tenant(tenant, TenantSpec(**quota))

    @property
    def operator_key(self) -> str:
        return (self.data / "operator.key").read_text().strip()

    def client(self, key: str):
        from marlaas.client import Client

        return Client(self.url, key)

    def job_with_adapter(self, key: str, monkeypatch, weights: bytes) -> tuple[int, Path]:
        """(id, folder) of a job of ``key``'s tenant, ended, with adapter version 0 on disk as
        a real run writes it (a simulated service makes none): ``weights`` and a config."""
        client = self.client(key)
        job = client.submit(JOB)["id"]
        client.wait(job, 0.1, 60)
        folder = self.runner.adapter_path(job, 0)
        folder.mkdir(parents=True)
        (folder / "adapter_model.safetensors").write_bytes(weights)
        (folder / "adapter_config.json").write_text('{"r": 8}')
        monkeypatch.setattr(self.runner, "adapter_versions", lambda job_id: [0])
        return job, folder

    def stop(self) -> None:
        """Stop the server and the driver; a driver that died on its own fails the test."""
        self.server.should_exit = True
        self.thread.join(30)
        self.runner.stop(30)
        self.store.close()
        assert self.runner.error is None, f"the driver stopped: {self.runner.error!r}"


def serve(data: Path, db_url: str | None = None, cluster: dict | None = None,
          speed: float = 200.0, max_streams: int | None = None, unacked_s: float | None = None,
          port: int = 0, **limits) -> Served:  # fmt: skip
    """Start a simulated service on loopback (uvicorn in a thread), the server ``serve``
    starts (:mod:`marlaas.service.server`), on ``port`` (0: a free one); ``max_streams``: its
    ``--max-streams`` (None: the default); ``unacked_s`` and ``limits`` (``read_s``,
    ``body_rate``, ``max_connections``, ``base``): its bounds, where a test needs them
    shorter."""
    import uvicorn

    from marlaas.service import server as bounds
    from marlaas.service.app import MAX_STREAMS, OPERATOR_KEY_FILE, create_app
    from marlaas.service.connections import connection_limit
    from marlaas.service.data_folder import make_data_folder
    from marlaas.service.db import database_url
    from marlaas.service.keys import new_key
    from marlaas.service.runner import ServiceRunner
    from marlaas.service.store import JobStore

    make_data_folder(data)  # as serve makes it
    operator = data / OPERATOR_KEY_FILE
    if not operator.exists():
        operator.write_text(new_key())
    config = ServiceConfig.model_validate(cluster or CLUSTER)
    store = JobStore(database_url(data, db_url), data)
    runner = ServiceRunner(config, data, data, store, simulate=True, speed=speed)
    runner.start(30)
    max_streams = MAX_STREAMS if max_streams is None else max_streams
    app = create_app(runner, data, max_streams)
    listening = bounds.listening_socket("127.0.0.1", port, unacked_s or bounds.UNACKED_S)
    port = listening.getsockname()[1]
    limits.setdefault("max_connections", connection_limit(max_streams))
    config = bounds.server_config(app, "127.0.0.1", port, log_level="error", **limits)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test service did not start")
        time.sleep(0.02)
    return Served(f"http://127.0.0.1:{port}", runner, store, data, server, thread, app)


@pytest.fixture
def service(tmp_path, db_url):
    """A simulated service over real HTTP, on SQLite and on PostgreSQL."""
    served = serve(tmp_path / "data", db_url)
    yield served
    served.stop()
