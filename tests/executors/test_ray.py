"""The real executor over Ray actors (``--ray``), on a local Ray cluster this module starts.

Two engine actors and a trainer actor on the tiny model: work lands on both engines, and the
engines' and the trainer's own state (read from the actors) follows the core's decisions, as
in process. Killing an engine actor and the trainer actor mid-run (Ray restarts them) fails
their work in flight back to the core, which retries it; the run finishes with every version.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("ray")

import ray

from marlaas.core.scheduler import Scheduler
from marlaas.core.work import Generate, Train
from marlaas.drive import drive
from marlaas.drive.inbox import workload_inbox
from marlaas.eventlog import records_to_frame
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backends import EngineSizing
from marlaas.executors.open_real import open_real_executor
from marlaas.ray_cluster import ray_session
from tests.executors.test_driver import ResidencyWatch, tiny_workload

pytestmark = pytest.mark.slow

STEPS = 3


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster for the module (4 logical CPUs: a bundle per actor)."""
    with ray_session(None, num_cpus=4):
        yield


def two_engines(model_dir, **overrides):
    """The tiny workload on two engines of 2 adapter slots each (3 jobs: evictions)."""
    return tiny_workload(
        model_dir,
        **{"cluster.pools": [{"name": "rollout", "role": "inference", "devices": 2},
                             {"name": "train", "role": "training", "devices": 1}],
           "cluster.engine.adapter_slots": 2, "cluster.trainer.adapter_slots": 2,
           "jobs.*.rl.steps": STEPS, **overrides},
    )  # fmt: skip


def ray_executor(workload, scheduler, model_dir, tmp_path):
    return open_real_executor(
        EngineSizing.of_workload(workload), scheduler.cluster,
        store=AdapterStore(tmp_path / "adapters"), model_dir=model_dir, backend="hf",
        seed=scheduler.seed, env_workers=workload.cluster.env_workers, ray="local",
    )  # fmt: skip


def test_ray_actors_enact_placement_evictions_and_swaps(ray_cluster, tiny_model_dir, tmp_path):
    """Work on both engine actors; what the actors hold is what the core decided, after
    every completion (read from the actors); the run passes the invariant checks."""
    workload = two_engines(tiny_model_dir)
    scheduler = Scheduler.for_workload(workload)
    with ray_executor(workload, scheduler, tiny_model_dir, tmp_path) as executor:
        assert executor.kind == "ray"
        watch = ResidencyWatch(scheduler, executor)
        result = drive(scheduler, executor, workload_inbox(workload), observers=[watch])
        held = {e.name: executor.engine_adapters(e.name) for e in scheduler.cluster.engines}
    assert watch.evictions > 0 and watch.checks > 50
    for engine in scheduler.cluster.engines:
        assert held[engine.name] == set(engine.resident)
    events = records_to_frame(result.records)
    gen = events[events["kind"] == "generate"]
    assert set(gen["device"]) == {"rollout/0", "rollout/1"}
    assert not (events["outcome"] == "failed").any()


class Killer:
    """Kills the engine actor of the 10th generation as it starts, then the trainer actor of
    the next training step as it starts, so that both restart at about the same time (Ray
    restarts them: ``ray.kill(no_restart=False)``)."""

    def __init__(self, executor) -> None:
        self.killed: list[str] = []
        self.generations = 0
        start = executor.start

        def start_and_kill(decision, now):
            start(decision, now)
            self.generations += isinstance(decision, Generate)
            if self.generations == 10 and not self.killed and isinstance(decision, Generate):
                name = decision.engine
            elif len(self.killed) == 1 and isinstance(decision, Train):
                name = decision.trainer
            else:
                return
            ray.kill(executor.backends.actors[name], no_restart=False)
            self.killed.append(name)

        executor.start = start_and_kill


