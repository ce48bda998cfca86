"""Load on a real service over loopback: clients polling status and tenants submitting jobs
while a run trains; request latency per kind and every failed request.

    python benchmarks/service_load.py                      # 50 clients, 200 submissions
    python benchmarks/service_load.py --clients 8 --submissions 20 --duration 20

It starts ``marlaas serve traces/service/tiny.yaml`` (the real executor on the tiny model,
built with ``marlaas make-tiny-model models/tiny`` when missing) on a free port with a new data
folder, adds a ``trainer`` tenant and ``--tenants`` load tenants (``marlaas tenants add``,
quotas large enough for their share of the submissions), submits the trainer's job (emit-a
with ``--train-steps`` steps) and waits for its first durable step. Then, for ``--duration``
seconds, ``--clients`` clients (asyncio, an httpx.AsyncClient each: one connection each, like
separate programs) poll: ``GET /v1/jobs`` then ``GET /v1/jobs/{id}`` of a job in that list,
``--poll-s`` seconds apart; client 0 holds the operator's key (every job, and
``GET /v1/cluster``: the dashboard's requests), the others a tenant's each, round robin.
Meanwhile ``--submissions`` jobs (emit-a with ``--job-steps`` steps) are submitted evenly
over the window, round robin over the load tenants. Afterwards every live load job is
cancelled, the trainer's progress is read, and the service is stopped (SIGTERM).

Latency is the client's (request sent to response read) [ms]. A failed request is a transport
error, a timeout or any status but 2xx, except the expected refusals, counted on their own:
429 for a submission (a quota), 409 for a cancel (the job ended meanwhile). Printed: per
kind, requests, failures, refusals, p50/p90/p99/max; the machine's load (``uptime``) before
and after. ``--out`` gets it all as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "traces" / "service" / "tiny.yaml"
JOB_FILE = REPO / "traces" / "service" / "emit-a.yaml"
MODEL = REPO / "models" / "tiny"
EXPECTED = {"submit": (429,), "cancel": (409,)}
"""Per request kind, the refusals that are the service's answer, not a failure."""
START_TIMEOUT_S = 300.0
SAMPLES_KEPT = 20
"""Failures kept with their detail (every one is counted)."""


# ------------------------------------------------------------------ measuring


@dataclass
class Kind:
    """The requests of one kind: latencies of the answered ones [ms], refusals by status,
    failures."""

    latencies_ms: list[float] = field(default_factory=list)
    refused: dict[int, int] = field(default_factory=dict)
    failures: int = 0

    @property
    def requests(self) -> int:
        """Every request of this kind sent."""
        return len(self.latencies_ms) + self.failures


@dataclass
class Recorder:
    """Every request of a load run, by kind, and samples of the failures."""

    kinds: dict[str, Kind] = field(default_factory=dict)
    samples: list[str] = field(default_factory=list)
    last_used: dict[int, float] = field(default_factory=dict)
    """Per client (its id), when its latest request ended (perf_counter) [s]."""

    @property
    def failures(self) -> int:
        """Failed requests of every kind."""
        return sum(kind.failures for kind in self.kinds.values())

    def fail(self, kind: str, what: str) -> None:
        """A failed request of ``kind`` (``what`` went wrong)."""
        self.kinds.setdefault(kind, Kind()).failures += 1
        if len(self.samples) < SAMPLES_KEPT:
            self.samples.append(f"{kind}: {what}")

    def answered(self, kind: str, status: int, latency_ms: float) -> None:
        """An answered request of ``kind`` (2xx, or a refusal ``EXPECTED`` for it)."""
        entry = self.kinds.setdefault(kind, Kind())
        entry.latencies_ms.append(latency_ms)
        if not 200 <= status < 300:
            entry.refused[status] = entry.refused.get(status, 0) + 1

    def summary(self) -> dict[str, dict]:
        """Per kind: requests, failures, refusals and latency percentiles [ms]."""
        return {name: _kind_summary(kind) for name, kind in sorted(self.kinds.items())}


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _kind_summary(kind: Kind) -> dict:
    values = kind.latencies_ms
    return {
        "requests": kind.requests, "failures": kind.failures,
        "refused": {str(status): n for status, n in sorted(kind.refused.items())},
        **{f"p{q}_ms": percentile(values, q) for q in (50, 90, 99)},
        "max_ms": max(values) if values else None,
    }  # fmt: skip


