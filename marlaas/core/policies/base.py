"""The policy interface and its registry.

A policy is small and pure: given a read-only view of one job, it returns a sort key; the
scheduler's mechanism serves jobs in ascending key order wherever a choice exists (admitting
jobs, placing rollout groups on engines, environment workers, trainers). Keys are recomputed
after every placement, so policies whose key grows with service (fair, round-robin)
interleave tenants and strict ones (fifo, priority, srtf) do not.

A policy is an ordering and nothing else: the baselines ``sequential`` and ``sync`` are presets
of the mechanism settings (see marlaas.core.scheduling), usable with any policy.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from marlaas.core.scheduling import PRESETS


class JobView(Protocol):
    """What a policy may read about a job (the scheduler's JobState satisfies it)."""

    @property
    def index(self) -> int:
        """Position of the job in the workload file."""

    @property
    def name(self) -> str: ...

    @property
    def tenant(self) -> str: ...

    @property
    def weight(self) -> float: ...

    @property
    def arrival_s(self) -> float: ...

    @property
    def attained_tokens(self) -> float:
        """Tokens generated and trained so far, including estimates for work in flight."""

    @property
    def remaining_tokens(self) -> float:
        """Estimated tokens still to generate (from the response-length means)."""

    @property
    def last_served(self) -> int:
        """Sequence number of the job's latest placement (0 = never served)."""


class Policy:
    """Base class: subclasses set ``name`` and implement :meth:`key`."""

    name: ClassVar[str] = ""

    def key(self, job: JobView) -> tuple:
        """Sort key: lower is served first. Must end with job.index for determinism."""
        raise NotImplementedError


_REGISTRY: dict[str, type[Policy]] = {}


class UnknownPolicyError(KeyError):
    """A policy name that is not registered."""

    def __str__(self) -> str:
        return str(self.args[0])


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make a policy available by its ``name``."""
    if not cls.name or cls.name in _REGISTRY:
        raise ValueError(f"policy name {cls.name!r} is empty or taken")
    _REGISTRY[cls.name] = cls
    return cls


def policy_names() -> list[str]:
    """Registered policy names, sorted."""
    return sorted(_REGISTRY)


def get_policy(name: str) -> Policy:
    """A new instance of the policy registered as ``name``."""
    try:
        return _REGISTRY[name]()
    except KeyError:
        hint = (
            f" ({name!r} is a preset of mechanism settings: --preset {name}, or "
            f"scheduling.preset: {name})"
            if name in PRESETS
            else ""
        )
        raise UnknownPolicyError(
            f"unknown policy {name!r}; choose one of: {', '.join(policy_names())}{hint}"
        ) from None
