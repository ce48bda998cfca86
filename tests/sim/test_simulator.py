"""The SimPy simulator: determinism, invariants, and the multi-tenant gain."""

from __future__ import annotations

import dataclasses
import gc

import pandas as pd
import pytest

from marlaas.core.policies import policy_names
from marlaas.core.scheduler import Scheduler
from marlaas.core.work import AdmitJob, Generate, LoadAdapter, SwapIn, Train
from marlaas.drive import InvariantError, check_invariants, drive
from marlaas.drive.inbox import workload_inbox
from marlaas.eventlog import records_to_frame
from marlaas.sim.executor import SimPyExecutor
from marlaas.sim.run import simulate, simulate_run
from marlaas.workload_file import load_workload

SMALL = "traces/small.yaml"


@pytest.fixture(scope="module")
def small():
    return load_workload(SMALL).with_overrides({"jobs.*.rl.steps": 4})


def unchecked(workload, policy):
    """(result, scheduler) of a simulation whose invariants were not checked yet."""
    scheduler = Scheduler.for_workload(workload, policy)
    executor = SimPyExecutor(scheduler.cluster, workload.cost, scheduler.seed)
    return drive(scheduler, executor, workload_inbox(workload), check=False), scheduler


def admitted(executor: SimPyExecutor, workload) -> SimPyExecutor:
    """``executor`` with every job of ``workload`` admitted (as the core would admit them)."""
    for index, job in enumerate(workload.jobs):
        executor.start(AdmitJob(-1 - index, job.name, job, index, 0, job.rl.max_staleness), 0.0)
    return executor


def preset(workload, name):
    return workload.with_overrides({"scheduling.preset": name})


def test_same_seed_same_event_log_other_seed_other_log(small):
    a = records_to_frame(simulate(small, "fair", seed=7).records)
    b = records_to_frame(simulate(small, "fair", seed=7).records)
    c = records_to_frame(simulate(small, "fair", seed=8).records)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


def test_a_groups_draws_are_the_same_under_every_schedule(small):
    """Common random numbers: a turn's response lengths and environment wait come from a
    generator of its own, so two schedules of one workload and seed differ only by what the
    schedules did."""

    def draws(policy):
        frame = records_to_frame(simulate(small, policy).records)
        frame = frame[frame.outcome == "ok"].set_index(["kind", "job", "group", "turn"])
        frame = frame.sort_index()
        generated = frame.loc["generate", ["tokens", "longest_tokens"]]
        waited = (frame.loc["env", "end_s"] - frame.loc["env", "start_s"]).round(9)
        return frame, generated, waited

    fifo, fifo_generated, fifo_waited = draws("fifo")
    srtf, srtf_generated, srtf_waited = draws("srtf")
    assert not fifo.start_s.equals(srtf.start_s)  # the schedules differ
    pd.testing.assert_frame_equal(fifo_generated, srtf_generated)
    pd.testing.assert_series_equal(fifo_waited, srtf_waited)


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_passes_the_invariants(small, policy):
    for workload in (small, preset(small, "sequential"), preset(small, "sync")):
        result, scheduler = unchecked(workload, policy)
        check_invariants(result, scheduler)  # raises on a violation
        assert set(result.job_finish_s) == {j.name for j in small.jobs}


def test_invariants_catch_a_stale_sample(small):
    result, scheduler = unchecked(small, "fifo")
    records = [
        r._replace(staleness=5) if r.kind == "train" and r.step == 2 else r for r in result.records
    ]
    with pytest.raises(InvariantError, match="versions stale"):
        check_invariants(dataclasses.replace(result, records=records), scheduler)


def test_invariants_catch_an_overfull_engine(small):
    result, scheduler = unchecked(small, "fifo")
    first = next(r for r in result.records if r.kind == "generate")
    records = [*result.records, first._replace(seqs=10_000)]
    with pytest.raises(InvariantError, match="sequences at once"):
        check_invariants(dataclasses.replace(result, records=records), scheduler)


def two_engines(batches: tuple[tuple[int, int], ...], overrides: dict | None = None) -> dict:
    """{shared_compute: the two groups' ends [s], in order} for a group of each ``(sequences,
    context tokens)`` of ``batches`` started at once on engines r/0 and r/1, 100 tokens per
    sample, the engines on devices of their own (False) and on one processor (True)."""
    base = load_workload(SMALL).with_overrides(
        {"cluster.pools": [{"name": "r", "role": "inference", "devices": 2},
                           {"name": "t", "role": "training", "devices": 1}],
         "jobs.*.response_tokens": {"dist": "constant", "value": 100}, **(overrides or {})}
    )  # fmt: skip
    ends = {}
    for shared in (False, True):
        workload = base.with_overrides({"cluster.shared_compute": shared})
        scheduler = Scheduler.for_workload(workload, "fifo")
        executor = admitted(SimPyExecutor(scheduler.cluster, workload.cost), workload)
        for i, (engine, (seqs, context)) in enumerate(zip(("r/0", "r/1"), batches, strict=True)):
            executor.start(Generate(i + 1, "math-a", 0, i, 0, engine, 0, seqs, context, 1024),
                           0.0)  # fmt: skip
        ends[shared] = sorted(executor.wait(None)[0] for _ in batches)
    return ends