async def call(http: httpx.AsyncClient, recorder: Recorder, kind: str, method: str,
               path: str, **kwargs) -> httpx.Response | None:  # fmt: skip
    """One timed request; its response when answered as expected, else None (a failure,
    recorded)."""
    started = time.perf_counter()
    idle = started - recorder.last_used.get(id(http), started)
    try:
        response = await http.request(method, path, **kwargs)
    except httpx.HTTPError as err:  # idle near 5 s: the server's keep-alive (uvicorn's) ended
        recorder.fail(kind, f"{type(err).__name__} {err} (the client idle {idle:.2f} s before)")
        return None
    finally:
        recorder.last_used[id(http)] = time.perf_counter()
    latency_ms = (time.perf_counter() - started) * 1000
    status = response.status_code
    if 200 <= status < 300 or status in EXPECTED.get(kind, ()):
        recorder.answered(kind, status, latency_ms)
        return response
    recorder.fail(kind, f"HTTP {status} {method} {path}: {response.text[:200]}")
    return None


# ------------------------------------------------------------------ load


@dataclass(frozen=True)
class Load:
    """What a load run does: ``clients`` pollers, ``submissions`` of ``spec`` spread over
    ``duration_s``, each poller ``poll_s`` between requests."""

    clients: int
    submissions: int
    duration_s: float
    poll_s: float
    spec: dict
    timeout_s: float = 30.0
    seed: int = 0


def _client(url: str, key: str, timeout_s: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"},
                             timeout=timeout_s, limits=httpx.Limits(max_connections=1))  # fmt: skip


async def poller(http: httpx.AsyncClient, recorder: Recorder, operator: bool, poll_s: float,
                 stop: asyncio.Event, rng: random.Random) -> None:  # fmt: skip
    """Poll the job list, then one job of it (the operator: and the cluster), until
    ``stop``; the first request after a random fraction of ``poll_s``."""

    async def pause(seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)

    await pause(rng.uniform(0, poll_s))
    while not stop.is_set():
        listed = await call(http, recorder, "list-all" if operator else "list", "GET",
                            "/v1/jobs")  # fmt: skip
        jobs = listed.json() if listed is not None else []
        if operator:
            await pause(poll_s)
            await call(http, recorder, "cluster", "GET", "/v1/cluster")
        if jobs and not stop.is_set():
            await pause(poll_s)
            await call(http, recorder, "get", "GET", f"/v1/jobs/{rng.choice(jobs)['id']}")
        await pause(poll_s)


async def submitter(clients: list[httpx.AsyncClient], recorder: Recorder, load: Load) -> list:
    """Submit ``load.submissions`` jobs evenly over ``load.duration_s``, round robin over
    ``clients``; the (client, job id) of each one taken."""
    started = time.monotonic()
    taken: list[tuple[httpx.AsyncClient, int]] = []

    async def one(i: int) -> None:
        await asyncio.sleep(max(0.0, started + i * load.duration_s / load.submissions
                                - time.monotonic()))  # fmt: skip
        http = clients[i % len(clients)]
        spec = {**load.spec, "name": f"{load.spec['name']}-{i}"}
        answer = await call(http, recorder, "submit", "POST", "/v1/jobs", json=spec)
        if answer is not None and answer.status_code == 201:
            taken.append((http, answer.json()["id"]))

    await asyncio.gather(*(one(i) for i in range(load.submissions)))
    return taken


async def run_load(url: str, operator_key: str, tenant_keys: list[str], load: Load
                   ) -> tuple[Recorder, list[tuple[httpx.AsyncClient, int]], float]:  # fmt: skip
    """Poll and submit as ``load`` says against the service at ``url``; (recorder, the jobs
    taken, the window's length [s]). The load tenants' clients stay open for the caller."""
    recorder, stop, rng = Recorder(), asyncio.Event(), random.Random(load.seed)
    keys = [operator_key] + [tenant_keys[i % len(tenant_keys)] for i in range(load.clients - 1)]
    pollers = [_client(url, key, load.timeout_s) for key in keys[: load.clients]]
    submitters = [_client(url, key, load.timeout_s) for key in tenant_keys]
    started = time.monotonic()
    tasks = [asyncio.create_task(poller(http, recorder, i == 0, load.poll_s, stop,
                                        random.Random(rng.random())))
             for i, http in enumerate(pollers)]  # fmt: skip
    taken = await submitter(submitters, recorder, load)
    await asyncio.sleep(max(0.0, started + load.duration_s - time.monotonic()))
    stop.set()
    await asyncio.gather(*tasks)
    window = time.monotonic() - started
    for http in pollers:
        await http.aclose()
    return recorder, taken, window


