"""Jobs that arrive while a run goes on: submission, cancel, admission and quotas are facts
of the core, in a running simulation as in a batch one."""

from __future__ import annotations

import threading

import pytest

from marlaas.core.outcomes import JobOutcome
from marlaas.core.scheduler import Scheduler
from marlaas.core.tenant_spec import TenantSpec
from marlaas.core.work import (
    AbortGeneration,
    AdmitJob,
    EvictAdapter,
    Generate,
    ReleaseJob,
    SwapOut,
    Train,
)
from marlaas.core.workload import parse_workload
from marlaas.drive import FixedExecutor, drive
from marlaas.drive.inbox import (
    Cancel,
    Inbox,
    InboxClosedError,
    SetQuota,
    Submit,
    workload_inbox,
)
from marlaas.eventlog import records_to_frame
from marlaas.sim.executor import SimPyExecutor
from marlaas.sim.run import simulate
from tests.core.fixed_driver import Watched, rows, run_fixed
from tests.core.test_scheduler import workload


def sim_workload(jobs=3, steps=4, **extra):
    """A small simulated workload: groups of uneven lengths, so work of a step overlaps."""
    data = workload(jobs=jobs, steps=steps, **extra).model_dump()
    for job in data["jobs"]:
        job["response_tokens"] = {"dist": "lognormal", "median": 40, "sigma": 0.8}
        job["rl"]["prompts_per_step"] = 3
    return parse_workload(data)


def spec_of(name, steps=3, tenant=None, **rl):
    """A job of the test workload's shape, named ``name``."""
    data = workload(jobs=1, steps=steps).model_dump()["jobs"][0]
    data.update(name=name, tenant=tenant or f"t-{name}")
    data["rl"].update(rl)
    return parse_workload({"jobs": [data]}).jobs[0]


def simulated(work, inbox, observers=(), policy="fair"):
    """(result, scheduler, events frame) of a checked simulation fed by ``inbox``."""
    scheduler = Scheduler.for_workload(work, policy)
    executor = SimPyExecutor(scheduler.cluster, seed=scheduler.seed)
    result = drive(scheduler, executor, inbox, observers=observers)
    return result, scheduler, records_to_frame(result.records)


class CancelMidStep:
    """An observer that cancels ``job`` right after its first turn of step ``step`` comes
    back while more of its work is in flight (a time the run did not know at its start)."""

    def __init__(self, inbox: Inbox, scheduler_of, job: str, step: int = 1) -> None:
        self.inbox, self.scheduler_of, self.job, self.step = inbox, scheduler_of, job, step
        self.at: float | None = None
        self.in_flight = 0

    def __call__(self, decision, event, now) -> None:
        if self.at is not None or decision.job != self.job or not isinstance(decision, Generate):
            return
        state = self.scheduler_of().job(self.job)
        if decision.step >= self.step and state.in_gen:
            self.at, self.in_flight = now, state.in_flight
            self.inbox.put(Cancel(self.job))  # due at once: the loop stamps it with now


def test_jobs_submitted_to_a_running_simulation_at_times_it_did_not_know_are_trained():
    work = sim_workload(jobs=2)
    inbox = Inbox()
    for job in work.jobs:
        inbox.put(Submit(job), 0.0)
    late = [spec_of("late-a"), spec_of("late-b", steps=2)]
    submitted = {}

    def submit_on_first_training(decision, event, now):
        if isinstance(decision, Train) and event.ok and not submitted:
            submitted["late-a"] = now
            inbox.put(Submit(late[0]))  # at once
            inbox.put(Submit(late[1]), now + 7.5)  # later, on the run's clock
            inbox.close()

    result, _, frame = simulated(work, inbox, [submit_on_first_training])
    assert submitted["late-a"] > 0
    assert [o.state for o in result.jobs.values()] == ["finished"] * 4
    assert result.jobs["late-a"].arrival_s == submitted["late-a"]
    assert result.jobs["late-b"].arrival_s == submitted["late-a"] + 7.5
    for name in ("late-a", "late-b"):
        rows = frame[frame.job == name]
        assert rows.start_s.min() >= result.jobs[name].arrival_s
        trained = rows[(rows.kind == "train") & (rows.outcome == "ok")]
        assert sorted(trained.step) == list(range(result.jobs[name].steps))


