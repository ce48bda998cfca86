"""The backlog figure every job's view shares, and the horizon policy's promotion by it."""

from __future__ import annotations

import math

import pytest

from marlaas.core.backlog import Backlog
from marlaas.core.jobs import JobState
from marlaas.core.policies import get_policy
from marlaas.core.policies.horizon import Horizon
from marlaas.core.scheduler import Scheduler
from marlaas.core.work import Generate
from marlaas.core.workload import JobSpec, parse_workload
from tests.core.fixed_driver import run_fixed


def job_spec(name: str, steps: int = 2, env_s: float = 0.0) -> dict:
    """A job of ``steps`` steps whose environment steps take ``env_s`` seconds (its
    estimated critical path; the fixed executor's own durations are 1 s)."""
    spec = {"name": name, "tenant": name, "response_tokens": {"dist": "constant", "value": 10},
            "rl": {"steps": steps, "prompts_per_step": 2, "group_size": 4,
                   "max_new_tokens": 64}}  # fmt: skip
    if env_s:
        spec["env"] = {"latency_s": {"dist": "constant", "value": env_s}}
    return spec


def workload(jobs: list[dict], max_seqs: int = 256):
    cluster = {"pools": [{"name": "rollout", "role": "inference", "devices": 1},
                         {"name": "train", "role": "training", "devices": 1}],
               "engine": {"max_seqs": max_seqs}}  # fmt: skip
    return parse_workload({"jobs": jobs, "cluster": cluster})


def test_the_backlog_seconds_are_recomputed_only_by_advance():
    backlog = Backlog()
    backlog.generated, backlog.tokens = 100.0, 1000.0
    backlog.advance(0.0, True)
    backlog.advance(10.0, True)  # 100 tokens in 10 s: 10 tokens/s
    assert backlog.seconds == pytest.approx(100.0)
    assert backlog.end_s == pytest.approx(110.0)  # at 10 s, 100 s of work: it ends at 110 s
    backlog.tokens -= 500.0  # a job ended mid-round: keys keyed in the round read the same
    assert backlog.seconds == pytest.approx(100.0) and backlog.end_s == pytest.approx(110.0)
    backlog.advance(10.0, True)
    assert backlog.seconds == pytest.approx(50.0) and backlog.end_s == pytest.approx(60.0)
    backlog.advance(20.0, True)  # 100 tokens in 20 s: 5 tokens/s, 100 s of work from 20 s
    assert backlog.end_s == pytest.approx(120.0)


def test_the_backlog_counts_the_live_jobs_remaining_tokens_and_the_measured_rate():
    w = workload([job_spec("a"), job_spec("b", steps=4), job_spec("c")])
    scheduler = Scheduler.for_workload(w, "fifo")
    specs = {job.name: job for job in w.jobs}
    for name in "abc":
        scheduler.submit(specs[name], 0.0)
    backlog = scheduler.backlog
    live = {name: scheduler.job(name).remaining_tokens for name in "abc"}
    assert backlog.tokens == pytest.approx(sum(live.values())) and backlog.tokens > 0
    assert scheduler.job("a").backlog_s == math.inf  # no token generated yet: no rate
    assert scheduler.job("a").backlog_end_s == math.inf
    assert scheduler.cancel("c", 1.0) == "cancelled"  # a queued job leaves at once
    assert backlog.tokens == pytest.approx(live["a"] + live["b"])
    # a job outside a scheduler has no backlog
    assert JobState(specs["a"], 0, 1).backlog_s == math.inf
    assert JobState(specs["a"], 0, 1).backlog_end_s == math.inf


def test_the_backlog_shrinks_as_turns_finish_and_is_empty_at_the_end():
    seen: list[tuple[float, float, float]] = []

    def watch(decision, now, scheduler):
        backlog = scheduler.backlog
        expected = sum(job.remaining_tokens for job in scheduler.jobs.values())
        assert backlog.tokens == pytest.approx(expected)  # current at every decision
        if scheduler.jobs:
            seen.append((now, backlog.tokens, next(iter(scheduler.jobs.values())).backlog_s))

    run = run_fixed(workload([job_spec("a"), job_spec("b", steps=4)]), "fifo", on_decision=watch)
    backlog = run.scheduler.backlog
    generated = sum(r.tokens for r in run.records if r.kind == "generate")
    assert backlog.generated == generated > 0
    assert backlog.tokens == pytest.approx(0.0, abs=1e-6)  # both finished
    assert backlog.busy_s == pytest.approx(run.result.makespan_s, rel=0.05)
    assert backlog.rate == pytest.approx(generated / backlog.busy_s)
    tokens = [t for _, t, _ in seen]
    assert tokens[0] > tokens[-1] and tokens == sorted(tokens, reverse=True)
    finite = [s for _, _, s in seen if s != math.inf]
    assert finite and finite[-1] < finite[0]  # backlog_s falls as the work gets done


