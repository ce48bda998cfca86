"""A job's alone-time estimate (core.estimates) counts what binds its steps alone: generation,
the engines' room for its groups, and its training on the cluster's widest trainer."""

from __future__ import annotations

import pytest

from marlaas.core.estimates import TRAIN_TOKENS_PER_DEVICE_S, AloneCluster, WorkEstimate
from marlaas.core.job_spec import JobSpec
from marlaas.core.scheduler import Scheduler
from marlaas.core.workload import parse_workload

CONSTANT_PROMPT = {"dist": "constant", "value": 600}


def tool_job(**rl) -> JobSpec:
    """Many long multi-turn samples a step: its training outlasts its generation."""
    settings = {"steps": 4, "prompts_per_step": 128, "group_size": 8, "max_new_tokens": 64,
                "turns": 4, "max_staleness": 2, **rl}  # fmt: skip
    return JobSpec(name="tool", tenant="t", rl=settings, prompt_tokens=CONSTANT_PROMPT,
                   response_tokens={"dist": "constant", "value": 64},
                   env={"observation_tokens": 300,
                        "latency_s": {"dist": "constant", "value": 0.1}})  # fmt: skip


def training_s(spec: JobSpec, devices: int) -> float:
    """One step's training: every sample's whole context, on ``devices`` devices."""
    rl = spec.rl
    context = 600 + rl.turns * 64 + (rl.turns - 1) * 300
    return rl.prompts_per_step * rl.group_size * context / (TRAIN_TOKENS_PER_DEVICE_S * devices)


def test_a_step_bound_by_its_training_is_estimated_by_its_training():
    job = tool_job()
    one, four = AloneCluster(trainer_devices=1), AloneCluster(trainer_devices=4)
    assert WorkEstimate.of(job, one, 2).step_alone_s == pytest.approx(training_s(job, 1))
    assert WorkEstimate.of(job, four, 2).step_alone_s == pytest.approx(training_s(job, 4))
    # generation alone: a turn of 64 tokens plus 0.1 s of environment, four turns
    generation = 4 * (64 * 0.004 + 0.1)
    assert training_s(job, 4) > generation  # still bound by training on four devices
    wide = AloneCluster(trainer_devices=10**6)
    assert WorkEstimate.of(job, wide, 2).step_alone_s == pytest.approx(generation)


def test_without_staleness_a_step_generates_then_trains():
    """Under a staleness bound of 0 the next step's generation waits for this one's
    training: the two add up instead of overlapping."""
    job, four = tool_job(), AloneCluster(trainer_devices=4)
    overlapped = WorkEstimate.of(job, four, 1).step_alone_s
    serial = WorkEstimate.of(job, four, 0).step_alone_s
    generation = 4 * (64 * 0.004 + 0.1)
    assert serial == pytest.approx(overlapped + generation)


def test_where_generation_and_training_take_turns_a_step_does_both():
    """Colocated placement, or one processor without overlap: the devices train or generate,
    never both, so the next step's generation waits for this one's training whatever the
    staleness bound."""
    job = tool_job()
    shared = AloneCluster(trainer_devices=4)
    turns = AloneCluster(trainer_devices=4, exclusive=True)
    generation = 4 * (64 * 0.004 + 0.1)
    assert WorkEstimate.of(job, shared, 2).step_alone_s == pytest.approx(training_s(job, 4))
    assert WorkEstimate.of(job, turns, 2).step_alone_s == pytest.approx(
        training_s(job, 4) + generation
    )
    colocated = workload(placement="colocated")
    assert Scheduler.for_workload(colocated).cluster.alone().exclusive
    assert not Scheduler.for_workload(workload()).cluster.alone().exclusive


