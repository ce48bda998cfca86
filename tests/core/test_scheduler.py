"""The scheduler core, driven by a fixed-duration pure-Python driver (no SimPy)."""

from __future__ import annotations

import itertools

import pytest

from marlaas.core.policies import Policy, policy_names
from marlaas.core.scheduler import Scheduler
from marlaas.core.work import EvictAdapter, Generate, LoadAdapter, SwapIn, SwapOut, Train
from marlaas.core.workload import parse_workload
from tests.core.fixed_driver import run_fixed


def workload(jobs=2, steps=3, staleness=1, **extra):
    job_list = [
        {
            "name": f"j{i}",
            "tenant": f"t{i}",
            "rl": {"steps": steps, "prompts_per_step": 2, "group_size": 4,
                   "max_new_tokens": 64, "max_staleness": staleness},
            "prompt_tokens": {"dist": "constant", "value": 16},
        }
        for i in range(jobs)
    ]  # fmt: skip
    cluster = {
        "pools": [
            {"name": "rollout", "role": "inference", "devices": 2},
            {"name": "train", "role": "training", "devices": 1},
        ]
    }
    return parse_workload({"jobs": job_list, "cluster": cluster, **extra})


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_completes_every_job(policy):
    run = run_fixed(workload(jobs=3), policy)
    assert [o.state for o in run.result.jobs.values()] == ["finished"] * 3
    assert all(j.done and j.trained == 3 and j.published == 3 for j in run.states.values())
    trained = {(r.job, r.step) for r in run.records if r.kind == "train"}
    assert len(trained) == 3 * 3


def test_staleness_gate_holds_when_groups_start():
    """A group for step t starts only once version t - max_staleness is published."""
    seen = []

    def check(decision, now, scheduler):
        if isinstance(decision, Generate) and decision.turn == 0:
            job = scheduler.job(decision.job)
            seen.append(decision.step - decision.version)
            assert decision.version == job.published
            assert decision.step - job.published <= job.max_staleness

    for bound in (0, 2):
        seen.clear()
        run_fixed(workload(staleness=bound, steps=5), "fifo", on_decision=check)
        assert max(seen) == bound  # the pipeline does run ahead as far as allowed


def test_staleness_cap_of_a_preset_overrides_jobs():
    run = run_fixed(workload(staleness=3, scheduling={"preset": "sync"}), "fifo")
    assert {j.max_staleness for j in run.result.jobs.values()} == {0}
    assert run.scheduler.cluster.colocated and run.scheduler.mechanism.barrier


@pytest.mark.parametrize("policy", policy_names())
def test_presets_run_with_every_policy(policy):
    for preset in ("sequential", "sync"):
        run = run_fixed(workload(jobs=3, scheduling={"preset": preset}), policy)
        assert all(j.done for j in run.states.values()) and len(run.states) == 3
        assert run.scheduler.mechanism.preset == preset


def test_sequential_runs_one_job_at_a_time():
    run = run_fixed(workload(jobs=3, scheduling={"preset": "sequential"}), "fifo")
    spans = {}
    for r in run.records:
        if r.job:
            lo, hi = spans.get(r.job, (r.start_s, r.end_s))
            spans[r.job] = (min(lo, r.start_s), max(hi, r.end_s))
    ordered = sorted(spans.values())
    for (_, end), (start, _) in itertools.pairwise(ordered):
        assert start >= end


def test_barrier_keeps_jobs_in_lockstep():
    def check(decision, now, scheduler):
        if isinstance(decision, Generate):
            published = [j.published for j in scheduler.jobs.values() if not j.done]
            assert decision.step <= min(published)

    run = run_fixed(workload(jobs=3, steps=4, scheduling={"preset": "sync"}), "fifo",
                    on_decision=check)  # fmt: skip
    assert all(j.done for j in run.states.values()) and len(run.states) == 3


def test_adapter_slots_limit_forces_loads_and_explicit_evictions():
    data = workload(jobs=3).model_dump()
    data["cluster"]["engine"]["adapter_slots"] = 1
    held: dict[str, set] = {}
    engines = []

    def replay(decision, now, scheduler):
        # What an engine holds: adapters enter only by LoadAdapter, leave only by EvictAdapter.
        engines[:] = scheduler.cluster.engines
        if isinstance(decision, EvictAdapter):
            held[decision.engine].remove((decision.job, decision.version))
        elif isinstance(decision, LoadAdapter):
            held.setdefault(decision.engine, set()).add((decision.job, decision.version))
            assert len(held[decision.engine]) <= 1

    def compare(decision, event, now):  # after each completion, the core and engines agree
        for engine in engines:
            assert set(engine.resident) == held.get(engine.name, set())

    run = run_fixed(parse_workload(data), "round-robin", on_decision=replay, observers=[compare])
    loads = [r for r in run.records if r.kind == "adapter_load" and r.pool == "rollout"]
    assert len(loads) > 3 * 3  # far more than one per version: adapters were evicted
    assert any(isinstance(d, EvictAdapter) for _, d in run.executor.started)
    assert not any(held.values())  # every job ended: its adapters left the engines