def test_a_job_cancelled_mid_step_has_its_work_in_flight_discarded_and_holds_nothing():
    work = sim_workload(jobs=3, steps=4)
    inbox = Inbox()  # open: the cancel comes in later
    for job in work.jobs:
        inbox.put(Submit(job), 0.0)
    holder: dict = {}
    cancel = CancelMidStep(inbox, lambda: holder["scheduler"], "j1")
    released = []

    def close_once_cancelled(decision, event, now):
        cancel(decision, event, now)
        if cancel.at is not None and not inbox.closed:
            inbox.close()
        scheduler = holder["scheduler"]
        if cancel.at is not None and scheduler.status("j1") is None:  # it ended: nothing left
            released.append(scheduler.leftovers(JobOutcome("j1", "t1", "cancelled", 0, 0, 4,
                                                           index=1)))  # fmt: skip

    scheduler = Scheduler.for_workload(work, "fair")
    holder["scheduler"] = scheduler
    started = []
    executor = Watched(SimPyExecutor(scheduler.cluster, seed=scheduler.seed),
                       lambda d, now: started.append((now, d)))  # fmt: skip
    result = drive(scheduler, executor, inbox, observers=[close_once_cancelled])  # invariants
    frame = records_to_frame(result.records)

    assert cancel.at is not None and cancel.in_flight > 0  # it had work in flight
    outcome = result.jobs["j1"]
    assert outcome.state == "cancelled" and outcome.published < outcome.steps
    mine = frame[frame.job == "j1"]
    discarded = mine[mine.outcome == "cancelled"]
    assert len(discarded) >= 1 and (discarded.end_s >= cancel.at).all()
    assert (mine[mine.outcome != "cancelled"].end_s <= cancel.at).all()
    teardown = (ReleaseJob, EvictAdapter, SwapOut, AbortGeneration)  # its stops, release
    assert all(isinstance(d, teardown) for now, d in started if d.job == "j1" and now > cancel.at)
    assert released and all(left == [] for left in released)  # freed as soon as it ended
    assert outcome.end_s == discarded.end_s.max()  # it ended when its last work came back
    assert [o.state for n, o in result.jobs.items() if n != "j1"] == ["finished"] * 2


@pytest.mark.parametrize("policy", ["fifo", "fair"])
def test_after_a_cancel_the_run_does_not_depend_on_what_the_job_would_have_done(policy):
    """The cancelled job leaves no trace: a run where it had asked for ten times the steps,
    cancelled at the same moment, is the same run, row for row."""

    def run(steps: int):
        work = sim_workload(jobs=3, steps=4)
        jobs = [j.model_copy(update={"rl": j.rl.model_copy(update={"steps": steps})})
                if j.name == "j1" else j for j in work.jobs]  # fmt: skip
        inbox = Inbox()
        for job in jobs:
            inbox.put(Submit(job), 0.0)
        holder: dict = {}
        cancel = CancelMidStep(inbox, lambda: holder["scheduler"], "j1", step=2)

        def observe(decision, event, now):
            cancel(decision, event, now)
            if cancel.at is not None and not inbox.closed:
                inbox.close()

        scheduler = Scheduler.for_workload(work, policy)
        holder["scheduler"] = scheduler
        executor = SimPyExecutor(scheduler.cluster, seed=scheduler.seed)
        result = drive(scheduler, executor, inbox, observers=[observe])
        return rows(result.records), cancel.at

    short, at_short = run(4)
    long, at_long = run(40)
    assert at_short == at_long is not None
    assert short == long


def test_a_job_cancelled_while_queued_leaves_the_run_as_if_it_never_came():
    data = sim_workload(jobs=2, steps=3, scheduling={"max_active_jobs": 1}).model_dump()
    alone = parse_workload(data)
    data["jobs"].append({**data["jobs"][0], "name": "gives-up", "tenant": "t9",
                         "arrival_s": 1.0, "cancel_after_s": 5.0})  # fmt: skip
    with_it = parse_workload(data)
    run = run_fixed(with_it, "fifo")
    assert run.result.jobs["gives-up"].state == "cancelled"
    assert run.result.jobs["gives-up"].end_s == 6.0
    assert "gives-up" not in run.states  # never admitted: the executor never heard of it
    assert rows(run.records) == rows(run_fixed(alone, "fifo").records)


