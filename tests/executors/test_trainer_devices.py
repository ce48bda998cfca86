"""A trainer of several devices: the real executor trains a step on one device, so it is
refused where those are several physical devices (the simulator would divide the step by
them), and runs where they are one (one shared processor)."""

from __future__ import annotations

import pytest

from marlaas.core.cluster import Cluster
from marlaas.core.workload import parse_workload
from marlaas.executors.devices import DeviceError, physical_devices, trainer_device


def cluster(shared: bool) -> Cluster:
    workload = parse_workload({
        "jobs": [{"name": "a", "tenant": "t"}],
        "cluster": {"pools": [
            {"name": "rollout", "role": "inference", "devices": 1},
            {"name": "train", "role": "training", "devices": 2, "devices_per_trainer": 2},
        ], "shared_compute": shared},
    })  # fmt: skip
    from marlaas.core.scheduler import Scheduler

    return Scheduler.for_workload(workload).cluster


def test_a_trainer_on_two_gpus_is_refused_not_trained_on_the_first():
    c = cluster(shared=False)
    [trainer] = c.trainers
    physical = physical_devices(c, gpus=3)
    with pytest.raises(DeviceError, match="devices_per_trainer to 1"):
        trainer_device(trainer.name, [d.name for d in trainer.devices], physical)


@pytest.mark.parametrize(("shared", "gpus"), [(True, 1), (False, 0)])
def test_a_trainer_on_one_processor_trains_there(shared, gpus):
    c = cluster(shared=shared)
    [trainer] = c.trainers
    physical = physical_devices(c, gpus=gpus)
    device = trainer_device(trainer.name, [d.name for d in trainer.devices], physical)
    assert device == ("cuda:0" if gpus else "cpu")
