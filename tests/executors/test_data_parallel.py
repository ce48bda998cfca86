"""A trainer of several devices: one PeftTrainer replica per distinct torch device
(marlaas.executors.data_parallel), whose step is the step one trainer takes on all the
samples; the real executor builds one where the trainer's devices are several GPUs, a plain
PeftTrainer where they are one processor (a CPU, or shared_compute)."""

from __future__ import annotations

import asyncio

import pytest

from marlaas.core.scheduler import Scheduler
from marlaas.core.workload import parse_workload
from marlaas.executors import devices as device_map
from marlaas.executors.rollout import TrainSample

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.executors.data_parallel import (  # noqa: E402
    DataParallelTrainer,
    build_trainer,
    split_by_tokens,
)
from marlaas.executors.peft_trainer import PeftTrainer, TrainingInterrupted  # noqa: E402
from tests.executors.conftest import randomize_adapter  # noqa: E402


def _samples(trainer, job: str, seed: int) -> list[TrainSample]:
    """Two groups of uneven lengths and rewards, sampled "earlier": log-probs off by up to
    0.4 nat from the trainer's, so that some weights are above the trainer's truncation
    (1.2, :func:`_trainer`)."""
    gen = torch.Generator().manual_seed(seed)
    shapes = [(0, 3, 5, 1.0), (0, 3, 2, 0.0), (0, 3, 7, 0.4), (1, 6, 4, 1.0), (1, 6, 3, 0.2)]
    prompts = [tuple(range(10 + g, 10 + g + p)) for g, p, _, _ in shapes]
    comps = [tuple(range(30 + 3 * i, 30 + 3 * i + c)) for i, (_, _, c, _) in enumerate(shapes)]
    logps = trainer.logprobs(job, prompts, comps)
    out = []
    for (group, _, _, reward), p, c, lp in zip(shapes, prompts, comps, logps, strict=True):
        noise = ((torch.rand(len(lp), generator=gen) - 0.5) * 0.8).tolist()
        old = tuple(x + n for x, n in zip(lp, noise, strict=True))
        out.append(TrainSample(p, c, old, reward, group, 0))
    return out


def _state(trainer: PeftTrainer, job: str) -> list:
    """The job's adapter weights and optimizer state tensors, in order."""
    opt = trainer._jobs[job].optimizer.state_dict()["state"]
    moments = [t for s in opt.values() for t in (s["exp_avg"], s["exp_avg_sq"], s["step"])]
    return [p.detach().clone() for p in trainer.adapter_parameters(job)] + moments


def _trainer(model_dir, device: str = "cpu", **job) -> PeftTrainer:
    trainer = PeftTrainer(model_dir, lr=1e-2, micro_batch_size=2, device=device, max_weight=1.2)
    trainer.add_job("A", seed=0, **job)
    randomize_adapter(trainer, "A", seed=7, scale=0.1)  # B != 0: every weight has a gradient
    return trainer


def test_split_by_tokens_balances_the_shares():
    lengths = [9, 2, 8, 3, 1, 7]
    samples = [TrainSample((1,), (2,) * (n - 1), (0.0,) * (n - 1), 0.0, 0, 0) for n in lengths]
    shares = split_by_tokens(samples, 2)
    assert sorted(i for s in shares for i in s) == list(range(6))
    assert [sum(lengths[i] for i in s) for s in shares] == [15, 15]
    assert all(s == sorted(s) for s in shares)
    assert split_by_tokens(samples[:1], 3) == [[0], [], []]


def test_two_replicas_step_as_one_trainer_on_all_samples(tiny_model_dir):
    single = _trainer(tiny_model_dir)
    replicas = [_trainer(tiny_model_dir, "cpu"), _trainer(tiny_model_dir, "cpu")]
    parallel = DataParallelTrainer(replicas)
    for step in range(2):
        samples = _samples(single, "A", seed=step)
        one, both = single.train_step("A", samples), parallel.train_step("A", samples)
        assert both.version == one.version == step + 1
        assert both.tokens == one.tokens and both.samples == one.samples
        assert both.loss == pytest.approx(
            one.loss, rel=1e-4, abs=1e-7
        )  # padding differs by replica
        assert both.grad_norm == pytest.approx(one.grad_norm, rel=1e-5)
        assert both.mean_weight == pytest.approx(one.mean_weight, rel=1e-4)
        assert both.clip_fraction == one.clip_fraction
        assert both.largest_weight == pytest.approx(one.largest_weight, rel=1e-4)
    assert 0 < one.clip_fraction < 1  # some weights were truncated
    assert all(r.jobs == ["A"] and r.version("A") == 2 for r in replicas)
    expected = _state(single, "A")
    for replica in replicas:  # (Adam scales up a near-zero gradient's rounding noise)
        for mine, theirs in zip(_state(replica, "A"), expected, strict=True):
            torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
    first, second = (_state(r, "A") for r in replicas)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))  # identical
    assert all(p.grad is None for r in replicas for p in r.adapter_parameters("A"))


