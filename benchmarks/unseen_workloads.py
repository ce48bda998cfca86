"""Write the workloads that split-progress was checked on beyond the ones in traces/
(docs/policies-log.md, "Two kinds of job: split-progress"), all made from traces/paper-32.yaml::

    python -m benchmarks.unseen_workloads --out runs

- ``new1.yaml``: the jobs with an odd index (16 jobs, all size M, weights 1 and 2), rollout
  pool 16 devices, training pool 8;
- ``new2.yaml``: the first 20 jobs that are not tool jobs, rl.steps x 0.7 rounded (at least
  4), the math jobs' prompts_per_step doubled, every weight 1; rollout 36, training 12;
- ``steps2.yaml``: paper-32 with every job's rl.steps doubled (every job twice as long, in
  tokens and in time; its critical paths twice paper-32's);
- ``steps-half.yaml``: paper-32 with every job's rl.steps halved (rounded up): short jobs
  only, the longest critical path (code-L, 10 steps) 729 s estimated, below split-progress's
  fixed bound for a big job (1,200 s) before it was made relative.

- ``rand-0.yaml`` ... ``rand-9.yaml`` (``--random 10``): random workloads of paper-32's job
  kinds, each seeded by its number (:func:`random_workload`): 6-32 jobs drawn from paper-32's,
  each with its steps x 0.4-1.6, its prompts per step x 0.5, 1 or 2 and its response median
  x 0.5-2, weight 2 for one in four; by a coin flip per workload, every job at t = 0 or
  arrivals uniform over 0 to a horizon drawn from 300-2,000 s; 1.5 rollout devices a job x
  0.5-1.5 and training devices in fours, half a device a job x 0.5-1.5. numpy's
  ``default_rng`` draws them: numpy does not promise the same draws across its versions
  (docs/results/random-workloads.txt were made with numpy 2.3.5).

paper-32 under the a100-7b profile needs no file: ``marlaas sweep traces/paper-32.yaml
--cost a100-7b``. The files are written with ``yaml.safe_dump(..., sort_keys=False)`` from
``yaml.safe_load`` of paper-32 (its ``prices:`` block, read by ``marlaas plan`` only, kept).
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from pathlib import Path

import numpy as np
import yaml

from marlaas.atomic import write_durably

PAPER_32 = Path(__file__).resolve().parent.parent / "traces" / "paper-32.yaml"


def _pools(workload: dict, rollout: int, train: int) -> None:
    for pool in workload["cluster"]["pools"]:
        pool["devices"] = rollout if pool["role"] == "inference" else train


def new1(base: dict) -> dict:
    """The odd-indexed jobs of paper-32 (all size M) on 16 + 8 devices."""
    w = copy.deepcopy(base)
    w["jobs"] = [job for i, job in enumerate(w["jobs"]) if i % 2 == 1]
    _pools(w, 16, 8)
    return w


def new2(base: dict) -> dict:
    """The first 20 math and code jobs, shorter, the math jobs twice as wide, weight 1."""
    w = copy.deepcopy(base)
    jobs = [job for job in w["jobs"] if not job["name"].startswith("tool")][:20]
    for job in jobs:
        job["rl"] = dict(job["rl"])
        job["rl"]["steps"] = max(4, round(job["rl"]["steps"] * 0.7))
        if job["name"].startswith("math"):
            job["rl"]["prompts_per_step"] *= 2
        job["weight"] = 1
    w["jobs"] = jobs
    _pools(w, 36, 12)
    return w


def scaled_steps(base: dict, factor: float) -> dict:
    """paper-32 with every job's rl.steps times ``factor`` (rounded up)."""
    w = copy.deepcopy(base)
    for job in w["jobs"]:
        job["rl"] = dict(job["rl"])
        job["rl"]["steps"] = max(1, math.ceil(job["rl"]["steps"] * factor))
    return w


def random_workload(base: dict, number: int) -> dict:
    """A random workload of paper-32's job kinds, the same for the same ``number``."""
    rng = np.random.default_rng(1000 + number)
    w = copy.deepcopy(base)
    count = int(rng.integers(6, 33))
    picks = rng.integers(0, len(base["jobs"]), count)
    spread = rng.random() < 0.5
    horizon_s = float(rng.uniform(300, 2000))
    jobs = []
    for i, pick in enumerate(picks):
        job = copy.deepcopy(base["jobs"][int(pick)])
        job["name"] = f"{job['name'].split('-')[0]}-{i:02d}"
        job["tenant"] = f"r{i:02d}"
        job["weight"] = int(rng.choice([1, 1, 1, 2]))
        job["rl"] = dict(job["rl"])
        job["rl"]["steps"] = max(2, round(job["rl"]["steps"] * rng.uniform(0.4, 1.6)))
        prompts = job["rl"]["prompts_per_step"] * rng.choice([0.5, 1, 1, 2])
        job["rl"]["prompts_per_step"] = max(4, int(prompts))
        lengths = dict(job["response_tokens"])
        lengths["median"] = round(lengths["median"] * rng.uniform(0.5, 2.0))
        job["response_tokens"] = lengths
        if spread:
            job["arrival_s"] = round(float(rng.uniform(0, horizon_s)), 1)
        jobs.append(job)
    w["jobs"] = jobs
    rollout = max(2, round(1.5 * count * rng.uniform(0.5, 1.5)))
    _pools(w, rollout, 4 * max(1, round(0.5 * count * rng.uniform(0.5, 1.5) / 4)))
    return w


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs", help="folder to write the files into")
    parser.add_argument("--random", type=int, default=0, metavar="N",
                        help="also write rand-0 ... rand-(N-1) (default 0)")  # fmt: skip
    args = parser.parse_args(argv)
    if not 0 <= args.random <= 1000:
        parser.error(f"--random {args.random}: must be 0-1000")
    base = yaml.safe_load(PAPER_32.read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    made = {
        "new1": new1(base),
        "new2": new2(base),
        "steps2": scaled_steps(base, 2.0),
        "steps-half": scaled_steps(base, 0.5),
        **{f"rand-{k}": random_workload(base, k) for k in range(args.random)},
    }
    header = "# {}: made from traces/paper-32.yaml by benchmarks/unseen_workloads.py\n"
    for name in made:  # before writing any: a file of the same name is replaced only if ours
        path = out / f"{name}.yaml"
        if path.exists() and not path.read_text(errors="replace").startswith(header.format(name)):
            raise SystemExit(f"{path}: exists and is not a file this script wrote; not "
                             "replacing it (choose another --out)")  # fmt: skip
    for name, workload in made.items():
        workload["name"] = name
        text = header.format(name) + yaml.safe_dump(workload, sort_keys=False)
        write_durably(out / f"{name}.yaml", text)
        print(f"wrote {out / name}.yaml ({len(workload['jobs'])} jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