def test_trainer_swaps_move_state_explicitly_when_jobs_exceed_its_slots():
    data = workload(jobs=3).model_dump()
    data["cluster"]["trainer"]["adapter_slots"] = 1
    data["cluster"]["pools"][1]["devices"] = 2  # two trainers: states also move between them
    held: dict[str, set] = {"train/trainer0": set(), "train/trainer1": set()}

    def check(decision, now, sched):
        if isinstance(decision, SwapOut):
            held[decision.trainer].remove(decision.job)
        elif isinstance(decision, SwapIn):
            assert all(decision.job not in jobs for jobs in held.values())
            held[decision.trainer].add(decision.job)
            assert len(held[decision.trainer]) <= 1
        elif isinstance(decision, Train):
            assert decision.job in held[decision.trainer]

    run = run_fixed(parse_workload(data), "round-robin", on_decision=check)
    swaps = [r for r in run.records if r.kind == "adapter_load" and r.pool == "train"]
    assert len(swaps) > 3
    assert not any(held.values())  # every job ended: its state left the trainers


def test_shared_compute_keeps_generation_and_training_apart():
    data = workload(jobs=3).model_dump()
    data["cluster"]["shared_compute"] = True
    run = run_fixed(parse_workload(data), "fair")
    assert run.scheduler.cluster.exclusive and not run.scheduler.cluster.colocated
    rows = [r for r in run.records if r.kind in ("generate", "train")]
    gen = [(r.start_s, r.end_s) for r in rows if r.kind == "generate"]
    for r in rows:
        if r.kind == "train":
            assert not any(s < r.end_s and r.start_s < e for s, e in gen), r


def test_an_overlapped_processor_trains_while_it_generates():
    data = workload(jobs=3).model_dump()
    data["cluster"]["shared_compute"] = "overlap"
    run = run_fixed(parse_workload(data), "fair")
    cluster = run.scheduler.cluster
    assert cluster.shared_compute and cluster.overlap and not cluster.exclusive
    gen = [(r.start_s, r.end_s) for r in run.records if r.kind == "generate"]
    train = [(r.start_s, r.end_s) for r in run.records if r.kind == "train"]
    assert any(s < te and ts < e for s, e in gen for ts, te in train)


def test_shared_compute_takes_true_false_or_overlap_only():
    data = workload().model_dump()
    data["cluster"]["shared_compute"] = "turns"
    with pytest.raises(ValueError, match="shared_compute") as refused:
        parse_workload(data)
    assert str(refused.value).count("shared_compute") == 1  # one problem, not the union's two
    assert "true (one processor: generation and training take turns), false, or overlap" in str(
        refused.value
    )
    for value, processor, overlapped in ((True, True, False), (False, False, False),
                                         ("overlap", True, True)):  # fmt: skip
        data["cluster"]["shared_compute"] = value
        spec = parse_workload(data).cluster
        assert (spec.shared_processor, spec.overlapped) == (processor, overlapped)


def test_train_batches_hold_exactly_one_steps_groups():
    def check(decision, now, scheduler):
        if isinstance(decision, Train):
            assert decision.groups == (2 * decision.step, 2 * decision.step + 1)
            assert decision.staleness <= scheduler.job(decision.job).max_staleness

    run_fixed(workload(steps=4), "fair", on_decision=check)


def test_fair_interleaves_and_fifo_does_not():
    def first_groups(policy):
        order = []
        run_fixed(
            workload(jobs=2, steps=1),
            policy,
            on_decision=lambda d, now, s: (
                order.append(d.job) if isinstance(d, (Generate, LoadAdapter)) else None
            ),
        )
        return order[:4]

    assert first_groups("fifo")[:2] == ["j0", "j0"]
    assert first_groups("fair")[:2] == ["j0", "j1"]


def test_idle_rows_and_busy_rows_partition_every_device():
    from marlaas.eventlog import records_to_frame
    from marlaas.metrics.idle import check_partition

    frame = records_to_frame(run_fixed(workload(jobs=2), "fifo").records)
    check_partition(frame)
    assert set(frame.loc[frame.kind == "idle", "outcome"]) <= {
        "rollouts", "trainer", "environment", "weight_sync", "adapter_load", "staleness",
        "barrier", "no_work",
    }  # fmt: skip


def test_arrivals_wait_and_max_active_jobs():
    data = workload(jobs=2).model_dump()
    data["jobs"][1]["arrival_s"] = 50.0
    run = run_fixed(parse_workload(data), "fifo")
    first = min(r.start_s for r in run.records if r.job == "j1")
    assert first >= 50.0
    assert run.result.jobs["j1"].arrival_s == 50.0


def test_policy_objects_and_names_are_interchangeable():
    class Reverse(Policy):
        name = "reverse-test"

        def key(self, job):
            return (-job.index,)

    def first_generation(policy) -> str:
        order = []
        run_fixed(
            workload(jobs=2, steps=1),
            policy,
            on_decision=lambda d, now, s: order.append(d.job) if isinstance(d, Generate) else None,
        )
        return order[0]

    assert first_generation(Reverse()) == "j1"
    assert first_generation("fifo") == "j0"  # a name gives the registered policy


def test_a_job_that_can_never_fit_is_refused_at_submission_with_the_reason():
    scheduler = Scheduler.for_workload(workload())
    data = workload().model_dump()
    data["jobs"][0]["prompt_tokens"] = {"dist": "constant", "value": 100_000}
    spec = parse_workload(data).jobs[0]
    admission = scheduler.submit(spec, 0.0)
    assert admission.state == "refused" and "KV tokens" in admission.reason
    assert scheduler.live == 0 and scheduler.status("j0") is None
    [outcome] = scheduler.take_ended()
    assert (outcome.name, outcome.state, outcome.reason) == ("j0", "refused", admission.reason)