def test_minibatches_on_two_replicas_step_as_one_trainer(tiny_model_dir):
    """A step of two minibatches (the two groups): each one's samples split between the
    replicas, its gradients summed, an optimizer step on each: one trainer's step, clip and
    all (a tight clip, so that the second minibatch's cuts some tokens)."""
    job = {"minibatches": 2, "clip_eps": 0.02}
    single = _trainer(tiny_model_dir, **job)
    replicas = [_trainer(tiny_model_dir, **job), _trainer(tiny_model_dir, **job)]
    parallel = DataParallelTrainer(replicas)
    assert parallel.minibatches("A") == 2
    for step in range(2):
        samples = _samples(single, "A", seed=step)
        one, both = single.train_step("A", samples), parallel.train_step("A", samples)
        assert both.version == one.version == step + 1
        assert both.loss == pytest.approx(one.loss, rel=1e-4, abs=1e-7)
        assert both.grad_norm == pytest.approx(one.grad_norm, rel=1e-4)
        assert both.mean_weight == pytest.approx(one.mean_weight, rel=1e-4)
        assert both.clip_fraction == one.clip_fraction
        assert both.extra == one.extra
    assert one.extra["trust_clip_fraction"] > 0
    expected = _state(single, "A")
    for replica in replicas:
        for mine, theirs in zip(_state(replica, "A"), expected, strict=True):
            torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
    assert {float(s["step"]) for s in replicas[0]._jobs["A"].optimizer.state.values()} == {4.0}


def test_a_data_parallel_trainer_adds_saves_and_resumes_a_job_on_every_replica(
    tiny_model_dir, tmp_path
):
    parallel = DataParallelTrainer([_trainer(tiny_model_dir), _trainer(tiny_model_dir)])
    parallel.train_step("A", _samples(parallel, "A", seed=0))
    saved = parallel.save_adapter("A", 1, tmp_path / "A" / "v1", optimizer=True)
    parallel.remove_job("A")
    assert all(r.jobs == [] for r in parallel.replicas)
    parallel.add_job("A", init_dir=saved)
    assert parallel.version("A") == 1 and all(r.version("A") == 1 for r in parallel.replicas)
    first, second = (_state(r, "A") for r in parallel.replicas)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    with pytest.raises(ValueError, match="job name"):
        parallel.add_job("a.b")
    assert all(r.jobs == ["A"] for r in parallel.replicas)


def test_an_interrupted_step_leaves_every_replica_as_it_was(tiny_model_dir, monkeypatch):
    replicas = [_trainer(tiny_model_dir), _trainer(tiny_model_dir)]
    for r in replicas:
        r.micro_batch_size = 1  # several micro-batches on each replica
    parallel = DataParallelTrainer(replicas)
    before = _state(replicas[0], "A")
    forward = replicas[1]._completion_logprobs

    def interrupting(chunk):  # the run is stopped while replica 1 computes
        parallel.interrupt()
        monkeypatch.setattr(replicas[1], "_completion_logprobs", forward)
        return forward(chunk)

    monkeypatch.setattr(replicas[1], "_completion_logprobs", interrupting)
    samples = _samples(replicas[0], "A", seed=0)
    with pytest.raises(TrainingInterrupted):
        parallel.train_step("A", samples)
    for r in replicas:
        assert r.version("A") == 0 and not r.model.training
        assert all(p.grad is None and not p.requires_grad for p in r.adapter_parameters("A"))
        assert all(torch.equal(a, b) for a, b in zip(_state(r, "A"), before, strict=True))
    assert parallel.train_step("A", samples).version == 1  # a step after the call runs whole


def _workload(shared: bool):
    return parse_workload({
        "jobs": [{"name": "a", "tenant": "t"}],
        "cluster": {"pools": [
            {"name": "rollout", "role": "inference", "devices": 1},
            {"name": "train", "role": "training", "devices": 2, "devices_per_trainer": 2},
        ], "shared_compute": shared},
    })  # fmt: skip


class _Engine:
    """An engine passed in (only its tokenizer is read while the trainers are built)."""

    tokenizer = None


def _as_cpus(cluster, gpus):
    """The real mapping of a machine with 3 GPUs, each GPU renamed to a CPU device of the
    same index (torch runs ``cpu:1`` on the CPU): distinct devices, no GPU needed."""
    mapped = device_map.physical_devices(cluster, 3)
    return {name: device.replace("cuda", "cpu") for name, device in mapped.items()}