def test_tenant_quota_holds_a_tenants_second_job_while_others_run():
    data = workload(jobs=3, steps=2, scheduling={"tenant_max_active_jobs": 1}).model_dump()
    data["jobs"][1]["tenant"] = data["jobs"][0]["tenant"]  # j0 and j1: one tenant
    frame = records_to_frame(run_fixed(parse_workload(data), "fifo").records)
    span = frame[frame.job != ""].groupby("job").agg(start=("start_s", "min"),
                                                     end=("end_s", "max"))  # fmt: skip
    assert span.loc["j1", "start"] >= span.loc["j0", "end"]  # one at a time for that tenant
    assert span.loc["j2", "start"] < span.loc["j0", "end"]  # the other tenant's job ran


@pytest.mark.parametrize(
    ("scheduling", "refused", "reason"),
    [
        ({"max_active_jobs": 1, "max_queued_jobs": 1}, ["j2"], "1 job already waiting"),
        ({"max_active_jobs": 1, "max_queued_jobs": 0}, ["j1", "j2"], "0 jobs already waiting"),
        ({"tenant_max_active_jobs": 1, "tenant_max_queued_jobs": 1}, ["j2"],
         "tenant 't0' already has 1 job waiting"),
    ],
)  # fmt: skip
def test_queue_bounds_refuse_the_newest_submissions(scheduling, refused, reason):
    data = workload(jobs=3, steps=2, scheduling=scheduling).model_dump()
    for job in data["jobs"]:
        job["tenant"] = "t0"
    heard = []
    scheduler = Scheduler.for_workload(parse_workload(data), "fifo")
    result = drive(scheduler, FixedExecutor(), workload_inbox(parse_workload(data)),
                   on_ended=lambda o: o.state == "refused" and heard.append(o))  # fmt: skip
    assert [o.name for o in heard] == refused
    assert all(reason in o.reason for o in heard)
    states = {name: o.state for name, o in result.jobs.items()}
    assert [n for n, s in states.items() if s == "refused"] == refused
    assert all(s == "finished" for n, s in states.items() if n not in refused)


def test_a_tenants_own_quota_replaces_the_mechanisms_for_that_tenant_only():
    data = workload(jobs=4, steps=2, scheduling={"tenant_max_queued_jobs": 0}).model_dump()
    for job, tenant in zip(data["jobs"], ["big", "big", "small", "small"], strict=True):
        job["tenant"] = tenant
    data["tenants"] = {"small": {"max_active_jobs": 1, "max_queued_jobs": 1}}
    work = parse_workload(data)
    scheduler = Scheduler.for_workload(work, "fifo")
    result = drive(scheduler, FixedExecutor(), workload_inbox(work))
    states = {name: o.state for name, o in result.jobs.items()}
    # big: no active bound, so both run; small: one at a time, the other waits its turn
    assert states == dict.fromkeys(["j0", "j1", "j2", "j3"], "finished")
    frame = records_to_frame(result.records)
    span = frame[frame.job != ""].groupby("job").agg(start=("start_s", "min"),
                                                     end=("end_s", "max"))  # fmt: skip
    assert span.loc["j3", "start"] >= span.loc["j2", "end"]
    assert span.loc["j1", "start"] < span.loc["j0", "end"]
    # a quota set while the run goes on applies from the next admission round
    inbox = Inbox()
    inbox.put(SetQuota("big", TenantSpec(max_active_jobs=1, max_queued_jobs=0)), 0.0)
    for job in work.jobs[:2]:
        inbox.put(Submit(job), 1.0)
    inbox.close()
    heard = []
    scheduler = Scheduler.for_workload(work.model_copy(update={"tenants": {}}), "fifo")
    result = drive(scheduler, FixedExecutor(), inbox, on_ended=heard.append)
    assert result.jobs["j1"].state == "refused"
    assert "tenant 'big' already has 0 jobs waiting for admission (its quota)" in (
        result.jobs["j1"].reason
    )


