"""Which physical device each of the scheduler's devices runs on, in a real run."""

from __future__ import annotations

import logging

from marlaas.core.cluster import Cluster, Trainer

log = logging.getLogger("marlaas.real")


class DeviceError(RuntimeError):
    """A cluster that does not fit the machine's accelerators."""


def physical_devices(cluster: Cluster, gpus: int) -> dict[str, str]:
    """Scheduler device name -> torch device: every device on ``cpu`` when there is no GPU;
    else one GPU each, in order (all on ``cuda:0`` when the cluster declares shared compute).

    Without GPUs the devices share the CPU: a cluster of several that does not declare
    ``shared_compute: true`` runs (a trainer of several devices as one device), but its
    simulation will not model that (a warning)."""
    names = [d.name for d in cluster.devices]
    if gpus == 0:
        if not cluster.shared_compute and len(names) > 1:
            log.warning(
                "the cluster's %d devices all run on this CPU: declare cluster.shared_compute: "
                "true (generation and training take turns) or overlap (they run at once) so "
                "that the scheduler and the simulator model the sharing (a trainer of several "
                "devices trains on one here)",
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


def trainer_devices(trainer: Trainer, devices: dict[str, str]) -> list[str]:
    """The distinct torch devices ``trainer``'s devices run on (``devices``: from
    :func:`physical_devices`), in order: one replica of the trainer each
    (marlaas.executors.data_parallel). With GPUs they are as many as the simulator divides a
    step by (:meth:`Cluster.step_devices`); on a CPU they are one."""
    return list(dict.fromkeys(devices[d.name] for d in trainer.devices))


def gpu_count() -> int:
    """CUDA devices visible to torch (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
