"""Per-job progress: groups in flight, versions trained and published, the staleness gate.

A job's prompt groups are numbered 0, 1, ...; group g is consumed by training step
g // prompts_per_step, which turns adapter version t into t + 1. A group is sampled with the
version published when its first turn starts and keeps it for the whole episode, so the lag
of group g at its training step is step(g) - version(g). The gate below starts group g only
when published >= step(g) - max_staleness: the staleness bound holds by construction.

With rl.resample_alike = R (DAPO's dynamic sampling), a finished group whose samples all
earned the same reward is dropped while its step has drawn fewer than R in its place, and
another group takes its place: the k-th of step s is numbered RESAMPLED_BASE +
s * MAX_PROMPTS_PER_STEP + k, past any job's own groups whatever its steps (a resumed job
may train longer) or prompts per step (its own prompt, the same in every world, run and
part). It starts as soon as it may, with the version published then, which is no older than
the dropped group's: the bound still holds.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from marlaas.core.backlog import Backlog
from marlaas.core.cluster_spec import shared_prefix
from marlaas.core.estimates import OUTSIDE_A_SCHEDULER, AloneCluster, WorkEstimate, upper_tokens
from marlaas.core.job_spec import JobSpec
from marlaas.core.limits import MAX_PROMPTS_PER_STEP, MAX_STEPS
from marlaas.core.prompts import PromptLengths

RESAMPLED_BASE = MAX_STEPS * MAX_PROMPTS_PER_STEP
"""The first group number drawn in place of a dropped group (rl.resample_alike); step s's
k-th is RESAMPLED_BASE + s * MAX_PROMPTS_PER_STEP + k (at most about 8.2e8: an int32 of the
event log, and a seed under 2^31)."""


@dataclass(slots=True)
class Group:
    """One prompt group's episode: ``seqs`` samples over ``turns`` turns."""

    index: int
    version: int
    turn: int = 0
    context_tokens: int = 0
    """Tokens in the group's context over all samples (prompt, responses, observations)."""
    shared_tokens: int = 0
    """Prompt tokens per sample that the samples share on an engine with prefix caching
    (held once, not once per sample: the prompt's whole KV blocks); 0 without it."""

    def kv_reserve(self, seqs: int, max_new_tokens: int) -> int:
        """KV tokens a turn of the group reserves on its engine: its context (the shared
        prompt once) plus room for every sample's response."""
        return self.context_tokens - (seqs - 1) * self.shared_tokens + seqs * max_new_tokens