def test_shared_compute_engines_share_the_processor_speed():
    """Two engines on one processor: a group takes twice as long while the other decodes the
    same batch."""
    ends = two_engines(((8, 0), (8, 0)))
    alone, together = ends[False], ends[True]
    assert alone[0] == pytest.approx(alone[1])  # the same group on two separate devices
    assert together[0] == pytest.approx(2 * alone[0], rel=0.02)


def test_engines_on_one_processor_take_turns_step_by_step():
    """The real engines of one process run on one thread, one step each in turn: while both
    decode, each iteration of either takes both engines' own iterations. A batch of 8 beside
    one of 32 therefore ends when the 32 would alone plus what the 8 took alone (not at twice
    its own time, as shares of the processor would give), and so does the 32."""
    ends = two_engines(((8, 128), (32, 512)), {
        "cost.decode_per_seq_ms": 1.0, "cost.decode_per_kv_token_ms": 0.0,
        "cost.prefill_base_ms": 0.0,
    })  # fmt: skip
    small, big = ends[False]
    assert big > 2 * small  # 38 ms against 14 ms an iteration alone
    assert ends[True] == pytest.approx([small + big, small + big], rel=0.02)


@pytest.mark.parametrize("loading", ["r/0", "r/1"])
def test_an_adapter_load_on_a_shared_processor_pauses_the_decoding_engines(loading):
    """The real executor adds a LoRA on the one thread its in-process engines step on: on one
    processor a group decoding while its own engine or another loads an adapter ends
    adapter_load_s later; on devices of their own the load is a timeout beside decoding, and
    the group ends as it would without it."""
    ends = {}
    for shared in (False, True):
        workload = load_workload(SMALL).with_overrides({
            "cluster.pools": [{"name": "r", "role": "inference", "devices": 2},
                              {"name": "t", "role": "training", "devices": 1}],
            "cluster.shared_compute": shared,
            "jobs.*.response_tokens": {"dist": "constant", "value": 100},
            "cost.adapter_load_s": 0.5, "cost.adapter_load_wait_iterations": 0.0,
        })  # fmt: skip
        scheduler = Scheduler.for_workload(workload, "fifo")
        for load in (False, True):
            executor = admitted(SimPyExecutor(scheduler.cluster, workload.cost), workload)
            executor.start(Generate(1, "math-a", 0, 0, 0, "r/0", 0, 8, 0, 1024), 0.0)
            if load:
                executor.start(LoadAdapter(2, "math-b", 0, loading), 0.0)
            while (done := executor.wait(None)) is not None:
                if any(event.work_id == 1 for event in done[1]):
                    ends[(shared, load)] = done[0]
    assert ends[(False, True)] == pytest.approx(ends[(False, False)])
    assert ends[(True, True)] == pytest.approx(ends[(True, False)] + 0.5)


def overlapped(decode: float, train: float):
    """(a generation's end, a training step's end) started together on an overlapped
    processor of cost factors ``decode`` and ``train``, and each alone."""
    workload = load_workload(SMALL).with_overrides({
        "cluster.pools": [{"name": "r", "role": "inference", "devices": 1},
                          {"name": "t", "role": "training", "devices": 1}],
        "cluster.shared_compute": "overlap",
        "jobs.*.response_tokens": {"dist": "constant", "value": 100},
        "cost.overlap_decode_slowdown": decode, "cost.overlap_train_slowdown": train,
    })  # fmt: skip
    scheduler = Scheduler.for_workload(workload, "fifo")
    ends = {}
    for together in (True, False):
        for work in ("generate", "train") if not together else ("both",):
            executor = admitted(SimPyExecutor(scheduler.cluster, workload.cost), workload)
            if work in ("both", "generate"):
                executor.start(Generate(1, "math-a", 0, 0, 0, "r/0", 0, 8, 0, 1024), 0.0)
            if work in ("both", "train"):
                executor.start(Train(2, "math-b", 0, "t/trainer0", ("t/0",), (0,), 8, 4000,
                                     0, 1), 0.0)  # fmt: skip
            while (done := executor.wait(None)) is not None:
                for event in done[1]:
                    ends[(together, event.work_id)] = done[0]
    return ends


