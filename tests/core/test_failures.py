"""Work that fails is retried: nothing leaks, every job still finishes, the log stays whole."""

from __future__ import annotations

import random

import pytest

from marlaas.core.work import Sync
from marlaas.core.workload import Workload, parse_workload
from marlaas.drive import FixedExecutor, RunError
from marlaas.eventlog import records_to_frame
from marlaas.metrics.idle import check_partition
from tests.core.fixed_driver import Run, run_fixed
from tests.core.test_scheduler import workload


def run_with_failures(workload: Workload, policy: str, rate: float, seed: int) -> Run:
    """Fail each piece of work with probability ``rate``."""
    rng = random.Random(seed)
    executor = FixedExecutor(outcome=lambda decision: rng.random() >= rate)
    return run_fixed(workload, policy, executor=executor, max_failures=20)


@pytest.mark.parametrize(
    ("policy", "preset"),
    [("fair", None), ("fifo", None), ("fifo", "sequential"), ("fifo", "sync")],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_random_failures_leak_nothing_and_every_job_finishes(policy, preset, seed):
    data = workload(jobs=3, steps=3, scheduling={"preset": preset}).model_dump()
    data["cluster"]["engine"]["adapter_slots"] = 2
    data["cluster"]["pools"][1]["devices"] = 2
    data["jobs"][2]["rl"]["turns"] = 2

    run = run_with_failures(parse_workload(data), policy, rate=0.2, seed=seed)
    scheduler, decisions = run.scheduler, [d for _, d in run.executor.started]

    assert all(j.done and j.published == j.steps for j in run.states.values())
    for engine in scheduler.cluster.engines:
        assert engine.seqs == 0 and engine.tokens == 0 and not engine.loading
        assert not engine.resident  # every job ended: its adapters left
    assert all(d.compute == 0 for d in scheduler.cluster.devices)
    assert all(t.activity is None and not t.resident for t in scheduler.cluster.trainers)
    frame = records_to_frame(scheduler.records)
    check_partition(frame)
    failed = frame[frame.outcome == "failed"]
    assert len(failed) > 0
    # a failed sync is published again: every version of every job got an ok sync
    syncs = frame[(frame.kind == "sync") & (frame.outcome == "ok")]
    for job in run.states.values():
        assert set(syncs.loc[syncs.job == job.name, "version"]) == set(range(1, job.steps + 1))
    assert any(isinstance(d, Sync) for d in decisions)
    # the fair policy's service estimate matches the work that really happened
    for job in run.states.values():
        rows = frame[(frame.job == job.name) & frame.kind.isin(["generate", "train"])]
        done = rows[rows.outcome == "ok"].drop_duplicates(["kind", "step", "group", "turn"])
        assert job.attained_tokens == pytest.approx(done.tokens.sum() + _failed_train_tokens(rows))


def _failed_train_tokens(rows) -> int:
    """Tokens of failed training steps: they used the trainer, so they count as service."""
    failed_train = rows[(rows.kind == "train") & (rows.outcome == "failed")]
    return int(failed_train.drop_duplicates(["step", "start_s"]).tokens.sum())


def test_work_that_keeps_failing_stops_the_run_with_its_reason():
    def fail_training(decision) -> bool:
        return type(decision).__name__ != "Train"

    with pytest.raises(RunError, match=r"Train of job 'j\d' failed 4 times in a row"):
        run_fixed(workload(jobs=2, steps=2), "fifo", executor=FixedExecutor(outcome=fail_training))


def test_a_jobs_groups_failing_together_once_are_each_retried():
    """Every group of a job's first step fails once, all at the same time (an engine that
    died with them in flight): each is retried and the run finishes (a budget of failures per
    job, not per group, stopped it)."""
    data = workload(jobs=1, steps=2).model_dump()
    data["jobs"][0]["rl"]["prompts_per_step"] = 6
    failed: set[int] = set()

    def first_try_fails(decision) -> bool:
        if type(decision).__name__ != "Generate" or decision.step > 0:
            return True
        if decision.group in failed:
            return True
        failed.add(decision.group)
        return False

    run = run_fixed(parse_workload(data), "fifo", executor=FixedExecutor(outcome=first_try_fails))
    assert len(failed) == 6 and all(j.done for j in run.states.values())


def test_a_job_is_resident_on_one_trainer_at_a_time():
    data = workload(jobs=3, steps=4).model_dump()
    data["cluster"]["pools"][1]["devices"] = 2

    def check(decision, now, scheduler):
        for job in scheduler.jobs.values():
            assert sum(job.name in t.resident for t in scheduler.cluster.trainers) <= 1

    frame = records_to_frame(run_fixed(parse_workload(data), "fair", on_decision=check).records)
    trains = frame[frame.kind == "train"].sort_values("start_s")
    swaps = frame[(frame.kind == "adapter_load") & (frame.pool == "train")]
    moves = sum(
        (g.device != g.device.shift()).sum() for _, g in trains.groupby("job")
    )  # first placement counts as a move too
    assert len(swaps) >= moves
