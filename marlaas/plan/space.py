"""What ``marlaas plan`` searches: configurations of a workload's cluster and schedule.

A configuration is a number of inference devices and of training devices (the workload's
one inference pool and one training pool, resized) and a *variant*: the devices of one
trainer, the adapter slots of an engine, the ordering policy and the mechanism preset. Its
price is what its devices cost per hour (:class:`marlaas.core.prices_spec.PricesSpec`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from marlaas.core.cluster_spec import PoolSpec
from marlaas.core.workload import Workload, WorkloadError

NO_PRESET = "none"
"""The preset name that means the workload's own mechanism settings."""
DIMENSIONS = ("pools", "trainer_width", "adapter_slots", "policy", "preset")
"""What ``--search`` may name."""
DEFAULT_VALUES: dict[str, tuple] = {
    "trainer_width": (1, 2, 4, 8),
    "adapter_slots": (4, 8, 16),
    "preset": (NO_PRESET, "sync", "sequential"),
}
"""Values of a searched dimension when none are given (policy: every registered one)."""


class PlanError(WorkloadError):
    """A plan that cannot be made (bad options, no deadline, nothing feasible): one line."""


@dataclass(frozen=True, order=True)
class Variant:
    """Everything of a configuration but its pool sizes."""

    trainer_width: int
    """Devices of one trainer (the training pool's devices_per_trainer)."""
    adapter_slots: int
    """Adapters resident per engine (cluster.engine.adapter_slots)."""
    policy: str
    preset: str
    """A preset's name, or NO_PRESET."""

    def label(self) -> str:
        """``w4 slots8 fair`` (and the preset when there is one)."""
        preset = "" if self.preset == NO_PRESET else f" {self.preset}"
        return f"w{self.trainer_width} slots{self.adapter_slots} {self.policy}{preset}"


@dataclass(frozen=True, order=True)
class Config:
    """One configuration: a variant and its pools' sizes [devices]."""

    variant: Variant
    inference: int
    training: int

    @property
    def devices(self) -> int:
        """Devices in both pools."""
        return self.inference + self.training

    def label(self) -> str:
        """``40+16 w4 slots8 fair``: inference + training devices, then the variant."""
        return f"{self.inference}+{self.training} {self.variant.label()}"


@dataclass(frozen=True)
class Space:
    """The configurations searched and what their devices cost."""

    variants: tuple[Variant, ...]
    max_devices: int
    """Most devices in both pools together."""
    inference_price: float
    """Price of one inference device for one hour [currency units]."""
    training_price: float
    fixed: tuple[int, int] | None = None
    """(inference, training) devices when the pools are not searched."""

    def price_per_hour(self, config: Config) -> float:
        """What the configuration's devices cost for one hour [currency units]."""
        return config.inference * self.inference_price + config.training * self.training_price

    def training_sizes(self, variant: Variant) -> list[int]:
        """Training devices tried for ``variant``: whole trainers, leaving one inference
        device (ascending)."""
        if self.fixed is not None:
            return [self.fixed[1]] if self.fixed[1] % variant.trainer_width == 0 else []
        width = variant.trainer_width
        return list(range(width, self.max_devices, width))

    def inference_range(self, training: int) -> tuple[int, int]:
        """(fewest, most) inference devices tried beside ``training`` training devices."""
        if self.fixed is not None:
            return self.fixed[0], self.fixed[0]
        return 1, self.max_devices - training

    def most_inference_within(self, training: int, price: float) -> int:
        """Most inference devices whose configuration costs at most ``price`` per hour
        (with a relative tolerance of 1e-9, so that equal prices tie; any number at an
        infinite price)."""
        if math.isinf(price):
            return self.max_devices
        room = price * (1 + 1e-9) - training * self.training_price
        return math.floor(room / self.inference_price) if room >= 0 else -1

    def configs(self) -> list[Config]:
        """Every configuration of the space (the brute-force grid)."""
        return [
            Config(variant, inference, training)
            for variant in self.variants
            for training in self.training_sizes(variant)
            for inference in range(*_inclusive(self.inference_range(training)))
        ]


def _inclusive(bounds: tuple[int, int]) -> tuple[int, int]:
    return bounds[0], bounds[1] + 1


def pool_names(workload: Workload) -> tuple[str, str]:
    """Names of the workload's inference pool and training pool (exactly one of each)."""
    inference = [p.name for p in workload.cluster.pools if p.role == "inference"]
    training = [p.name for p in workload.cluster.pools if p.role == "training"]
    if len(inference) != 1 or len(training) != 1:
        raise PlanError(
            f"{workload.name}: plan sizes one inference pool and one training pool; the "
            f"workload has {len(inference)} and {len(training)}"
        )
    return inference[0], training[0]


def current(workload: Workload) -> Config:
    """The workload's own configuration."""
    inference, training = pool_names(workload)
    pools = {p.name: p for p in workload.cluster.pools}
    variant = Variant(
        pools[training].devices_per_trainer,
        workload.cluster.engine.adapter_slots,
        workload.policy,
        workload.scheduling.preset or NO_PRESET,
    )
    return Config(variant, pools[inference].devices, pools[training].devices)


def overrides(workload: Workload, config: Config) -> dict[str, Any]:
    """The ``--set``-style overrides that turn ``workload`` into ``config``."""
    inference, _ = pool_names(workload)
    pools = []
    for pool in workload.cluster.pools:
        if pool.name == inference:
            pools.append(_resized(pool, config.inference, 1))
        else:
            pools.append(_resized(pool, config.training, config.variant.trainer_width))
    preset = config.variant.preset
    return {
        "cluster.pools": pools,
        "cluster.engine.adapter_slots": config.variant.adapter_slots,
        "policy": config.variant.policy,
        "scheduling.preset": None if preset == NO_PRESET else preset,
    }


def _resized(pool: PoolSpec, devices: int, per_trainer: int) -> dict[str, Any]:
    return {**pool.model_dump(), "devices": devices, "devices_per_trainer": per_trainer}