def test_a_tenants_queued_job_cancelled_while_its_other_job_is_torn_down():
    # j0 is cancelled with work in flight (it leaves the active set, and is torn down when
    # that work is back); the tenant's queued j1 is cancelled at once: the tenant still has a
    # live job, whose teardown must find the tenant's counts (it once raised KeyError)
    data = workload(jobs=2, steps=2, scheduling={"tenant_max_active_jobs": 1}).model_dump()
    for job in data["jobs"]:
        job["tenant"] = "t0"
    work = parse_workload(data)
    inbox = Inbox()
    for job in work.jobs:
        inbox.put(Submit(job), 0.0)
    scheduler = Scheduler.for_workload(work, "fifo")
    state = {}

    def cancel_queued_when_first_leaves(decision, event, now):
        if inbox.closed:
            return
        first = scheduler.jobs.get(0)
        if first is None:  # j0 ended before the moment came: the test fails below
            inbox.close()
        elif first.in_flight > 1:
            inbox.put(Cancel("j0"))
            inbox.put(Cancel("j1"))
            state["done"] = now
            inbox.close()

    result = drive(scheduler, FixedExecutor(), inbox,
                   observers=[cancel_queued_when_first_leaves])  # fmt: skip
    assert "done" in state
    assert result.jobs["j0"].state == "cancelled" == result.jobs["j1"].state
    assert scheduler.leftovers() == []


def test_a_submitter_hears_the_admission_after_the_round_that_decided_it():
    data = workload(jobs=3, steps=2, scheduling={"max_active_jobs": 1, "max_queued_jobs": 1})
    inbox = Inbox()
    answers = {}
    for job in data.jobs:
        inbox.put(Submit(job, heard=lambda a: answers.setdefault(a.job, (a.state, a.reason))))
    inbox.close()
    scheduler = Scheduler.for_workload(data, "fifo")
    drive(scheduler, FixedExecutor(), inbox)
    assert answers["j0"] == ("active", "")
    assert answers["j1"] == ("queued", "")
    assert answers["j2"][0] == "refused" and "max_queued_jobs" in answers["j2"][1]


def test_a_job_given_its_index_draws_the_same_whatever_came_before_it():
    data = sim_workload(jobs=2, steps=3).model_dump()
    data["jobs"][1]["prompt_tokens"] = {"dist": "lognormal", "median": 30, "sigma": 0.5}
    work = parse_workload(data)
    late = work.jobs[1]

    def late_job_generations(submissions):
        inbox = Inbox()
        for at_s, job, index in submissions:
            inbox.put(Submit(job, index=index), at_s)
        inbox.close()
        _, _, frame = simulated(work, inbox)
        rows = frame[(frame.job == late.name) & (frame.kind == "generate") & (frame.turn == 0)]
        return sorted(zip(rows.group, rows.prompt_tokens, strict=True))

    alone = late_job_generations([(0.0, late, 1_000_003)])
    after_another = late_job_generations([(0.0, work.jobs[0], None), (3.0, late, 1_000_003)])
    assert alone == after_another  # its groups' prompts follow its index (a real run's
    # samples too: marlaas.executors.episode_runner seeds them by it)
    assert alone != late_job_generations([(0.0, late, 5)])
    scheduler = Scheduler.for_workload(work, "fifo")
    scheduler.submit(work.jobs[0], 0.0, index=7)
    refused = scheduler.submit(late, 0.0, index=7)
    assert refused.state == "refused" and "index 7 is in use" in refused.reason
    assert scheduler.submit(late, 0.0).state == "queued" and scheduler.job(late.name).index == 8


