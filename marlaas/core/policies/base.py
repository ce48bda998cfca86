"""The policy interface and its registry.

A policy is small and pure (but for figures it starts again in :meth:`Policy.start_run`):
given a read-only view of one job, it returns a sort key; the scheduler's mechanism serves
jobs in ascending key order wherever a choice exists (admitting jobs, placing rollout groups
on engines, environment workers, trainers). Keys are recomputed
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
from marlaas.core.validation_message import short_repr


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
    def prompts_per_step(self) -> int:
        """Prompt groups one training step consumes."""

    @property
    def turns(self) -> int:
        """Turns of each episode (a prompt group is generated once per turn)."""

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
    def backlog_s(self) -> float:
        """Time the live jobs' expected remaining tokens (this job's included) take at the
        cluster's measured token rate [s]: the same figure for every job (core.backlog;
        infinite before any token was generated). A key that reads it is recomputed when
        the job changes and when this figure moved by 5% (the policy's ``reads_backlog``)."""

    @property
    def backlog_end_s(self) -> float:
        """When the backlog would end at the cluster's measured token rate [s since the run's
        start]: the start of the current decision round plus ``backlog_s`` (infinite with
        it); with ``arrival_s``, the time a job has from its arrival until the backlog ends.
        Re-keyed as ``backlog_s`` is, so a key reads it as of its job's last re-key: while
        ``backlog_s`` holds level, it moves on with the clock between re-keys."""

    @property
    def busy_since_s(self) -> float:
        """When the current busy stretch began [s since the run's start]: the last time a
        job became live while none was. A job with a later ``arrival_s`` arrived while
        others ran; every job of a workload submitted at once arrived at it. The same
        figure for every live job, and it moves only when no job is live."""

    @property
    def longest_alone_s(self) -> float:
        """The longest ``remaining_alone_s`` among the live jobs [s] (this one's included):
        with ``backlog_s``, the earliest the backlog can end. A key that reads it is
        recomputed for the jobs that hold it when it moves (``reads_backlog``)."""

    @property
    def longest_alone_jobs(self) -> int:
        """How many live jobs hold ``longest_alone_s``: 1 when one job's critical path alone
        sets it, more when several end together. Re-keyed as ``longest_alone_s`` is."""

    @property
    def runner_up_late_s(self) -> float:
        """The runner-up's remaining critical path one of its steps later [s]: the longest
        ``remaining_alone_s`` below ``longest_alone_s`` among the live jobs, plus one step
        of the job that has it (0 with none). Equal to the last bit to a holder's
        ``remaining_alone_s``: that holder is one step ahead of a job of its own spec. The
        jobs that hold ``longest_alone_s`` are re-keyed when it moves (``reads_backlog``)."""

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

    @property
    def free_seqs(self) -> int:
        """Sequences it may still take (its max_seqs minus ``seqs``)."""

    @property
    def free_tokens(self) -> int:
        """KV tokens still free on it (its KV room minus ``tokens``)."""

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
    reads_backlog: ClassVar[bool] = False
    """Whether :meth:`key` reads ``JobView.backlog_s``, ``backlog_end_s``, ``longest_alone_s``,
    ``longest_alone_jobs`` or ``runner_up_late_s``: the scheduler then re-keys every active
    job when ``backlog_s`` moved by 5%, and the jobs that hold the longest alone time when
    it, its holders or the runner-up's change (core.backlog), not only the jobs that
    changed."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.ranks_engines = cls.engine_key is not Policy.engine_key

    def start_run(self) -> None:
        """A scheduler took this instance for a new run, before any key: a policy that keeps
        figures between keys starts them again here, so that an instance given to one run
        after another (``marlaas.simulate`` with a Policy) orders each as a fresh one would.
        An instance serves one run at a time. Default: nothing."""

    def key(self, job: JobView) -> tuple:
        """Sort key: lower is served first. Must end with job.index for determinism."""
        raise NotImplementedError

    def engine_key(self, job: JobView, engine: EngineView, homes: int) -> tuple | None:
        """Placement preference for ``job``'s next group. The candidates are the engines
        where it fits now that hold its adapter version or another of its versions, and the
        first open engine, in the mechanism's order, that the policy does not refuse (of
        the first four, up to the first that is already a candidate); those that hold the
        adapter version ready come first, then the lowest key (an engine still loading that
        version ranks with those that need a load: when it is the best, the group waits for
        that load unless an open engine the policy takes is found first). None: not on this
        engine (the group waits for room elsewhere).
        ``homes``: how many engines hold some version of the job's adapter. Default: the
        mechanism's own order (the most free sequences, then the lowest index)."""
        return (engine.seqs, engine.index)

    def open_share(self, job: JobView, homes: int) -> float:
        """For a policy that ranks engines: the share (0-1) of an open engine's sequences
        and of its KV tokens that must both be free for ``job``'s next group to be offered
        it (``homes`` as for :meth:`engine_key`). The mechanism searches its free-room
        index for such an engine instead of offering fuller ones to be refused, one by one.
        Default 0: any engine where the group fits."""
        return 0.0


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


def add_policy(name: str, cls: type[Policy]) -> None:
    """Make ``cls`` available as ``name`` (marlaas.policy_path registers a class loaded by
    import path under that path); the same class again is a no-op."""
    if _REGISTRY.get(name, cls) is not cls:
        raise ValueError(f"policy name {name!r} is taken")
    _REGISTRY[name] = cls


def is_registered(name: str) -> bool:
    """Whether ``name`` is a registered policy (a name, or a loaded import path)."""
    return name in _REGISTRY


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
        if ":" in name:
            hint = " (an import path: load it with marlaas.policy_path.load_policy first)"
        raise UnknownPolicyError(
            f"unknown policy {short_repr(name)}; choose one of: {', '.join(policy_names())} or an "
            f"import path 'pkg.module:Class'{hint}"
        ) from None
