"""What a policy sees (the view's estimates) and what it may decide (engine preference)."""

from __future__ import annotations

import math

import pytest

from marlaas.core.distributions import Constant, Empirical, LogNormal, Uniform
from marlaas.core.job_spec import EnvSpec, JobSpec
from marlaas.core.jobs import JobState
from marlaas.core.policies import Policy, get_policy, policy_names
from marlaas.core.work import Generate, LoadAdapter
from marlaas.core.workload import parse_workload
from tests.core.fixed_driver import run_fixed


def spec(**rl) -> JobSpec:
    settings = {"steps": 4, "prompts_per_step": 2, "group_size": 4, "max_new_tokens": 64, **rl}
    return JobSpec(name="j", tenant="t", rl=settings,
                   response_tokens={"dist": "lognormal", "median": 20, "sigma": 1.0})  # fmt: skip


def test_a_job_one_step_behind_another_of_its_spec_has_its_late_path_exactly():
    """split-progress's one-step tie compares these to the last bit: the product must be the
    same whatever the step counts (not a sum that rounds differently)."""
    for steps in (4, 7, 10, 37):
        ahead, behind = JobState(spec(steps=steps), 0, 1), JobState(spec(steps=steps), 0, 2)
        for done in range(1, steps):
            ahead.trained, behind.trained = done, done - 1
            assert behind.remaining_alone_s == ahead.late_alone_s
            assert ahead.remaining_alone_s != ahead.late_alone_s


def test_quantiles_of_each_distribution():
    assert LogNormal(dist="lognormal", median=300, sigma=1.0).quantile(0.5) == pytest.approx(300)
    p99 = LogNormal(dist="lognormal", median=300, sigma=1.0).quantile(0.99)
    assert p99 == pytest.approx(300 * math.exp(2.3263478740408408), rel=1e-8)  # [R1]: ~10x
    assert Uniform(dist="uniform", low=2, high=6).quantile(0.25) == 3
    assert Empirical(dist="empirical", values=[1, 2, 3, 4, 5]).quantile(0.5) == 3
    assert Constant(dist="constant", value=7).quantile(0.9) == 7


def test_the_view_estimates_remaining_work_from_the_spec():
    job = JobState(spec(), 0, 1)
    assert job.remaining_steps == 4
    assert job.remaining_tokens_high > job.remaining_tokens > 0  # a spread, above the mean
    assert job.alone_s == pytest.approx(job.remaining_alone_s) and job.alone_s > 0
    job.trained = 3
    assert job.remaining_steps == 1
    assert job.remaining_alone_s == pytest.approx(job.alone_s / 4)
    assert job.stage == "weight_sync"  # trained 3, published 0: it waits for the sync
    more_turns = JobState(spec(turns=3), 0, 1)
    assert more_turns.alone_s > job.alone_s  # a turn more is a longer critical path


def test_every_policy_names_its_idea_and_source():
    for name in policy_names():
        policy = get_policy(name)
        assert policy.idea and policy.source, name


def two_engines(jobs: int = 1):
    job_list = [
        {"name": f"j{i}", "tenant": f"t{i}",
         "rl": {"steps": 2, "prompts_per_step": 2, "group_size": 4, "max_new_tokens": 64}}
        for i in range(jobs)
    ]  # fmt: skip
    cluster = {"pools": [{"name": "rollout", "role": "inference", "devices": 2},
                         {"name": "train", "role": "training", "devices": 1}]}  # fmt: skip
    return parse_workload({"jobs": job_list, "cluster": cluster})


class OneEngineOnly(Policy):
    """Never places on engine 0."""

    def key(self, job):
        return (job.index,)

    def engine_key(self, job, engine, homes):
        return None if engine.index == 0 else (engine.index,)


def first_engines(policy) -> list[str]:
    engines: list[str] = []

    def watch(decision, now, scheduler):
        if isinstance(decision, (Generate, LoadAdapter)):
            engines.append(decision.engine)

    run_fixed(two_engines(), policy, on_decision=watch)
    return engines


def test_a_policy_may_rank_engines():
    assert not get_policy("fair").ranks_engines and OneEngineOnly.ranks_engines
    assert first_engines("fifo")[0].endswith("/0")  # the mechanism: the lowest index first
    assert first_engines(OneEngineOnly())[0].endswith("/1")


def test_a_policy_may_keep_a_group_off_an_engine():
    seen: set[str] = set()

    def watch(decision, now, scheduler):
        if isinstance(decision, Generate):
            seen.add(decision.engine)

    run = run_fixed(two_engines(jobs=2), OneEngineOnly(), on_decision=watch)
    assert [o.state for o in run.result.jobs.values()] == ["finished"] * 2
    assert seen and all(engine.endswith("/1") for engine in seen)