def test_killed_engine_and_trainer_actors_restart_and_the_core_retries(
    ray_cluster, tiny_model_dir, tmp_path
):
    """An engine actor and the trainer actor die mid-run: their work in flight fails (the
    event log shows it) and is retried; the restarted engine gets back the adapters the core
    says it holds, the restarted trainer its jobs from the store; every job trains every step
    and the store has every version."""
    workload = two_engines(tiny_model_dir)
    scheduler = Scheduler.for_workload(workload)
    with ray_executor(workload, scheduler, tiny_model_dir, tmp_path) as executor:
        killer = Killer(executor)
        result = drive(scheduler, executor, workload_inbox(workload))
        held = {e.name: executor.engine_adapters(e.name) for e in scheduler.cluster.engines}
        [trainer] = scheduler.cluster.trainers
        on_trainer = executor.trainers.resident(trainer.name)
    assert len(killer.killed) == 2, killer.killed
    events = records_to_frame(result.records)
    failed = events[events["outcome"] == "failed"]
    print(failed[["kind", "job", "device", "step", "group", "turn", "start_s", "end_s"]])
    assert set(failed["pool"]) == {"rollout", "train"}
    for _, row in failed.iterrows():  # each failed piece of work was done again, later
        again = events[(events["kind"] == row["kind"]) & (events["job"] == row["job"])
                       & (events["step"] == row["step"]) & (events["outcome"] == "ok")
                       & (events["start_s"] >= row["end_s"])]  # fmt: skip
        assert len(again) > 0, row
    assert all(o.state == "finished" for o in result.jobs.values())
    for engine_ in scheduler.cluster.engines:  # restored: the actor holds the core's adapters
        assert held[engine_.name] == set(engine_.resident)
    assert on_trainer == set(trainer.resident)
    store = AdapterStore(tmp_path / "adapters")
    for job in workload.jobs:
        assert store.versions(job.name) == list(range(STEPS + 1))


@pytest.mark.gpu
def test_gpu_placement_one_gpu_per_actor(ray_cluster, tiny_model_dir, tmp_path):
    """With GPUs in the cluster, each engine and trainer actor gets a bundle with one GPU and
    runs its model on it (skipped without CUDA)."""
    import torch

    if not torch.cuda.is_available() or ray.cluster_resources().get("GPU", 0) < 2:
        pytest.skip("needs a CUDA GPU per actor in the Ray cluster")
    workload = tiny_workload(tiny_model_dir, **{"jobs.*.rl.steps": 2})
    scheduler = Scheduler.for_workload(workload)
    with ray_executor(workload, scheduler, tiny_model_dir, tmp_path) as executor:
        group = executor.backends._group
        bundles = ray.util.placement_group_table(group)["bundles"].values()
        assert all(bundle.get("GPU") == 1 for bundle in bundles)
        for trainer in executor.backends.trainers.values():
            assert str(trainer.device()).startswith("cuda")
        result = drive(scheduler, executor, workload_inbox(workload))
    assert all(o.state == "finished" for o in result.jobs.values())


@pytest.mark.gpu
def test_gpu_placement_a_trainer_of_two_devices_gets_two_gpus(
    ray_cluster, tiny_model_dir, tmp_path
):
    """A trainer of 2 devices (no shared compute) gets a bundle of 2 GPUs and a replica on
    each, and trains data-parallel (skipped without 3 GPUs in the Ray cluster)."""
    import torch

    if not torch.cuda.is_available() or ray.cluster_resources().get("GPU", 0) < 3:
        pytest.skip("needs 3 CUDA GPUs in the Ray cluster")
    workload = tiny_workload(
        tiny_model_dir,
        **{"jobs.*.rl.steps": 2, "cluster.shared_compute": False,
           "cluster.pools": [{"name": "rollout", "role": "inference", "devices": 1},
                             {"name": "train", "role": "training", "devices": 2,
                              "devices_per_trainer": 2}]},
    )  # fmt: skip
    scheduler = Scheduler.for_workload(workload)
    with ray_executor(workload, scheduler, tiny_model_dir, tmp_path) as executor:
        bundles = ray.util.placement_group_table(executor.backends._group)["bundles"].values()
        assert sorted(bundle.get("GPU") for bundle in bundles) == [1, 2]
        (trainer,) = executor.backends.trainers.values()
        assert trainer.devices() == ["cuda:0", "cuda:1"]
        result = drive(scheduler, executor, workload_inbox(workload))
    assert all(o.state == "finished" for o in result.jobs.values())