async def cancel_live(recorder: Recorder, taken: list) -> dict[str, int]:
    """Cancel every job taken that is still live; the jobs' states before, counted (every
    state read before the first cancel: a cancel lets the tenant's next job in)."""
    states: dict[str, int] = {}
    live = []
    for http, job_id in taken:
        job = await call(http, recorder, "get-final", "GET", f"/v1/jobs/{job_id}")
        state = job.json()["state"] if job is not None else "unknown"
        states[state] = states.get(state, 0) + 1
        if state in ("queued", "running"):
            live.append((http, job_id))
    for http, job_id in live:
        await call(http, recorder, "cancel", "POST", f"/v1/jobs/{job_id}/cancel")
    for http in {id(h): h for h, _ in taken}.values():
        await http.aclose()
    return states


# ------------------------------------------------------------------ the real service


def marlaas(*args: str) -> str:
    """Run a marlaas command (this tree's); its stdout."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "marlaas", *args], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode:
        raise SystemExit(f"marlaas {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def uptime() -> str:
    """The machine's ``uptime`` line (its load averages)."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def start_service(data: Path, port: int, backend: str, log: Path) -> subprocess.Popen:
    """``marlaas serve traces/service/tiny.yaml`` on ``port``, once its health says ok."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "marlaas", "serve", str(CLUSTER), "--data", str(data),
               "--port", str(port), "--backend", backend, "--log-level", "warning"]  # fmt: skip
    with open(log, "ab") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=out)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the service stopped:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=2).json()["status"] == "ok":
                return proc
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.25)
    proc.kill()
    raise SystemExit(f"the service did not start in {START_TIMEOUT_S:.0f} s")


def stop_service(proc: subprocess.Popen) -> int:
    """SIGTERM, then SIGKILL after a minute; the exit status."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(30)