@pytest.mark.parametrize(("shared", "replicas"), [(False, 2), (True, 1)])
def test_the_executor_builds_a_replica_per_distinct_device_of_a_trainer(
    tiny_model_dir, monkeypatch, shared, replicas
):
    from marlaas.executors import local
    from marlaas.executors.backends import EngineSizing

    monkeypatch.setattr(local, "physical_devices", _as_cpus)
    workload = _workload(shared)
    cluster = Scheduler.for_workload(workload).cluster
    backends = local.LocalBackends(tiny_model_dir, "hf", generators={"rollout/0": _Engine()})
    asyncio.run(backends.open(EngineSizing.of_workload(workload), cluster, 64, 0))
    (trainer,) = backends.trainers.values()
    if replicas == 1:
        assert isinstance(trainer, PeftTrainer) and str(trainer.device) == "cpu:0"
    else:
        assert isinstance(trainer, DataParallelTrainer) and trainer.devices == ["cpu:1", "cpu:2"]
    assert replicas == cluster.step_devices(cluster.trainers[0])  # what the simulator divides by


def test_build_trainer_makes_one_trainer_per_distinct_device(tiny_model_dir):
    assert isinstance(build_trainer(tiny_model_dir, ["cpu", "cpu"]), PeftTrainer)
    with pytest.raises(ValueError, match="at least one device"):
        build_trainer(tiny_model_dir, [])


@pytest.mark.gpu
def test_two_cuda_devices_step_as_one(tiny_model_dir):
    """On two GPUs (skipped with fewer): the replicas really run on both, and their step is
    the one trainer's step on all the samples."""
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices")
    single = _trainer(tiny_model_dir, "cuda:0")
    parallel = build_trainer(tiny_model_dir, ["cuda:0", "cuda:1"], lr=1e-2, micro_batch_size=2)
    assert isinstance(parallel, DataParallelTrainer)
    for replica in parallel.replicas:  # the same start as `single`
        replica.add_job("A", seed=0)
        randomize_adapter(replica, "A", seed=7, scale=0.1)
    for step in range(2):
        samples = _samples(single, "A", seed=step)
        one, both = single.train_step("A", samples), parallel.train_step("A", samples)
        assert both.grad_norm == pytest.approx(one.grad_norm, rel=1e-4)
    expected = [t.cpu() for t in _state(single, "A")]
    for replica in parallel.replicas:
        assert {p.device.index for p in replica.adapter_parameters("A")} == {replica.device.index}
        for mine, theirs in zip(_state(replica, "A"), expected, strict=True):
            torch.testing.assert_close(mine.cpu(), theirs, rtol=1e-3, atol=1e-5)


def test_a_real_run_trains_on_a_data_parallel_trainer(tiny_model_dir, monkeypatch, tmp_path):
    """The whole executor over a trainer of two distinct devices: jobs created, swapped on
    and off it (one slot: three jobs take turns), trained and synced; every version in the
    store, the replicas holding the same jobs, identically, at the end."""
    from marlaas.drive import drive
    from marlaas.drive.inbox import workload_inbox
    from marlaas.eventlog import records_to_frame
    from marlaas.executors import local
    from marlaas.executors.adapter_store import AdapterStore
    from marlaas.executors.backends import EngineSizing
    from tests.executors.test_driver import tiny_workload

    monkeypatch.setattr(local, "physical_devices", _as_cpus)
    workload = tiny_workload(
        tiny_model_dir,
        **{"jobs.*.rl.steps": 2, "jobs.*.rl.prompts_per_step": 2,
           "cluster.trainer.adapter_slots": 1, "cluster.shared_compute": False,
           "cluster.pools": [{"name": "rollout", "role": "inference", "devices": 1},
                             {"name": "train", "role": "training", "devices": 2,
                              "devices_per_trainer": 2}]},
    )  # fmt: skip
    scheduler = Scheduler.for_workload(workload)
    store = AdapterStore(tmp_path / "adapters")
    with local.LocalExecutor(
        EngineSizing.of_workload(workload), scheduler.cluster, store=store,
        model_dir=tiny_model_dir, backend="hf",
    ) as executor:  # fmt: skip
        result = drive(scheduler, executor, workload_inbox(workload))
        (trainer,) = executor.trainers.trainers.values()
    assert isinstance(trainer, DataParallelTrainer)
    assert all(o.state == "finished" for o in result.jobs.values())
    for job in workload.jobs:
        assert store.versions(job.name) == [0, 1, 2]
    events = records_to_frame(result.records)
    train = events[events["kind"] == "train"]
    assert set(train["device"]) == {"train/0", "train/1"} and (train["outcome"] == "ok").all()
    swaps = events[(events["kind"] == "adapter_load") & (events["pool"] == "train")]
    assert len(swaps) > len(workload.jobs)  # states moved on and off both replicas
    first, second = trainer.replicas
    assert first.jobs == second.jobs
    for job in first.jobs:  # still resident at the end
        assert all(torch.equal(a, b) for a, b in zip(_state(first, job), _state(second, job),
                                                     strict=True))  # fmt: skip