def test_horizon_promotes_a_job_whose_remaining_critical_path_reaches_the_backlog():
    policy = get_policy("horizon")
    assert policy.reads_backlog
    backlog = Backlog()
    small = JobState(JobSpec(**job_spec("small")), 0, 1, backlog=backlog)
    slow = JobState(JobSpec(**job_spec("slow", steps=8, env_s=30.0)), 1, 1, backlog=backlog)
    backlog.seconds = 10 * slow.remaining_alone_s  # much work left: no hurry
    assert policy.key(small) < policy.key(slow)  # the small job first (cp-srpt's order)
    backlog.seconds = slow.remaining_alone_s * 0.99  # its latest start time has come
    assert policy.key(slow) < policy.key(small)
    slow.attained_tokens, slow.remaining_tokens = 1e9, 0.0  # all generated (training)
    assert policy.key(small) < policy.key(slow)  # nothing left to promote


class NotRekeyed(Horizon):
    """horizon with the scheduler's re-keys off: a key moves only when its job changes."""

    name = "horizon-not-rekeyed"
    reads_backlog = False


def test_a_starved_job_is_promoted_without_changing_when_the_backlog_shrinks():
    """One engine that holds one group at a time, four small jobs and one large one whose
    estimated critical path (12 steps of 30 s environment waits) is the backlog's horizon
    from the first finished turn on. Its key was taken at admission, when the backlog had no
    rate yet, and it waits without changing: only the scheduler's re-key moves it ahead."""
    jobs = [job_spec(f"s{i}", steps=3, env_s=10.0) for i in range(4)]
    jobs.append(job_spec("slow", steps=12, env_s=30.0))
    w = workload(jobs, max_seqs=4)

    def first_slow_and_small_finish(policy):
        run = run_fixed(w, policy)
        started = [(now, d) for now, d in run.executor.started if isinstance(d, Generate)]
        slow = min(now for now, d in started if d.job == "slow")
        last_small = max(now for now, d in started if d.job.startswith("s") and d.job != "slow")
        return slow, last_small

    slow, last_small = first_slow_and_small_finish(get_policy("horizon"))
    assert slow < last_small  # promoted while the small jobs still run
    slow_off, _ = first_slow_and_small_finish(NotRekeyed())
    assert slow_off > slow  # without the re-key it waits until the small jobs leave room


def test_the_longest_remaining_alone_time_follows_the_jobs_and_names_its_new_holders():
    backlog = Backlog()
    assert backlog.longest_alone_s == 0.0
    assert backlog.longest_alone_jobs == 0
    assert backlog.set_alone(0, 100.0) == {0}
    assert backlog.longest_alone_jobs == 1
    assert backlog.set_alone(1, 100.0) == {0, 1}  # a tie: the same longest, a second holder
    assert backlog.longest_alone_jobs == 2
    assert backlog.set_alone(2, 50.0) == set()
    assert backlog.set_alone(0, 80.0) == {0, 1}  # job 1 holds 100 s alone now
    assert backlog.longest_alone_jobs == 1
    assert backlog.set_alone(1, 60.0) == {0, 1}  # job 0 (80 s) holds it now; 1 lost it
    assert backlog.longest_alone_s == 80.0 and backlog.longest_alone_jobs == 1
    assert backlog.set_alone(0, None) == {0, 1}  # job 0 ended: job 1 (60 s) next
    assert backlog.longest_alone_s == 60.0
    for step in range(200):  # many changes: stale entries are dropped, the answer holds
        backlog.set_alone(2, 50.0 - step * 0.1)
    assert backlog.longest_alone_s == 60.0 and len(backlog._alone_heap) < 40