@dataclass(slots=True)
class JobState:
    """Everything the mechanism knows about one job; policies read it through JobView."""

    spec: JobSpec
    index: int
    max_staleness: int
    seed: int = 0
    """The run's seed: with the job's index and a group's, it fixes the group's prompt."""
    arrival_s: float = 0.0
    """When the job was submitted [s since the run's start]."""
    start_version: int = 0
    """The adapter version it was submitted at: 0, or a resumed job's last durable one (its
    steps before it are done; its groups are numbered on from them)."""
    shares_prompt: bool = False
    """Its groups' samples share their prompt's KV (cluster.engine.prefix_caching)."""
    alone_cluster: AloneCluster = OUTSIDE_A_SCHEDULER
    """What it would have of the cluster alone (its alone-time estimate, core.estimates)."""
    cancelled: bool = False
    """The tenant cancelled it: its work in flight is discarded as it finishes."""
    done: bool = False
    trained: int = 0
    """Training steps finished = the newest adapter version on the trainer."""
    published: int = 0
    """Newest adapter version on the engines."""
    training: bool = False
    """A train step or sync of this job is running."""
    next_group: int = 0
    groups: dict[int, Group] = field(default_factory=dict)
    ready_gen: deque[int] = field(default_factory=deque)
    """Groups whose next turn can be generated (continuing episodes)."""
    ready_env: deque[int] = field(default_factory=deque)
    """Groups waiting for environment workers."""
    in_env: int = 0
    in_gen: int = 0
    finished: dict[int, list[Group]] = field(default_factory=dict)
    """Finished episodes by training step."""
    dropped: dict[int, list[int]] = field(default_factory=dict)
    """Groups dropped as all alike (rl.resample_alike), by training step, until it trains."""
    resample: deque[int] = field(default_factory=deque)
    """Groups drawn in place of dropped ones, waiting to start (before any new group)."""
    attained_tokens: float = 0.0
    remaining_tokens: float = 0.0
    last_served: int = 0
    finish_s: float | None = None
    backlog: Backlog | None = None
    """The scheduler's backlog, which every live job shares (None: a job outside a
    scheduler, whose backlog_s is infinite)."""
    # the spec's figures, kept at hand by __post_init__ (the spec is frozen: they are read on
    # every decision); slots, as every field, so that a job is one small object
    name: str = field(init=False, repr=False, compare=False)
    tenant: str = field(init=False, repr=False, compare=False)
    weight: float = field(init=False, repr=False, compare=False)
    steps: int = field(init=False, repr=False, compare=False)
    """Training steps to run."""
    group_size: int = field(init=False, repr=False, compare=False)
    prompts_per_step: int = field(init=False, repr=False, compare=False)
    turns: int = field(init=False, repr=False, compare=False)
    """Turns of each episode: group turns one prompt group generates."""
    total_groups: int = field(init=False, repr=False, compare=False)
    """Prompt groups over all steps (not counting those drawn in place of dropped ones)."""
    resample_alike: int = field(init=False, repr=False, compare=False)
    """Groups a step may draw in place of all-alike ones (rl.resample_alike)."""
    answer_reserve: int = field(init=False, repr=False, compare=False)
    """KV tokens a group turn reserves for its responses (max_new_tokens per sample)."""
    turn_tokens: float = field(init=False, repr=False, compare=False)
    """Estimated tokens generated by one group turn (for service estimates)."""
    estimate: WorkEstimate = field(init=False, repr=False, compare=False)
    """Per-turn token variance and per-step alone time, from the spec (core.estimates)."""
    lengths: PromptLengths = field(init=False, repr=False, compare=False)
    """Each group's own prompt length (marlaas.core.prompts)."""
    _reserve: tuple[int, int] = field(init=False, repr=False, compare=False)
    """(group, prompt reserve) of the group last asked for (asked again and again)."""

    def __post_init__(self) -> None:
        spec, rl = self.spec, self.spec.rl
        self.name = spec.name
        self.tenant = spec.tenant
        self.weight = spec.weight
        self.steps = rl.steps
        self.group_size = rl.group_size
        self.prompts_per_step = rl.prompts_per_step
        self.turns = rl.turns
        self.total_groups = rl.steps * rl.prompts_per_step
        self.resample_alike = rl.resample_alike
        self.answer_reserve = rl.group_size * rl.max_new_tokens
        mean_response = min(self.spec.response_tokens.mean(), rl.max_new_tokens)
        self.turn_tokens = rl.group_size * mean_response
        self.trained = self.published = self.start_version
        self.next_group = self.start_version * rl.prompts_per_step
        self.remaining_tokens = (self.total_groups - self.next_group) * rl.turns * self.turn_tokens
        self.lengths = PromptLengths(self.spec, self.seed, self.index)
        self.estimate = WorkEstimate.of(
            spec, self.alone_cluster, self.max_staleness, self.shares_prompt
        )
        self._reserve = (-1, 0)

    @property
    def in_flight(self) -> int:
        """Group turns and environment steps in flight, plus one while a swap, training step
        or sync of the job runs (or is due to start)."""
        return self.in_gen + self.in_env + (1 if self.training else 0)

    def new_group(self, group: int) -> Group:
        """Group ``group``'s first turn: its own prompt for each sample, shared with prefix
        caching."""
        return Group(group, self.published, 0, self.prompt_reserve_of(group),
                     self.shared_prompt_of(group))  # fmt: skip

    def shared_prompt_of(self, group: int) -> int:
        """Prompt tokens per sample that group ``group``'s samples share on an engine with
        prefix caching (its prompt's whole KV blocks); 0 without it."""
        return shared_prefix(self.lengths.prompt(group)) if self.shares_prompt else 0

    def prompt_reserve_of(self, group: int) -> int:
        """KV tokens group ``group`` reserves for its prompts: its own prompt length for each
        of its samples."""
        if self._reserve[0] != group:
            self._reserve = (group, self.lengths.prompt(group) * self.group_size)
        return self._reserve[1]

    # Estimates (what a policy's view adds to the fields above) ---------------------------
    @property
    def remaining_steps(self) -> int:
        """Training steps still to finish."""
        return self.steps - self.trained

    @property
    def remaining_tokens_high(self) -> float:
        """The 90th percentile of the tokens still to generate (remaining_tokens is the
        mean), from the response-length distribution's spread."""
        turns = self.remaining_tokens / self.turn_tokens if self.turn_tokens > 0 else 0.0
        return upper_tokens(self.remaining_tokens, turns * self.estimate.turn_tokens_var)

    @property
    def alone_s(self) -> float:
        """Estimated time the job's steps from its start version would take alone [s]."""
        return (self.steps - self.start_version) * self.estimate.step_alone_s

    @property
    def remaining_alone_s(self) -> float:
        """Estimated time its remaining steps would take alone [s]."""
        return (self.steps - self.trained) * self.estimate.step_alone_s

    @property
    def late_alone_s(self) -> float:
        """Its remaining alone time one step later [s]: one more step than it has left (the
        same product as remaining_alone_s, so that a job of the same spec one step behind
        has exactly this remaining alone time)."""
        return (self.steps - self.trained + 1) * self.estimate.step_alone_s

    @property
    def backlog_s(self) -> float:
        """Time the live jobs' expected remaining tokens take at the cluster's measured
        token rate [s] (core.backlog; infinite before any token was generated)."""
        backlog = self.backlog
        return backlog.seconds if backlog is not None else math.inf

    @property
    def backlog_end_s(self) -> float:
        """When the live jobs' expected remaining tokens would be generated at the cluster's
        measured token rate [s since the run's start] (core.backlog; infinite before any
        token was generated, and outside a scheduler)."""
        backlog = self.backlog
        return backlog.end_s if backlog is not None else math.inf

    @property
    def busy_since_s(self) -> float:
        """When the current busy stretch began [s since the run's start] (core.backlog;
        this job's arrival outside a scheduler)."""
        backlog = self.backlog
        return backlog.busy_since_s if backlog is not None else self.arrival_s

    @property
    def longest_alone_s(self) -> float:
        """The longest remaining_alone_s among the live jobs [s] (core.backlog; this job's
        own outside a scheduler)."""
        backlog = self.backlog
        return backlog.longest_alone_s if backlog is not None else self.remaining_alone_s

    @property
    def longest_alone_jobs(self) -> int:
        """How many live jobs hold longest_alone_s (core.backlog; 1 outside a scheduler)."""
        backlog = self.backlog
        return backlog.longest_alone_jobs if backlog is not None else 1

    @property
    def runner_up_late_s(self) -> float:
        """The longest remaining_alone_s below longest_alone_s among the live jobs, one of
        its holder's steps later [s] (core.backlog; 0 with none, and outside a scheduler)."""
        backlog = self.backlog
        return backlog.runner_up_late_s if backlog is not None else 0.0

    @property
    def stage(self) -> str:
        """What the job waits for now (rollouts, environment, trainer, weight_sync,
        staleness, barrier: see waiting_on; the step barrier as if open)."""
        return self.waiting_on(None)

    # Progress ----------------------------------------------------------------------------
    def step_of(self, group: int) -> int:
        """The training step that consumes ``group``."""
        if group < RESAMPLED_BASE:
            return group // self.prompts_per_step
        return (group - RESAMPLED_BASE) // MAX_PROMPTS_PER_STEP

    @property
    def new_group_index(self) -> int:
        """The group a new episode starts next: one drawn in place of a dropped group first."""
        return self.resample[0] if self.resample else self.next_group

    def took_new_group(self) -> None:
        """The group new_group_index named has started."""
        if self.resample:
            self.resample.popleft()
        else:
            self.next_group += 1

    def drop_alike(self, group: int) -> bool:
        """Group ``group`` finished with every sample's reward alike: drop it and draw another
        in its place when its step has resamples left (True), else keep it (False)."""
        step = self.step_of(group)
        dropped = self.dropped.get(step)
        drawn = len(dropped) if dropped is not None else 0
        if drawn >= self.resample_alike:
            return False
        if dropped is None:
            dropped = self.dropped[step] = []
        dropped.append(group)
        self.resample.append(RESAMPLED_BASE + step * MAX_PROMPTS_PER_STEP + drawn)
        self.remaining_tokens += self.turns * self.turn_tokens
        return True

    def next_group_allowed(self, barrier_limit: int | None) -> bool:
        """Whether a new group may start now (staleness gate, and barrier round if any; a
        group drawn in place of a dropped one always may: its step's groups started)."""
        if self.resample:
            return True
        if self.next_group >= self.total_groups:
            return False
        step = self.step_of(self.next_group)
        if barrier_limit is not None and step >= barrier_limit:
            return False
        return self.published >= step - self.max_staleness

    def train_ready(self) -> bool:
        """Whether the next training step has all its episodes and may start."""
        if self.training or self.done or self.trained >= self.steps:
            return False
        return len(self.finished.get(self.trained, ())) == self.prompts_per_step

    def trainer_vote(self) -> str | None:
        """What an idle trainer waits for on this job's account (None: it is training)."""
        if self.training:
            return None
        if not (self.in_gen or self.ready_gen) and (self.in_env or self.ready_env):
            return "environment"
        return "rollouts"

    def waiting_on(self, barrier_limit: int | None = None) -> str:
        """What this job's next new group or training step waits for (an idle cause);
        ``barrier_limit`` tells the step barrier apart from the staleness bound."""
        if self.trained > self.published:
            return "weight_sync"
        if self.training:
            return "trainer"
        step_groups = self.finished.get(self.trained, ())
        if len(step_groups) == self.prompts_per_step:
            return "trainer"
        if self.in_gen or self.ready_gen:
            return "rollouts"
        if self.in_env or self.ready_env:
            return "environment"
        if (
            barrier_limit is not None
            and self.next_group < self.total_groups
            and self.step_of(self.next_group) >= barrier_limit
        ):
            return "barrier"
        return "staleness"