def test_a_stopped_inbox_ends_the_run_at_once_leaving_its_jobs_unfinished():
    work = sim_workload(jobs=2, steps=4)
    inbox = Inbox()
    for job in work.jobs:
        inbox.put(Submit(job), 0.0)

    def stop_on_first_training(decision, event, now):
        if isinstance(decision, Train):
            inbox.stop()

    scheduler = Scheduler.for_workload(work, "fair")
    executor = SimPyExecutor(scheduler.cluster, seed=scheduler.seed)
    result = drive(scheduler, executor, inbox, observers=[stop_on_first_training])
    assert inbox.stopped and inbox.closed
    assert result.jobs == {}  # nothing ended: the jobs live on, to be resumed
    assert scheduler.live == 2
    with pytest.raises(InboxClosedError):
        inbox.put(Submit(work.jobs[0]))


def test_a_job_that_cannot_fit_is_refused_with_one_line_and_the_run_goes_on():
    work = sim_workload(jobs=2, steps=2)
    inbox = Inbox()
    for job in work.jobs:
        inbox.put(Submit(job), 0.0)
    huge = spec_of("huge", group_size=512)  # more sequences than an engine runs
    inbox.put(Submit(huge), 5.0)
    inbox.close()
    heard = []
    refused = lambda o: o.state == "refused" and heard.append(o)  # noqa: E731
    result = simulate(work, "fifo", inbox=inbox, on_ended=refused)
    [refusal] = heard
    assert refusal.name == "huge" and refusal.end_s == 5.0
    assert "512 seqs" in refusal.reason and "\n" not in refusal.reason
    assert {n: o.state for n, o in result.jobs.items()} == {
        "j0": "finished", "j1": "finished", "huge": "refused"}  # fmt: skip


def test_a_name_in_use_and_a_version_past_the_steps_are_refused():
    scheduler = Scheduler.for_workload(workload())
    assert scheduler.submit(spec_of("a"), 0.0).state == "queued"
    again = scheduler.submit(spec_of("a"), 0.0)
    assert again.state == "refused" and "already queued" in again.reason
    past = scheduler.submit(spec_of("b", steps=3), 0.0, version=3)
    assert past.state == "refused" and "version 3" in past.reason
    assert scheduler.cancel("nobody", 0.0) is None
    assert scheduler.cancel("a", 1.0) == "cancelled" and scheduler.live == 0


def test_a_job_submitted_at_a_later_version_continues_from_it():
    """What --resume does: the job goes on from its last durable version, with the steps,
    groups and versions it would have had."""
    spec = spec_of("resumed", steps=5)
    inbox = Inbox()
    inbox.put(Submit(spec, version=3), 0.0)
    inbox.close()
    run = run_fixed(parse_workload({"jobs": [spec.model_dump()],
                                    "cluster": workload().cluster.model_dump()}),
                    inbox=inbox)  # fmt: skip
    admits = [d for _, d in run.executor.started if isinstance(d, AdmitJob)]
    assert [(d.job, d.version) for d in admits] == [("resumed", 3)]
    first = next(d for _, d in run.executor.started if isinstance(d, Generate))
    assert (first.step, first.group, first.version) == (3, 6, 3)
    trained = sorted({r.step for r in run.records if r.kind == "train" and r.outcome == "ok"})
    assert trained == [3, 4]
    outcome = run.result.jobs["resumed"]
    assert (outcome.state, outcome.start_version, outcome.published) == ("finished", 3, 5)


def test_a_run_with_an_open_inbox_waits_for_tenants_and_ends_when_it_is_closed():
    work = sim_workload(jobs=1, steps=2)
    inbox = Inbox()
    timer = threading.Timer(0.2, lambda: (inbox.put(Submit(work.jobs[0])), inbox.close()))
    timer.start()
    try:
        result, _, frame = simulated(work, inbox)  # nothing to run until the timer fires
    finally:
        timer.join()
    assert result.jobs["j0"].state == "finished" and len(frame) > 0


