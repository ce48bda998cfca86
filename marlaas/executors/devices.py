"""Which physical device each of the scheduler's devices runs on, in a real run."""

from __future__ import annotations

import logging

from marlaas.core.cluster import Cluster

log = logging.getLogger("marlaas.real")


class DeviceError(RuntimeError):
    """A cluster that does not fit the machine's accelerators."""


def physical_devices(cluster: Cluster, gpus: int) -> dict[str, str]:
    """Scheduler device name -> torch device: every device on ``cpu`` when there is no GPU;
    else one GPU each, in order (all on ``cuda:0`` when the cluster declares shared compute).

    Without GPUs the pools share the CPU: a cluster that does not declare
    ``shared_compute: true`` runs, but its simulation will not model that (a warning)."""
    names = [d.name for d in cluster.devices]
    if gpus == 0:
        if not cluster.exclusive and len(names) > 1:
            log.warning(
                "the cluster's %d devices all run on this CPU: declare cluster.shared_compute: "
                "true so that the scheduler and the simulator model the sharing",
                len(names),
            )
        return dict.fromkeys(names, "cpu")
    if cluster.shared_compute:
        return dict.fromkeys(names, "cuda:0")
    if len(names) > gpus:
        raise DeviceError(
            f"the cluster has {len(names)} devices but this machine has {gpus} GPU(s): shrink "
            "cluster.pools or declare cluster.shared_compute: true"
        )
    return {name: f"cuda:{i}" for i, name in enumerate(names)}


def check_trainers(cluster: Cluster) -> None:
    """Refuse a trainer of several devices unless they share one processor.

    A real training step runs on one device (in this process or in its Ray actor), while the
    simulator divides a step by the trainer's devices (except on one shared processor, where
    they count as one): such a trainer would be trained on its first device alone."""
    if cluster.shared_compute:
        return
    for trainer in cluster.trainers:
        if len(trainer.devices) > 1:
            raise DeviceError(
                f"trainer {trainer.name} spans {len(trainer.devices)} devices, but a real "
                "training step runs on one device (no data parallelism yet): set the training "
                "pool's devices_per_trainer to 1 (one trainer per device) or declare "
                "cluster.shared_compute: true"
            )


def gpu_count() -> int:
    """CUDA devices visible to torch (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
