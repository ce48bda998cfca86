"""A day of a service's traffic, recorded and replayed: the same admission in both worlds.

    python benchmarks/service_day.py --out runs/day [--tenants 5 --jobs 60 --speed 40]

Starts ``marlaas serve traces/service/day.yaml --simulate --speed S`` (the simulator on the
wall clock, S simulated seconds per wall second), adds ``--tenants`` tenants, and submits
``--jobs`` jobs from them at seeded Poisson times (mean gap ``--gap-s`` simulated seconds),
each of a size drawn from three kinds (a short arithmetic job, a multi-turn calculator job,
a long one); a tenant cancels some of its jobs. Then ``marlaas traffic`` writes the day as a
workload file, and ``marlaas simulate`` replays it under the service's policy and under
``--policies``. It prints, per world and policy, the jobs finished, cancelled and refused and
the makespan and mean job completion time, and says whether every refusal of the service
was a refusal of the replay under the same policy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "traces" / "service" / "day.yaml"

KINDS = [
    {"name": "math", "lora_rank": 8,
     "rl": {"steps": 6, "prompts_per_step": 4, "group_size": 8, "max_new_tokens": 512},
     "prompt_tokens": {"dist": "lognormal", "median": 200, "sigma": 0.5},
     "response_tokens": {"dist": "lognormal", "median": 250, "sigma": 0.7},
     "env": {"name": "arithmetic"}},
    {"name": "tools", "lora_rank": 16,
     "rl": {"steps": 8, "prompts_per_step": 4, "group_size": 4, "max_new_tokens": 256,
            "turns": 3},
     "prompt_tokens": {"dist": "constant", "value": 300},
     "response_tokens": {"dist": "lognormal", "median": 120, "sigma": 0.6},
     "env": {"name": "calculator", "observation_tokens": 32,
             "latency_s": {"dist": "uniform", "low": 0.5, "high": 2.0}}},
    {"name": "long", "lora_rank": 16,
     "rl": {"steps": 20, "prompts_per_step": 8, "group_size": 8, "max_new_tokens": 1024},
     "prompt_tokens": {"dist": "constant", "value": 256},
     "response_tokens": {"dist": "lognormal", "median": 400, "sigma": 0.8},
     "env": {"name": "arithmetic"}},
]  # fmt: skip
"""The kinds of job tenants submit (job specs in the workload schema)."""


def marlaas(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the marlaas CLI of this tree."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "marlaas.cli", *args], env=env,
                          capture_output=True, text=True)  # fmt: skip
    if check and done.returncode != 0:
        raise SystemExit(f"marlaas {' '.join(args)} failed:\n{done.stderr}")
    return done


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_day(args: argparse.Namespace, data: Path, url: str) -> dict[int, str]:
    """Submit the day's jobs; wait for every one to end; each job's state by id."""
    rng = np.random.default_rng(args.seed)
    keys = {}
    for i in range(args.tenants):
        name = f"tenant{i}"
        keys[name] = marlaas("tenants", "add", name, "--data", str(data)).stdout.split()[-1]
    names = list(keys)
    submitted: list[tuple[str, int]] = []
    with httpx.Client(base_url=url, timeout=60) as http:
        started = time.monotonic()
        at_s = 0.0
        for _ in range(args.jobs):
            at_s += rng.exponential(args.gap_s)
            time.sleep(max(0.0, started + at_s / args.speed - time.monotonic()))
            tenant = names[rng.integers(len(names))]
            spec = KINDS[rng.choice(len(KINDS), p=[0.5, 0.3, 0.2])]
            response = http.post("/v1/jobs", json=spec,
                                 headers={"Authorization": f"Bearer {keys[tenant]}"})  # fmt: skip
            if response.status_code in (201, 429):
                job_id = response.json().get("id") if response.status_code == 201 else None
                if job_id is not None:
                    submitted.append((tenant, job_id))
            else:
                raise SystemExit(f"submission failed: {response.status_code} {response.text}")
            if submitted and rng.random() < args.cancel_fraction:
                tenant, job_id = submitted[rng.integers(len(submitted))]
                http.post(f"/v1/jobs/{job_id}/cancel",
                          headers={"Authorization": f"Bearer {keys[tenant]}"})  # fmt: skip
        operator = {"Authorization": f"Bearer {(data / 'operator.key').read_text().strip()}"}
        worst = 0.0
        while True:
            worst = max(worst, http.get("/v1/cluster", headers=operator).json()["lag_s"])
            jobs = http.get("/v1/jobs", headers=operator).json()
            if all(j["state"] in ("done", "cancelled", "failed", "refused") for j in jobs):
                print(
                    f"the simulated service ran at most {worst:.1f} simulated s behind "
                    "the wall clock (sampled)"
                )
                return {j["id"]: j["state"] for j in jobs}
            time.sleep(0.5)


def summarize(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    states = summary["job_states"]
    finish = [t for t in summary["job_finish_s"].values() if t is not None]
    return {
        "states": states, "makespan_s": summary["metrics"]["makespan_s"],
        "mean_jct_s": summary["metrics"]["jct_mean_s"] or float("nan"),
        "finished": sum(s == "finished" for s in states.values()),
        "cancelled": sum(s == "cancelled" for s in states.values()),
        "refused": sum(s == "refused" for s in states.values()), "ended": len(finish),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for everything")
    parser.add_argument("--tenants", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--gap-s", type=float, default=120.0, help="mean simulated gap [s]")
    parser.add_argument("--speed", type=float, default=40.0)
    parser.add_argument("--cancel-fraction", type=float, default=0.1)
    parser.add_argument("--policies", default="fifo,srtf", help="replayed besides the service's")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    data, port = args.out / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(args.out / "serve.log", "w") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "marlaas.cli", "serve", str(CLUSTER), "--data", str(data),
             "--simulate", "--speed", str(args.speed), "--port", str(port)],
            env=env, stdout=log, stderr=log,
        )  # fmt: skip
        try:
            while True:
                try:
                    if httpx.get(f"{url}/v1/health").json()["status"] == "ok":
                        break
                except httpx.TransportError:
                    time.sleep(0.2)
            wall = time.monotonic()
            served = run_day(args, data, url)
            wall = time.monotonic() - wall
        finally:
            serve.terminate()
            serve.wait(60)
    day = args.out / "day.yaml"
    marlaas("traffic", "--data", str(data), "--out", str(day))
    policy = json.loads((data / "config.json").read_text())["policy"]
    print(
        f"the service ({policy}, simulated at {args.speed:g}x): {len(served)} jobs in "
        f"{wall:.0f} s of wall time; states {dict(sorted(_count(served.values()).items()))}"
    )
    print(f"{'replay':<12s} {'finished':>8s} {'cancelled':>9s} {'refused':>7s} "
          f"{'makespan':>10s} {'mean JCT':>10s}")  # fmt: skip
    results = {}
    for name in [policy, *[p for p in args.policies.split(",") if p and p != policy]]:
        run = args.out / f"replay-{name}"
        marlaas("simulate", str(day), "--policy", name, "--out", str(run), "--quiet")
        results[name] = summarize(run)
        r = results[name]
        print(f"{name:<12s} {r['finished']:>8d} {r['cancelled']:>9d} {r['refused']:>7d} "
              f"{r['makespan_s']:>9.0f}s {r['mean_jct_s']:>9.0f}s")  # fmt: skip
    refused = sorted(f"j{i}" for i, s in served.items() if s == "refused")
    replayed = sorted(n for n, s in results[policy]["states"].items() if s == "refused")
    same = "the same" if refused == replayed else "NOT the same"
    print(
        f"refused by the service: {refused or 'none'}; by its replay under {policy}: "
        f"{replayed or 'none'} ({same})"
    )


def _count(values) -> dict:
    out: dict = {}
    for value in values:
        out[value] = out.get(value, 0) + 1
    return out


if __name__ == "__main__":
    main()