def crowded(jobs: int = 6):
    """More jobs than adapter slots on small engines: placement decides how often it loads."""
    job_list = [
        {"name": f"j{i}", "tenant": f"t{i}",
         "rl": {"steps": 3, "prompts_per_step": 8, "group_size": 4, "max_new_tokens": 64,
                "max_staleness": 1},
         "prompt_tokens": {"dist": "constant", "value": 16}}
        for i in range(jobs)
    ]  # fmt: skip
    cluster = {
        "pools": [{"name": "rollout", "role": "inference", "devices": 4},
                  {"name": "train", "role": "training", "devices": 2}],
        "engine": {"max_seqs": 16, "kv_tokens": 4096, "adapter_slots": 2},
        "trainer": {"adapter_slots": 8},
    }  # fmt: skip
    return parse_workload({"jobs": job_list, "cluster": cluster})


def loads_per_group(policy: str) -> float:
    counts = {"load": 0, "generate": 0}

    def watch(decision, now, scheduler):
        if isinstance(decision, LoadAdapter):
            counts["load"] += 1
        elif isinstance(decision, Generate):
            counts["generate"] += 1

    run = run_fixed(crowded(), policy, on_decision=watch)
    assert [o.state for o in run.result.jobs.values()] == ["finished"] * 6
    return counts["load"] / counts["generate"]


def test_affinity_loads_adapters_less_often_than_fair():
    fair, affinity = loads_per_group("fair"), loads_per_group("affinity")
    assert affinity < 0.8 * fair, (fair, affinity)  # (0.208 and 0.153 when written)


class FakeEngine:
    """An EngineView: 100 sequences and 1,000 KV tokens of room, some of it reserved."""

    def __init__(self, index: int, seqs: int, tokens: int, holds: bool = False) -> None:
        self.index, self.seqs, self.tokens, self._holds = index, seqs, tokens, holds
        self.free_seqs, self.free_tokens = 100 - seqs, 1000 - tokens

    def holds(self, job: str) -> bool:
        return self._holds


def test_affinity_spreads_over_homes_and_asks_for_half_empty_engines_once_it_has_enough():
    from marlaas.core.policies.affinity import home_target

    policy = get_policy("affinity")
    job = JobState(spec(prompts_per_step=30), 0, 1)
    assert home_target(job) == 6  # a home per 5 prompts
    assert home_target(JobState(spec(prompts_per_step=30, turns=4), 0, 1)) == 20  # per 6 turns
    full_home, empty_home = FakeEngine(0, 40, 900, holds=True), FakeEngine(1, 8, 100, holds=True)
    half_empty = FakeEngine(3, 8, 500)
    ranks = {e.index: policy.engine_key(job, e, 6) for e in (full_home, empty_home, half_empty)}
    assert ranks[1] < ranks[0] < ranks[3]  # homes first, the emptiest first
    assert policy.open_share(job, 6) == 0.5  # enough homes: only a half-empty engine
    assert policy.open_share(job, 5) == 0  # too few homes: it spreads to any engine


def test_las_srpt_serves_the_smaller_job_first_then_the_larger_before_the_end():
    from marlaas.core.policies.las_srpt import REMAINING_WEIGHT

    policy, fair, srtf = get_policy("las-srpt"), get_policy("fair"), get_policy("srtf")
    large, small = JobState(spec(steps=8), 0, 1), JobState(spec(steps=2), 1, 1)
    assert policy.key(small) < policy.key(large)  # SRPT's order: the smaller job first
    assert fair.key(large) < fair.key(small)  # (fair: a tie, broken by arrival order)
    # The small job has received more than c x the large job's whole size: the large one
    # is served now (srtf would still wait for the small one to finish).
    small.attained_tokens = REMAINING_WEIGHT * large.remaining_tokens * 1.01
    assert policy.key(large) < policy.key(small)
    assert srtf.key(small) < srtf.key(large)


@pytest.mark.parametrize("name", ["las-srpt", "cp-srpt"])
def test_service_counts_per_unit_of_weight(name):
    policy = get_policy(name)
    light, heavy = JobState(spec(), 0, 1), JobState(spec(), 1, 1)
    object.__setattr__(heavy, "weight", 2.0)
    assert policy.key(heavy)[0] == pytest.approx(policy.key(light)[0] / 2)


def slow_env(latency_s: float, **rl) -> JobSpec:
    """spec(), with every environment step taking ``latency_s`` seconds (a longer critical
    path, the same expected tokens)."""
    env = {"latency_s": {"dist": "constant", "value": latency_s}}
    return spec(**rl).model_copy(update={"env": EnvSpec(**env)})


def test_cp_srpt_starts_the_longer_critical_path_first_among_jobs_of_one_size():
    policy, srtf = get_policy("cp-srpt"), get_policy("srtf")
    quick, slow = JobState(slow_env(0.1), 0, 1), JobState(slow_env(60.0), 1, 1)
    assert quick.remaining_tokens == slow.remaining_tokens
    assert slow.alone_s > 10 * quick.alone_s
    assert policy.key(slow) < policy.key(quick)  # the long critical path first
    assert srtf.key(quick) < srtf.key(slow)  # (srtf: a tie, broken by arrival order)