def test_the_runner_up_one_step_later_follows_the_jobs_and_re_keys_the_longest():
    backlog = Backlog()
    assert backlog.runner_up_late_s == 0.0
    assert backlog.set_alone(0, 100.0, 110.0) == {0}
    assert backlog.runner_up_late_s == 0.0  # nothing below the longest
    assert backlog.set_alone(1, 100.0, 110.0) == {0, 1}
    assert backlog.runner_up_late_s == 0.0  # a tie is not a runner-up
    assert backlog.set_alone(2, 50.0, 60.0) == {0, 1}  # a runner-up appears: 0, 1 re-keyed
    assert backlog.runner_up_late_s == 60.0
    assert backlog.set_alone(3, 20.0, 25.0) == set()  # below the runner-up: nothing moves
    assert backlog.set_alone(0, 90.0, 100.0) == {0, 1}  # job 1 alone at 100 s, 0 runner-up
    assert backlog.longest_alone_s == 100.0 and backlog.runner_up_late_s == 100.0
    assert backlog.set_alone(2, 90.0, 95.0) == set()  # a second runner-up: the later counts
    assert backlog.runner_up_late_s == 100.0
    assert backlog.set_alone(0, None) == {1}  # job 0 ended: job 2 is the runner-up
    assert backlog.runner_up_late_s == 95.0
    backlog.set_alone(1, None)  # job 1 ended: job 2 holds the longest, job 3 is next
    assert backlog.longest_alone_s == 90.0 and backlog.runner_up_late_s == 25.0
    for _ in range(3):  # values that leave and come back leave copies in the heap
        backlog.set_alone(3, 90.0, 95.0)
        backlog.set_alone(3, 20.0, 25.0)
    assert backlog.runner_up_late_s == 25.0 and backlog.longest_alone_s == 90.0


def test_the_scheduler_keeps_the_longest_alone_time_of_the_live_jobs():
    longest: list[float] = []

    def watch(decision, now, scheduler):
        alone = [job.remaining_alone_s for job in scheduler.jobs.values()]
        assert scheduler.backlog.longest_alone_s == pytest.approx(max(alone, default=0.0))
        longest.append(scheduler.backlog.longest_alone_s)

    jobs = [job_spec("a", steps=2, env_s=5.0), job_spec("b", steps=6, env_s=1.0)]
    run_fixed(workload(jobs), "horizon", on_decision=watch)
    assert longest[0] > longest[-1]  # it falls as steps are trained


def test_bottleneck_sizes_jobs_by_tokens_while_the_cluster_binds_else_by_critical_path():
    policy = get_policy("bottleneck")
    assert policy.reads_backlog
    backlog = Backlog()
    wordy = job_spec("wordy")  # many tokens, no environment wait: a short critical path
    wordy["response_tokens"] = {"dist": "constant", "value": 60}
    jobs = [JobState(JobSpec(**spec), i, 1, backlog=backlog) for i, spec in enumerate(
        [wordy, job_spec("waits", env_s=30.0), job_spec("long", steps=8, env_s=60.0)])]  # fmt: skip
    wordy_job, waits, long = jobs
    for job in jobs:
        backlog.set_alone(job.index, job.remaining_alone_s)
    assert backlog.longest_alone_s == long.remaining_alone_s
    assert waits.remaining_alone_s > wordy_job.remaining_alone_s
    assert waits.remaining_tokens < wordy_job.remaining_tokens
    backlog.seconds = 10 * long.remaining_alone_s  # the cluster binds: tokens decide
    assert policy.key(waits) < policy.key(wordy_job)
    assert [policy.key(j) for j in jobs] == [get_policy("horizon").key(j) for j in jobs]
    backlog.seconds = 1.0  # the critical paths bind: the long job is promoted, then paths
    assert policy.key(long) < policy.key(wordy_job) < policy.key(waits)


def test_a_busy_stretch_begins_when_a_job_comes_to_an_idle_scheduler():
    backlog = Backlog()
    assert backlog.busy_since_s == math.inf  # no job yet
    backlog.advance(0.0, True)
    backlog.advance(300.0, True)
    assert backlog.busy_since_s == 0.0 and backlog.busy_s == 300.0
    backlog.advance(500.0, False)  # the last job ended at 500 s
    backlog.advance(700.0, True)  # the next came at 700 s
    assert backlog.busy_since_s == 700.0 and backlog.busy_s == 500.0
    backlog.advance(900.0, True)
    assert backlog.busy_since_s == 700.0 and backlog.busy_s == 700.0


def test_a_job_that_comes_after_an_idle_spell_starts_a_new_busy_stretch():
    seen: dict[str, set[float]] = {}

    def watch(decision, now, scheduler):
        for job in scheduler.jobs.values():
            seen.setdefault(job.name, set()).add(job.busy_since_s)

    jobs = [job_spec("a"), job_spec("b", steps=6) | {"arrival_s": 1000.0},
            job_spec("c") | {"arrival_s": 1001.0}]  # fmt: skip
    run = run_fixed(workload(jobs), "split-progress", on_decision=watch)
    assert run.result.job_finish_s["a"] < 1000.0  # the cluster was idle when b came
    assert seen == {"a": {0.0}, "b": {1000.0}, "c": {1000.0}}  # c came while b ran
    idle_s = 1000.0 - run.result.job_finish_s["a"]
    busy_s = run.scheduler.backlog.busy_s  # the token rate's time: the idle spell left out
    assert busy_s == pytest.approx(run.result.makespan_s - idle_s)
