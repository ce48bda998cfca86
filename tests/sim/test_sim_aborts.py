"""The simulator enacts AbortGeneration exactly: the stopped group's sequences leave the
engine's batch at the abort time, its completion comes back then with no tokens (what the
real executor reports: an aborted request's tokens are not returned), and the other groups
on the engine decode at the smaller batch's pace from then on."""

from __future__ import annotations

import pytest

from marlaas.core.scheduler import Scheduler
from marlaas.core.work import AbortGeneration, AdmitJob, Generate
from marlaas.core.workload import parse_workload
from marlaas.eventlog import records_to_frame
from marlaas.sim.cost_model import CostModel
from marlaas.sim.engine_model import EngineModel
from marlaas.sim.executor import SimPyExecutor
from marlaas.sim.run import simulate
from tests.core.test_submissions import sim_workload


def test_an_aborted_group_leaves_the_batch_and_the_others_finish_sooner():
    def engine_with_two() -> EngineModel:
        engine = EngineModel(CostModel())
        engine.admit(0.0, 1, [2000] * 8, 500.0, "a")
        engine.admit(0.0, 2, [400] * 8, 500.0, "b")
        return engine

    kept, stopped = engine_with_two(), engine_with_two()
    at = 2.0
    before = stopped.iteration_s(at)
    tokens, longest = stopped.abort(at, 1)
    ran = int(stopped.progress)  # iterations since both were admitted (at progress 0)
    assert (tokens, longest) == (8 * ran, ran) and 0 < ran < 400
    assert stopped.running == 8 and set(stopped.adapters) == {"b"}
    held = stopped.context_offset + stopped.running * stopped.progress  # the batch's KV
    assert held == pytest.approx(8 * (500.0 + stopped.progress))  # b's alone: a's is free
    assert stopped.iteration_s(at) < before  # half the sequences, their context, an adapter
    assert stopped.groups == 1 and stopped.abort(at, 1) is None  # stopped once
    assert stopped.next_group_done_s() < kept.next_group_done_s()
    assert stopped.pop_finished(stopped.next_group_done_s()) == [2]


def two_groups_started():
    """A simulator with one group of each of two jobs started on its one engine at 0 s (the
    first's long, the second's short), their workload and the engine's name."""
    work = sim_workload(jobs=2, steps=1)
    cluster = Scheduler.for_workload(work).cluster
    executor = SimPyExecutor(cluster, seed=0)
    engine = cluster.engines[0].name
    for index, spec in enumerate(work.jobs):
        executor.start(AdmitJob(100 + index, spec.name, spec, index, 0, 1), 0.0)
    for work_id, spec in zip((1, 2), work.jobs, strict=True):
        executor.start(Generate(work_id, spec.name, 0, 0, 0, engine, 0, 4, 64, 4000), 0.0)
    return executor, work, engine


def executor_with_two(abort_at: float | None):
    """A simulator running one long group of job a and one short of job b on one engine,
    a's aborted at ``abort_at`` [s] (None: not): {work id: (end [s], tokens)}."""
    executor, work, engine = two_groups_started()
    ends = {}
    if abort_at is not None:
        assert executor.wait(abort_at) is None  # neither finished by then
        executor.start(AbortGeneration(3, work.jobs[0].name, 1, engine), abort_at)
    while len(ends) < 2:
        at, events = executor.wait(None)
        ends.update({e.work_id: (at, (e.tokens, e.longest_tokens)) for e in events})
    return ends


def test_the_simulator_reports_the_aborted_group_at_once_and_frees_the_engine():
    whole = executor_with_two(None)
    at = 0.5 * min(end for end, _ in whole.values())
    cut = executor_with_two(at)
    assert cut[1][0] == at  # a's completion comes back at the abort
    assert cut[1][1] == (0, 0)  # with no tokens, as the real executor's (tokens, longest)
    assert cut[2][0] < whole[2][0]  # b decodes alone from then on: it ends sooner
    assert cut[2][1] == whole[2][1]  # and generates the same


def test_a_simulated_run_with_cancels_is_the_same_every_time_and_ends_at_the_cancels():
    data = sim_workload(jobs=3, steps=4).model_dump()
    data["jobs"][1]["cancel_after_s"] = 0.3  # its first groups decode (0.08-0.5 s)
    runs = [simulate(parse_workload(data)) for _ in range(2)]
    first, second = (records_to_frame(r.records) for r in runs)
    assert first.equals(second)
    rows = first[(first.job == "j1") & (first.kind == "generate")]
    stopped = rows[rows.outcome == "cancelled"]
    assert len(stopped) and (stopped.end_s == 0.3).all()
    assert runs[0].jobs["j1"].state == "cancelled"
    assert (stopped.tokens == 0).all() and (stopped.longest_tokens == 0).all()  # as for real


def test_an_aborted_groups_tokens_leave_the_backlogs_token_rate_as_a_real_run_would():
    """The core's measured token rate (backlog.generated, read by the backlog policies) takes
    what the executor reports: the simulator's partial tokens of a stopped group made the
    simulated rate differ from the real run's (0 tokens) after every cancel."""
    from marlaas.drive import drive
    from marlaas.drive.inbox import workload_inbox

    data = sim_workload(jobs=2, steps=1).model_dump()
    data["jobs"][0]["cancel_after_s"] = 0.3  # its first groups decode (0.08-0.5 s)
    work = parse_workload(data)
    scheduler = Scheduler.for_workload(work)
    result = drive(scheduler, SimPyExecutor(scheduler.cluster, seed=work.seed),
                   workload_inbox(work))  # fmt: skip
    frame = records_to_frame(result.records)
    generated = frame[frame.kind == "generate"]
    at_cancel = (generated.outcome == "cancelled") & (generated.end_s == 0.3)
    assert at_cancel.any()
    assert scheduler.backlog.generated == generated[~at_cancel].tokens.sum()  # they added 0


def test_a_group_that_ended_at_the_abort_is_reported_once_with_its_tokens():
    """An abort racing with the group's own completion: the group's last sample ended at the
    abort's time, its engine's wake-up at that time not yet run (events of one time run one
    by one, and the decision round came between). It is left, as its completion is on its
    way: reported once, with every token it generated, as the real executor reports a
    generation that finished before its abort. It was stopped instead, with no tokens."""
    whole = executor_with_two(None)
    first, (at, tokens) = min(whole.items(), key=lambda item: item[1][0])
    assert tokens[0] > 0
    executor, work, engine = two_groups_started()
    executor.env.run(until=at)  # the clock at `at`, its events of that time not run yet
    job = work.jobs[first - 1].name
    executor.start(AbortGeneration(3, job, first, engine), at)
    reported = []
    while len(reported) < 2:
        when, events = executor.wait(None)
        reported += [(e.work_id, when, (e.tokens, e.longest_tokens)) for e in events]
    assert [r for r in reported if r[0] == first] == [(first, at, tokens)]