def test_cp_srpt_serves_the_smaller_job_first_even_with_the_shorter_critical_path():
    policy = get_policy("cp-srpt")
    large, small = JobState(slow_env(1.0, steps=8), 0, 1), JobState(slow_env(1.0, steps=2), 1, 1)
    assert large.alone_s > small.alone_s
    assert policy.key(small) < policy.key(large)
    # a job 4x the size with a critical path 100x as long still waits for the small one
    slow_large = JobState(slow_env(100.0, steps=8), 2, 1)
    assert slow_large.alone_s > 50 * small.alone_s
    assert policy.key(small) < policy.key(slow_large)


def test_cp_srpt_keys_fall_as_a_job_generates_and_rise_as_it_trains():
    from marlaas.core.policies.cp_srpt import REMAINING_WEIGHT

    policy = get_policy("cp-srpt")
    served, fresh = JobState(spec(), 0, 1), JobState(spec(), 1, 1)
    start = policy.key(served)
    generated = served.remaining_tokens / 2
    served.attained_tokens += generated
    served.remaining_tokens -= generated
    assert policy.key(served) < start  # generating brings it closer to done: it goes on
    assert policy.key(served) < policy.key(fresh)
    # trained tokens count as service: once they outweigh (c - 1) x what it generated, the
    # equal job that has had nothing goes first (the jobs of one size take turns)
    served.attained_tokens += (REMAINING_WEIGHT - 1) * generated * 1.01
    assert policy.key(fresh) < policy.key(served)


def test_a_ranked_group_waits_for_its_adapter_loading_unless_open_room_would_idle():
    from marlaas.core.engine_choice import EngineChoice
    from marlaas.core.scheduler import Scheduler

    scheduler = Scheduler(two_engines().cluster, policy="affinity")
    job = JobState(spec(), 0, 0)  # 2 prompts a step: one home is enough for affinity
    loading, other = scheduler.cluster.engines
    choice = EngineChoice(scheduler.cluster, scheduler.policy, {"j": job})
    more_than_half = other.spec.kv_tokens // 2 + 1
    other.reserve(1, more_than_half, ("other", 0))
    other.loaded(("other", 0))
    loading.reserve(4, 300, ("j", 0))  # a group's load of version 0 is under way there
    assert loading.fits(4, 300) and other.fits(4, 300)
    assert scheduler.policy.open_share(job, 1) == 0.5
    assert choice.by_policy(4, 300, ("j", 0)) is None  # waits: no half-empty room elsewhere
    other.release(1, more_than_half, ("other", 0))  # now empty: a wait would leave it idle
    assert choice.by_policy(4, 300, ("j", 0)) is other
    loading.loaded(("j", 0))
    assert choice.by_policy(4, 300, ("j", 0)) is loading  # holds it ready: no load anywhere


def test_an_open_engine_is_searched_for_with_the_room_the_policy_asks():
    from marlaas.core.engine_choice import OPEN_TRIES, EngineChoice
    from marlaas.core.scheduler import Scheduler

    devices = OPEN_TRIES + 2
    cluster = {"pools": [{"name": "rollout", "role": "inference", "devices": devices},
                         {"name": "train", "role": "training", "devices": 1}]}  # fmt: skip
    job_list = [{"name": "j", "tenant": "t", "rl": {"steps": 2, "prompts_per_step": 1}}]
    workload = parse_workload({"jobs": job_list, "cluster": cluster})
    scheduler = Scheduler(workload.cluster, policy="affinity")
    job = JobState(spec(prompts_per_step=1), 0, 0)
    engines = scheduler.cluster.engines
    assert len(engines) == devices
    kv = engines[0].spec.kv_tokens
    home = engines[0]
    home.reserve(1, 8, ("j", 0))
    home.loaded(("j", 0))  # the job's one home: enough homes for one prompt a step
    for engine in engines[1:-1]:  # the most free sequences, but more than half their KV reserved
        engine.reserve(1, kv // 2 + 1, ("other", 0))
        engine.loaded(("other", 0))
    engines[-1].reserve(2, 8, ("other", 0))
    engines[-1].loaded(("other", 0))  # fewer free sequences: last in the mechanism's order
    home.reserve(0, kv - home.tokens - 10, ("j", 0))  # no room at home for the next group
    choice = EngineChoice(scheduler.cluster, scheduler.policy, {"j": job})
    assert scheduler.policy.open_share(job, 1) == 0.5
    # the half-empty engine is past the first OPEN_TRIES in the mechanism's order: found
    assert choice.by_policy(4, 300, ("j", 0)) is engines[-1]
    engines[-1].reserve(0, kv // 2, ("other", 0))
    assert choice.by_policy(4, 300, ("j", 0)) is None  # none half empty: the group waits