def test_later_turns_hold_the_context_of_the_turns_before():
    """Turn t of a group reserves its prompt, t earlier responses and observations and room
    for its answers: on engines of 12,000 KV tokens, which hold two groups of a first turn
    (8 x (600 + 64) tokens), later turns (8 x (600 + 364 + 64) and 8 x (600 + 728 + 64)) fit
    one, and the groups take more turns of the engines."""
    job = tool_job(turns=3, max_staleness=2)
    room = AloneCluster(engines=4, max_seqs=256, kv_tokens=12_000, trainer_devices=10**6)
    turn = 64 * 0.004 + 0.1
    expected = (128 / 8 + 128 / 4 + 128 / 4) * turn
    assert WorkEstimate.of(job, room, 2).step_alone_s == pytest.approx(expected)


def test_groups_that_wait_for_room_take_turns():
    """Each group reserves 8 x (600 + 64) KV tokens: an engine of 10,624 holds two of them,
    so 128 groups of one turn on 4 engines take 16 turns of 8 groups."""
    job = tool_job(turns=1, max_staleness=2)
    wide, two_groups = 10**6, 2 * 8 * 664
    room = AloneCluster(engines=4, max_seqs=256, kv_tokens=two_groups, trainer_devices=wide)
    turn = 64 * 0.004 + 0.1
    assert WorkEstimate.of(job, room, 2).step_alone_s == pytest.approx(128 / 8 * turn)
    twice = AloneCluster(engines=8, max_seqs=256, kv_tokens=two_groups, trainer_devices=wide)
    assert WorkEstimate.of(job, twice, 2).step_alone_s == pytest.approx(128 / 16 * turn)
    # a shared prompt reserves 600 + 8 x 64 = 1,112 tokens: nine groups an engine
    shared = WorkEstimate.of(job, room, 2, shares_prompt=True)
    assert shared.step_alone_s == pytest.approx(128 / 36 * turn)
    # sequences bind too: 16 sequences an engine is two groups
    seqs = AloneCluster(engines=4, max_seqs=16, kv_tokens=10**6, trainer_devices=wide)
    assert WorkEstimate.of(job, seqs, 2).step_alone_s == pytest.approx(128 / 8 * turn)


def workload(shared_compute: bool = False, devices_per_trainer: int = 4, placement: str = ""):
    """One tool job on 3 engines and 8 training devices, ``devices_per_trainer`` a trainer."""
    cluster = {
        "pools": [
            {"name": "rollout", "role": "inference", "devices": 3},
            {"name": "train", "role": "training", "devices": 8,
             "devices_per_trainer": devices_per_trainer},
        ],
        "engine": {"max_seqs": 64, "kv_tokens": 50_000},
    }  # fmt: skip
    if shared_compute:
        cluster["shared_compute"] = shared_compute
    job = tool_job().model_dump()
    data = {"name": "w", "cluster": cluster, "jobs": [job]}
    if placement:
        data["scheduling"] = {"placement": placement}
    return parse_workload(data)


def test_a_scheduler_estimates_each_job_on_its_own_cluster():
    w = workload()
    scheduler = Scheduler.for_workload(w)
    scheduler.submit(w.jobs[0], 0.0)
    job = next(iter(scheduler.jobs.values()))
    expected = AloneCluster(engines=3, max_seqs=64, kv_tokens=50_000, trainer_devices=4)
    assert scheduler.cluster.alone() == expected
    assert job.alone_s == pytest.approx(4 * WorkEstimate.of(w.jobs[0], expected, 2).step_alone_s)
    assert job.alone_s == pytest.approx(4 * training_s(w.jobs[0], 4))


def test_on_one_processor_a_step_is_estimated_on_one_device():
    """Under shared_compute every device is one processor: the simulator divides a step
    over one device (Cluster.step_devices), and so does the estimate."""
    scheduler = Scheduler.for_workload(workload(shared_compute=True))
    assert scheduler.cluster.alone().trainer_devices == 1
    eight = Scheduler.for_workload(workload(devices_per_trainer=8))
    assert eight.cluster.alone().trainer_devices == 8
