"""A trainer of several devices: a real step trains on one device (in this process or in its
Ray actor), so the real executor refuses such a trainer before any model loads, where the
simulator would divide its step by its devices; on one shared processor they count as one
device in both worlds."""

from __future__ import annotations

import pytest

from marlaas.core.scheduler import Scheduler
from marlaas.core.workload import parse_workload
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backends import EngineSizing
from marlaas.executors.devices import DeviceError, check_trainers


def workload(shared: bool):
    return parse_workload({
        "jobs": [{"name": "a", "tenant": "t"}],
        "cluster": {"pools": [
            {"name": "rollout", "role": "inference", "devices": 1},
            {"name": "train", "role": "training", "devices": 2, "devices_per_trainer": 2},
        ], "shared_compute": shared},
    })  # fmt: skip


def test_a_trainer_of_two_devices_is_refused_before_any_model_loads(tmp_path):
    pytest.importorskip("torch")
    from marlaas.executors.local import LocalExecutor

    w = workload(shared=False)
    cluster = Scheduler.for_workload(w).cluster
    executor = LocalExecutor(
        EngineSizing.of_workload(w), cluster, store=AdapterStore(tmp_path / "a"),
        model_dir=tmp_path / "no-model", backend="hf",
    )  # fmt: skip
    with pytest.raises(DeviceError, match="devices_per_trainer to 1"):
        executor.open()  # refused before reading the model folder


def test_on_one_shared_processor_a_trainer_of_two_devices_runs():
    check_trainers(Scheduler.for_workload(workload(shared=True)).cluster)
