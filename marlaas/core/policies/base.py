"""The policy interface and its registry.

A policy is small and pure: given a read-only view of one job, it returns a sort key; the
scheduler's mechanism serves jobs in ascending key order wherever a choice exists (admitting
jobs, placing rollout groups on engines, environment workers, trainers). Keys are recomputed
after every placement, so policies whose key grows with service (fair, round-robin)
interleave tenants and strict ones (fifo, priority, srtf) do not.

A policy may also rank the engines a group can go to (:meth:`Policy.engine_key`, placement
preference); which engines can take it (room, adapter slots, loads) stays the mechanism's.
Each policy names its idea and its source (``idea``, ``source``: ``marlaas policies`` prints
them). A policy of your own is a subclass used by import path (``--policy
mypkg.policies:MyPolicy``, see marlaas.policy_path) or registered by name (:func:`register`).

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

    @property
    def remaining_tokens_high(self) -> float:
        """The 90th percentile of the tokens still to generate (from the length spread)."""

    @property
    def steps(self) -> int:
        """Training steps the job runs in all."""

    @property
    def remaining_steps(self) -> int:
        """Training steps still to finish."""

    @property
    def alone_s(self) -> float:
        """Estimated time the job would take alone [s] (core.estimates: a ranking figure)."""

    @property
    def remaining_alone_s(self) -> float:
        """Estimated time its remaining steps would take alone [s]."""

    @property
    def stage(self) -> str:
        """What the job waits for now: rollouts, environment, trainer, weight_sync,
        staleness or barrier."""


class EngineView(Protocol):
    """What a policy may read about an engine a group could be placed on."""

    @property
    def index(self) -> int:
        """Position of the engine in the cluster (the mechanism's tie-break)."""

    @property
    def seqs(self) -> int:
        """Sequences running or reserved on it."""

    @property
    def tokens(self) -> int:
        """KV tokens reserved on it."""

    def holds(self, job: str) -> bool:
        """Whether some version of job ``job``'s adapter is resident (or loading) there."""


class Policy:
    """Base class: subclasses set ``name``, ``idea`` and ``source`` and implement :meth:`key`
    (and :meth:`engine_key` to prefer engines)."""

    name: ClassVar[str] = ""
    idea: ClassVar[str] = ""
    """One line: what the policy does and why."""
    source: ClassVar[str] = ""
    """Where the idea comes from (a paper, a system), or "baseline"."""
    ranks_engines: ClassVar[bool] = False
    """Whether :meth:`engine_key` is overridden (set by the class itself, not by hand)."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.ranks_engines = cls.engine_key is not Policy.engine_key

    def key(self, job: JobView) -> tuple:
        """Sort key: lower is served first. Must end with job.index for determinism."""
        raise NotImplementedError

    def engine_key(self, job: JobView, engine: EngineView) -> tuple:
        """Placement preference: among the engines that can take ``job``'s next group now
        without loading its adapter, and then among those that must load it, the one with
        the lowest key gets it. The mechanism's own order (the most free sequences, then
        the lowest index) when not overridden."""
        return (engine.seqs, engine.index)


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