def start_trainer(url: str, key: str, spec: dict, timeout_s: float = 300.0) -> dict:
    """Submit the trainer's job; it once its first step is durable (so a run trains)."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
        answer = http.post("/v1/jobs", json=spec)
        answer.raise_for_status()
        job_id, deadline = answer.json()["id"], time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = http.get(f"/v1/jobs/{job_id}").json()
            if job["step"] >= 1 or job["state"] not in ("queued", "running"):
                return job
            time.sleep(0.2)
    raise SystemExit(f"the trainer's job {job_id} made no step in {timeout_s:.0f} s")


def job_spec(steps: int, name: str) -> dict:
    """traces/service/emit-a.yaml with ``steps`` steps, named ``name``."""
    from marlaas.workload_file import read_yaml

    spec = read_yaml(JOB_FILE, what="job spec")
    return {**spec, "name": name, "rl": {**spec["rl"], "steps": steps}}


# ------------------------------------------------------------------ report


def report(results: dict) -> str:
    """The printed figures of ``results``."""
    lines = [f"{'kind':<10s} {'requests':>8s} {'failed':>6s} {'refused':>8s} {'p50 ms':>8s} "
             f"{'p90 ms':>8s} {'p99 ms':>8s} {'max ms':>8s}"]  # fmt: skip
    for name, row in results["requests"].items():
        refused = ",".join(f"{n}x{s}" for s, n in row["refused"].items()) or "-"
        figures = " ".join(_ms(row[f"{q}_ms"]) for q in ("p50", "p90", "p99", "max"))
        lines.append(f"{name:<10s} {row['requests']:>8d} {row['failures']:>6d} {refused:>8s} "
                     f"{figures}")  # fmt: skip
    total = sum(row["requests"] for row in results["requests"].values())
    lines.append(f"requests {total:,} in {results['window_s']:.1f} s "
                 f"({total / results['window_s']:.1f}/s); failed requests: "
                 f"{results['failures']}")  # fmt: skip
    lines += [f"  {sample}" for sample in results["failure_samples"]]
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return f"{'-':>8s}" if value is None else f"{value:>8.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50, help="polling clients")
    parser.add_argument("--submissions", type=int, default=200, help="jobs submitted")
    parser.add_argument("--duration", type=float, default=60.0,
                        help="the load window [s]: submissions spread over it")  # fmt: skip
    parser.add_argument("--poll-s", type=float, default=0.5,
                        help="a client's pause between two requests [s]")  # fmt: skip
    parser.add_argument("--tenants", type=int, default=10, help="tenants submitting")
    parser.add_argument("--job-steps", type=int, default=2, help="a submitted job's steps")
    parser.add_argument("--train-steps", type=int, default=400,
                        help="the trainer's job's steps (it trains all the window)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=30.0, help="a request's timeout [s]")
    parser.add_argument("--backend", choices=("auto", "vllm", "hf"), default="auto")
    parser.add_argument("--data", type=Path, help="a new folder for the service's data "
                        "(default: a temporary one, removed afterwards)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if min(args.clients, args.submissions, args.tenants, args.job_steps, args.train_steps) < 1:
        parser.error("--clients, --submissions, --tenants, --job-steps, --train-steps: >= 1")
    if not (args.duration > 0 and args.poll_s >= 0 and args.timeout > 0):
        parser.error("--duration and --timeout: more than 0; --poll-s: 0 or more")
    if args.data is not None and args.data.exists() and any(args.data.iterdir()):
        parser.error(f"--data {args.data}: not empty; give a new folder")
    results = run(args)
    print(report(results))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0 if results["failures"] == 0 else 1


def run(args: argparse.Namespace) -> dict:
    """The whole benchmark: service up, tenants, trainer, load, cancels, service down."""
    root = Path(tempfile.mkdtemp(prefix="marlaas-load-"))
    data = args.data or root / "data"
    try:
        if not (MODEL / "config.json").is_file():
            marlaas("make-tiny-model", str(MODEL))
        quota = ["--max-active-jobs", "2", "--max-queued-jobs",
                 str(math.ceil(args.submissions / args.tenants))]  # fmt: skip
        names = ["trainer"] + [f"load{i:02d}" for i in range(args.tenants)]
        keys = {name: marlaas("tenants", "add", name, "--data", str(data), *quota)
                .strip().splitlines()[-1] for name in names}  # fmt: skip
        before = uptime()
        print(f"before: {before}", flush=True)
        port = free_port()
        proc = start_service(data, port, args.backend, root / "serve.log")
        url = f"http://127.0.0.1:{port}"
        try:
            trainer = start_trainer(url, keys.pop("trainer"),
                                    job_spec(args.train_steps, "trainer"))  # fmt: skip
            load = Load(args.clients, args.submissions, args.duration, args.poll_s,
                        job_spec(args.job_steps, "load"), args.timeout)  # fmt: skip
            operator = (data / "operator.key").read_text().strip()
            print(f"trainer job {trainer['id']} at step {trainer['step']}; load starts: "
                  f"{args.clients} clients, {args.submissions} submissions over "
                  f"{args.duration:.0f} s", flush=True)  # fmt: skip
            results = asyncio.run(measure(url, operator, list(keys.values()), load, trainer))
        finally:
            status = stop_service(proc)
        after = uptime()
        print(f"after:  {after}")
        results.update(uptime_before=before, uptime_after=after, service_exit=status,
                       argv=sys.argv, cpus=os.cpu_count())  # fmt: skip
        return results
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def measure(url: str, operator: str, tenant_keys: list[str], load: Load,
                  trainer: dict) -> dict:  # fmt: skip
    """The load run and what followed it, as the results' dict."""
    recorder, taken, window = await run_load(url, operator, tenant_keys, load)
    async with _client(url, operator, load.timeout_s) as http:
        trained = await call(http, recorder, "get-final", "GET", f"/v1/jobs/{trainer['id']}")
    states = await cancel_live(recorder, taken)
    trained = trained.json() if trained is not None else {}
    print(f"window {window:.1f} s; trainer job {trainer['id']} steps {trainer['step']} -> "
          f"{trained.get('step')} of {trained.get('steps')} ({trained.get('state')}); "
          f"submissions taken {len(taken)}, their states at the end {states}")  # fmt: skip
    return {
        "requests": recorder.summary(), "failures": recorder.failures,
        "failure_samples": recorder.samples, "window_s": window,
        "submissions": {"sent": load.submissions, "taken": len(taken), "states": states},
        "trainer": {"id": trainer["id"], "step_before": trainer["step"],
                    "step_after": trained.get("step"), "steps": trained.get("steps")},
        "load": {"clients": load.clients, "submissions": load.submissions,
                 "duration_s": load.duration_s, "poll_s": load.poll_s,
                 "job_steps": load.spec["rl"]["steps"]},
    }  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