def test_the_inbox_orders_items_by_time_then_arrival_and_refuses_after_close():
    inbox = Inbox()
    woken = []
    inbox.set_waker(lambda: woken.append(1))
    a, b, c = (Submit(spec_of(name)) for name in "abc")
    inbox.put(b, 2.0)
    inbox.put(a, 1.0)
    inbox.put(Cancel("a"), 1.0)
    inbox.put(c)  # at once
    assert inbox.next_at() == float("-inf")
    assert inbox.take(1.0) == [a, Cancel("a"), c]
    assert inbox.next_at() == 2.0 and inbox.take(1.5) == []
    inbox.close()
    assert not inbox.exhausted and inbox.take(2.0) == [b] and inbox.exhausted
    assert len(woken) == 5  # every put and the close woke the driver
    with pytest.raises(InboxClosedError):
        inbox.put(a)
    with pytest.raises(ValueError, match="finite"):
        Inbox().put(a, float("nan"))


def test_a_job_cancelled_during_its_training_step_publishes_nothing_more():
    inbox = Inbox()
    work = workload(jobs=2, steps=3)
    for job in work.jobs:
        inbox.put(Submit(job), 0.0)
    cancelled_at = []

    def cancel_during_step_one(decision, now, scheduler):
        if isinstance(decision, Train) and decision.job == "j0" and decision.step == 1:
            inbox.put(Cancel("j0"), now + 1.0)  # the step takes 2 s
            inbox.close()
            cancelled_at.append(now + 1.0)

    run = run_fixed(work, "fifo", inbox=inbox, on_decision=cancel_during_step_one)
    rows = [r for r in run.records if r.job == "j0" and r.kind in ("train", "sync")]
    assert [(r.kind, r.step, r.outcome) for r in rows] == [
        ("train", 0, "ok"), ("sync", 0, "ok"), ("train", 1, "cancelled")]  # fmt: skip
    outcome = run.result.jobs["j0"]
    last = max(r.end_s for r in run.records if r.job == "j0")  # its work in flight came back
    assert (outcome.state, outcome.published, outcome.end_s) == ("cancelled", 1, last)
    assert rows[-1].end_s > cancelled_at[0]  # the step ran to its end, then was discarded
    assert run.result.jobs["j1"].state == "finished"


@pytest.mark.parametrize("seed", range(24))
def test_random_arrivals_cancels_and_failures_leave_nothing_behind(seed):
    """Random clusters, jobs, presets and quotas; jobs arriving at random, some cancelled at
    random (before, during or after their work), work failing at random: every run ends
    with every job ended, nothing held (the invariant checks), and no work of a cancelled
    job started after its cancel."""
    import random

    from tests.core.test_placement_reference import random_workload

    rng = random.Random(seed)
    data = random_workload(rng, rng.choice([None, None, "sequential", "sync"]))
    quotas = rng.choice([
        {}, {"max_active_jobs": 2}, {"tenant_max_active_jobs": 1},
        {"max_active_jobs": 1, "max_queued_jobs": 2}, {"tenant_max_queued_jobs": 0},
    ])  # fmt: skip
    if data["scheduling"].get("preset") == "sequential":  # it sets max_active_jobs itself
        quotas.pop("max_active_jobs", None)
    data["scheduling"].update(quotas)
    for job in data["jobs"]:
        job["tenant"] = rng.choice(["a", "b", job["tenant"]])
        job["weight"] = 1.0
        if rng.random() < 0.4:
            job["cancel_after_s"] = rng.choice([0.0, rng.uniform(0, 60)])
    work = parse_workload(data)
    failing = random.Random(seed + 1000)
    executor = FixedExecutor(outcome=lambda d: failing.random() >= 0.1)
    run = run_fixed(work, rng.choice(["fifo", "fair", "srtf"]), executor=executor,
                    max_failures=50)  # fmt: skip
    outcomes = run.result.jobs
    assert set(outcomes) == {j.name for j in work.jobs}
    for job in work.jobs:
        outcome = outcomes[job.name]
        if job.cancel_after_s is None:
            assert outcome.state in ("finished", "refused"), outcome
            continue
        cancel_s = job.arrival_s + job.cancel_after_s
        assert outcome.state in ("finished", "cancelled", "refused")
        starts = [now for now, d in run.executor.started
                  if d.job == job.name and not isinstance(d, (ReleaseJob, EvictAdapter, SwapOut))
                  and now > cancel_s]  # fmt: skip
        if outcome.state == "cancelled":
            assert not starts, (job.name, cancel_s, starts[:3])