def test_an_overlapped_step_and_generation_slow_each_other_by_the_profiles_factors():
    """Within 1%: a prefill already under way when the step starts keeps its pace."""
    ends = overlapped(1.5, 2.0)
    gen_alone, train_alone = ends[(False, 1)], ends[(False, 2)]
    gen, train = ends[(True, 1)], ends[(True, 2)]
    if train_alone * 2.0 < gen_alone * 1.5:  # the step ends first, at twice its own time
        assert train == pytest.approx(2.0 * train_alone, rel=1e-6)
        assert gen == pytest.approx(gen_alone + train_alone * 2.0 * (1 - 1 / 1.5), rel=0.01)
    else:  # generation ends first; the step runs alone for the rest
        assert gen == pytest.approx(1.5 * gen_alone, rel=0.01)
        assert train == pytest.approx(train_alone + gen * (1 - 1 / 2.0), rel=1e-6)
    free = overlapped(1.0, 1.0)  # nothing lost: each as fast as alone
    assert free[(True, 1)] == pytest.approx(gen_alone)
    assert free[(True, 2)] == pytest.approx(train_alone)


def test_async_multi_tenant_beats_sequential_on_the_bundled_workload():
    workload = load_workload(SMALL)
    _, seq = simulate_run(preset(workload, "sequential"), "fifo")
    for policy in ("fifo", "fair", "round-robin"):
        _, run = simulate_run(workload, policy)
        assert run["metrics"]["makespan_s"] < 0.5 * seq["metrics"]["makespan_s"], policy
        assert run["metrics"]["utilization"] > 1.3 * seq["metrics"]["utilization"], policy


def test_utilization_is_a_fraction_and_idle_causes_are_named(small):
    _, summary = simulate_run(small, "fair")
    metrics = summary["metrics"]
    assert 0 < metrics["utilization"] <= 1
    assert all(0 <= u <= 1 for u in metrics["utilization_by_pool"].values())
    assert sum(metrics["idle_by_cause_device_s"].values()) > 0
    assert summary["policy"] == "fair" and summary["seed"] == small.seed


def test_more_staleness_never_slows_a_single_job():
    workload = load_workload(SMALL).with_overrides({"jobs.*.rl.steps": 6})
    one = workload.model_copy(update={"jobs": workload.jobs[:1]})
    spans = []
    for bound in (0, 1, 3):
        w = one.with_overrides({"jobs.*.rl.max_staleness": bound})
        spans.append(simulate(w, "fifo").makespan_s)
    assert spans[0] > spans[1] >= spans[2] * 0.98


def test_event_log_does_not_depend_on_python_hash_seeds(tmp_path):
    """Same workload and seed in two interpreters with different hash seeds: same bytes."""
    import os
    import subprocess
    import sys

    digests = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"run{hash_seed}"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        subprocess.run(
            [sys.executable, "-m", "marlaas", "simulate", SMALL, "--policy", "fair", "--quiet",
             "--set", "jobs.*.rl.steps=3", "--out", str(out)],
            check=True, env=env, capture_output=True,
        )  # fmt: skip
        frame = pd.read_parquet(out / "events.parquet")
        digests.append(pd.util.hash_pandas_object(frame, index=True).sum())
    assert digests[0] == digests[1]


def test_multi_turn_context_that_outgrows_an_engine_is_refused_and_the_run_goes_on():
    from marlaas.core.feasibility import InfeasibleWorkloadError

    workload = load_workload(SMALL).with_overrides(
        {"jobs.tools-c.rl.max_new_tokens": 1024, "cluster.engine.kv_tokens": 20_000,
         "jobs.*.rl.steps": 2}
    )  # fmt: skip
    heard = []
    result = simulate(workload, "fifo", on_ended=lambda o: o.state == "refused" and heard.append(o))
    assert [o.name for o in heard] == ["tools-c"] and "KV tokens" in heard[0].reason
    states = {name: o.state for name, o in result.jobs.items()}
    assert states == {"math-a": "finished", "math-b": "finished", "tools-c": "refused",
                      "code-d": "finished"}  # fmt: skip
    assert "tools-c" not in {r.job for r in result.records}
    alone = workload.with_overrides({"jobs": [j.model_dump() for j in workload.jobs[:1]]})
    alone = alone.with_overrides(
        {
            "jobs.*.name": "tools-c",
            "jobs.*.rl.max_new_tokens": 1024,
            "jobs.*.rl.turns": 3,
            "jobs.*.env.observation_tokens": 64,
        }
    )
    with pytest.raises(
        InfeasibleWorkloadError, match=r"every job would be refused: jobs\[0\] \(tools-c\)"
    ):
        simulate(alone, "fifo")


def test_sync_devices_wait_at_the_barrier_not_on_staleness(small):
    frame = records_to_frame(simulate(preset(small, "sync"), "fifo").records)
    causes = set(frame.loc[frame.kind == "idle", "outcome"])
    assert "barrier" in causes and "staleness" not in causes
    fifo = records_to_frame(simulate(small, "fifo").records)
    assert "barrier" not in set(fifo.loc[fifo.kind == "idle", "outcome"])


