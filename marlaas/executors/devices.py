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


def trainer_device(name: str, devices: list[str], physical: dict[str, str]) -> str:
    """The one torch device trainer ``name`` (of scheduler devices ``devices``) trains on.

    A step runs on one device here, so the simulator's step time (divided by the trainer's
    devices, except on one shared processor) holds only when its devices are one physical
    device: several distinct ones (devices_per_trainer > 1 on as many GPUs) are refused
    rather than trained on the first alone."""
    distinct = sorted({physical[d] for d in devices})
    if len(distinct) > 1:
        raise DeviceError(
            f"trainer {name} spans {len(distinct)} devices ({', '.join(distinct)}), but a real "
            "training step runs on one device (no data parallelism yet): set the training "
            "pool's devices_per_trainer to 1 (one trainer per device) or declare "
            "cluster.shared_compute: true"
        )
    return distinct[0]


def gpu_count() -> int:
    """CUDA devices visible to torch (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
