"""The indexed rounds decide exactly what the rounds that looked at everything decided,
on random workloads, with and without failures.

The references below are the earlier rounds, verbatim in behaviour. Placement: a heap of
every ready job by policy key, each tried on every engine (its adapter resident first, then
the most free sequences, then the lowest index), a placed job pushed back with its new key,
a job that fits nowhere dropped for the round. Environments: every waiting job sorted by
key, each starting as many groups as free workers allow.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import random
import types

import pytest

from marlaas import compiled
from marlaas.core.environments import Environments
from marlaas.core.generation import next_group
from marlaas.core.policies import Policy, get_policy, policy_names
from marlaas.core.scheduler import Scheduler
from marlaas.core.workload import parse_workload
from marlaas.drive import FixedExecutor, drive
from marlaas.drive.inbox import workload_inbox
from marlaas.sim.executor import SimPyExecutor

pytestmark = pytest.mark.skipif(
    compiled.pure_reason() is None,
    reason="replaces the core's methods, which compiled classes refuse: "
    "tests/test_compiled.py runs it on the plain sources",
)


def reference_start(self, now, out, engines):
    if not self.ready or not engines:
        return
    heap = [(self.policy.key(self.jobs[i]), i) for i in self.ready]
    heapq.heapify(heap)
    while heap:
        _, index = heapq.heappop(heap)
        job = self.jobs[index]
        group, reserve = next_group(job)
        seqs, adapter = job.spec.rl.group_size, (job.name, group.version)
        best, best_score = None, None
        for engine in engines:
            if not engine.fits(seqs, reserve) or not engine.can_host(adapter):
                continue
            score = (adapter in engine.resident, engine.spec.max_seqs - engine.seqs, -engine.index)
            if best_score is None or score > best_score:
                best, best_score = engine, score
        if best is not None:
            self._place(job, best, now, out)
            if self.has_work(job):
                heapq.heappush(heap, (self.policy.key(job), index))


def reference_env_start(self, now, out):
    for job in sorted((self.jobs[i] for i in self.ready), key=self.policy.key):
        self.start_job(job, now, out)


class _Ledger:
    """What Environments.start writes through: new ids, the jobs changed, the work begun."""

    def __init__(self) -> None:
        self.touched: set[int] = set()
        self._ids = itertools.count(1)

    def new_id(self) -> int:
        return next(self._ids)

    def begin(self, decision, now, out, engine=None, trainer=None) -> None:
        out.append(decision)


def _waiting_job(index: int, rank: int) -> types.SimpleNamespace:
    """A job with one group of 4 samples waiting for an environment step."""
    group = types.SimpleNamespace(index=0, turn=0)
    rl = types.SimpleNamespace(group_size=4, turns=1)
    return types.SimpleNamespace(
        index=index, name=f"j{index}", rank=rank, group_size=4, spec=types.SimpleNamespace(rl=rl),
        groups={0: group}, ready_env=collections.deque([0]), in_env=0, step_of=lambda g: 0,
    )  # fmt: skip


class _ByRank(Policy):
    name = "by-rank (test)"

    def __init__(self) -> None:
        self.keyed: list[int] = []

    def key(self, job) -> tuple:
        self.keyed.append(job.index)
        return (job.rank, job.index)


def test_a_waiting_job_is_keyed_again_when_it_changed_after_its_key_was_given():
    """The environment stage takes a waiting job's key from the scheduler's refresh (no
    second key), unless the job changed since (``ledger.touched``): then its new key orders
    it. Workers for one group only: the first job in key order starts."""
    for changed, first in ((False, "j0"), (True, "j1")):
        policy, ledger = _ByRank(), _Ledger()
        jobs = {0: _waiting_job(0, rank=1), 1: _waiting_job(1, rank=2)}
        stage = Environments(jobs, {j.name: j for j in jobs.values()}, ledger, policy, 4)
        for index, job in jobs.items():
            stage.add_job(job)
            stage.set_ready(index, True, policy.key(job))
        policy.keyed.clear()
        if changed:
            jobs[1].rank = 0  # its key moves after the refresh that gave the stage its key
            ledger.touched.add(1)
        out: list = []
        stage.start(0.0, out)
        assert [step.job for step in out] == [first]
        assert policy.keyed == ([1] if changed else [])


def random_workload(rng: random.Random, preset: str | None) -> dict:
    jobs = []
    for i in range(rng.randint(2, 7)):
        group = rng.choice([2, 4, 8])
        jobs.append({
            "name": f"j{i}", "tenant": f"t{i}", "weight": 1 + i % 2,
            "arrival_s": rng.choice([0.0, 0.0, rng.uniform(0, 20)]),
            "rl": {"steps": rng.randint(2, 4), "prompts_per_step": rng.randint(1, 4),
                   "group_size": group, "max_new_tokens": rng.choice([32, 64, 128]),
                   "turns": rng.randint(1, 3), "max_staleness": rng.randint(0, 2)},
            "prompt_tokens": {"dist": "lognormal", "median": 20, "sigma": 0.5},
            "response_tokens": {"dist": "lognormal", "median": 30, "sigma": 1.0},
            "env": {"latency_s": {"dist": "lognormal", "median": 0.5, "sigma": 0.5},
                    "observation_tokens": rng.choice([0, 16])},
        })  # fmt: skip
    inference = rng.randint(1, 5)
    return {
        "seed": rng.randint(0, 99),
        "jobs": jobs,
        "cluster": {
            "pools": [
                {"name": "rollout", "role": "inference", "devices": inference},
                {"name": "train", "role": "training", "devices": rng.randint(1, 3)},
            ],
            "engine": {"max_seqs": rng.choice([8, 16, 32]),
                       "kv_tokens": rng.choice([4_000, 6_000, 10_000]),
                       "adapter_slots": rng.randint(1, 3)},
            "trainer": {"adapter_slots": rng.randint(1, 3)},
            "env_workers": rng.choice([8, 12, 16, 64]),
        },
        "scheduling": {"preset": preset},
    }  # fmt: skip


def decisions(data: dict, policy: str, reference: bool, failures: float | None) -> list:
    workload = parse_workload(data)
    scheduler = Scheduler.for_workload(workload, policy)
    if reference:
        scheduler.generation.start = types.MethodType(reference_start, scheduler.generation)
        environments = scheduler.environments
        environments.start = types.MethodType(reference_env_start, environments)
    if failures is None:
        executor = SimPyExecutor(scheduler.cluster, seed=scheduler.seed)
        started = []
        start = executor.start

        def watched(decision, now):
            started.append((now, decision))
            start(decision, now)

        executor.start = watched
        drive(scheduler, executor, workload_inbox(workload))
        return started
    rng = random.Random(7)
    executor = FixedExecutor(outcome=lambda d: rng.random() >= failures)
    drive(scheduler, executor, workload_inbox(workload), max_failures=50)
    return executor.started


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("failures", [None, 0.15])
def test_indexed_round_decides_like_trying_every_job(seed, failures):
    rng = random.Random(seed)
    preset = rng.choice([None, None, None, "sequential", "sync"])
    data = random_workload(rng, preset)
    for policy in policy_names():
        if get_policy(policy).ranks_engines:
            continue  # its own placement: an engine offers itself to the first job only
        if get_policy(policy).reads_backlog:
            continue  # its keys move with the backlog: re-keyed at 5% steps, not every round
        try:
            expected = decisions(data, policy, True, failures)
        except Exception as err:  # an infeasible draw: both must refuse it alike
            with pytest.raises(type(err)):
                decisions(data, policy, False, failures)
            continue
        assert decisions(data, policy, False, failures) == expected, policy