def test_a_run_leaves_the_callers_collector_as_it_was_even_when_it_fails(small):
    """The loop paces the garbage collector while it runs (marlaas.drive.collector); the
    program that called it finds its own settings again afterwards, also after an error."""
    before = gc.get_threshold()
    gc.set_threshold(1234, 11, 12)

    def fail(*_):
        raise RuntimeError("an observer failed")

    try:
        drive(*_sim_of(small), workload_inbox(small))
        assert gc.get_threshold() == (1234, 11, 12)
        with pytest.raises(RuntimeError, match="an observer failed"):
            drive(*_sim_of(small), workload_inbox(small), observers=[fail])
        assert gc.get_threshold() == (1234, 11, 12)
    finally:
        gc.set_threshold(*before)


def _sim_of(workload) -> tuple[Scheduler, SimPyExecutor]:
    """A scheduler and a simulator of ``workload``'s cluster."""
    scheduler = Scheduler.for_workload(workload, "fair")
    return scheduler, SimPyExecutor(scheduler.cluster)


def test_timeouts_keep_simpy_order_among_its_own_events():
    """The executor puts its timeouts on SimPy's heap itself: ties with SimPy's own events
    at the same time go in the order they were scheduled, as SimPy's own timeouts do."""
    executor = one_engine_executor()
    env, order = executor.env, []
    swap_s = executor.cost.trainer_swap_s
    executor.start(SwapIn(1, "math-a", 0, "t/trainer0"), 0.0)
    env.timeout(swap_s).callbacks.append(lambda _: order.append("simpy"))
    executor.start(SwapIn(2, "math-a", 0, "t/trainer0"), 0.0)
    at, first = executor.wait(None)  # returns with the first completion, before SimPy's
    assert [d.work_id for d in first] == [1] and order == [] and at == swap_s
    at, second = executor.wait(None)
    assert [d.work_id for d in second] == [2] and order == ["simpy"] and at == swap_s


def one_engine_executor(tokens: int = 100) -> SimPyExecutor:
    """An executor of the small workload on one engine, every sample ``tokens`` long."""
    workload = load_workload(SMALL).with_overrides(
        {"cluster.pools": [{"name": "r", "role": "inference", "devices": 1},
                           {"name": "t", "role": "training", "devices": 1}],
         "jobs.*.response_tokens": {"dist": "constant", "value": tokens}}
    )  # fmt: skip
    cluster = Scheduler.for_workload(workload, "fifo").cluster
    return admitted(SimPyExecutor(cluster, workload.cost), workload)


def generate(work_id: int) -> Generate:
    return Generate(work_id, "math-a", 0, work_id, 0, "r/0", 0, 8, 0, 1024)


def test_groups_admitted_together_finish_together():
    executor = one_engine_executor()
    for work_id in (1, 2, 3):
        executor.start(generate(work_id), 0.0)
    at, done = executor.wait(None)  # one completion, though each admission re-timed the next
    assert sorted(d.work_id for d in done) == [1, 2, 3] and at > 0
    assert executor.wait(None) is None  # and nothing else is left to happen


def test_a_run_processes_one_event_per_completion_however_often_engines_are_re_timed():
    """An engine that takes a new group before its running ones finish re-times its next
    completion every time: the run still processes about one event per finished group
    (``steps``, the events a benchmark counts), not one per re-timing as well."""
    executor = one_engine_executor(tokens=4000)
    now = 0.0
    for work_id in range(1, 201):
        executor.start(generate(work_id), now)
        now += 0.01
        assert executor.wait(now) is None  # nothing finished yet: a group takes seconds
    finished = []
    while (completions := executor.wait(None)) is not None:
        finished += [d.work_id for d in completions[1]]
    assert sorted(finished) == list(range(1, 201))
    assert executor.steps <= len(finished) + 1  # 599 when the re-timed ones are popped too


def test_decode_iterations_below_the_clocks_resolution_end(tmp_path):
    """A job at 10^8 s decoding in 1e-9 s iterations (decode_base_ms 1e-6, the other terms 0):
    a float there moves in steps of 1.5e-8 s, so a group's end is the time it is computed at,
    and the run ends all the same (it never did: its wake-up came back at that time for ever)."""
    path = tmp_path / "w.yaml"
    path.write_text(
        "jobs: [{name: j, tenant: t, arrival_s: 1.0e+8, rl: {steps: 2}}]\n"
        "cost: {decode_base_ms: 1.0e-6, decode_per_seq_ms: 0, decode_per_kv_token_ms: 0,"
        " decode_per_adapter_ms: 0}\n"
    )
    events, _ = simulate_run(load_workload(path))
    assert list(events.loc[events.kind == "train", "step"]) == [0, 1]
