"""Decisions the scheduler hands to a driver, and the completion events it gets back.

Plain dataclasses, read-only by convention (not ``frozen``: a frozen dataclass costs
about three times as much to make, and a simulation makes millions of them): an executor
(SimPy, real, fixed-duration) starts each decision's work and later reports a
:class:`WorkDone` carrying the same ``work_id``. Some decisions are instant
(:data:`INSTANT`): evicting an adapter from an engine and moving a job's state off a trainer
complete when the executor starts them, before any later decision, and report nothing.
Devices, engines and trainers are named by strings; engine-specific ids (vLLM's
lora_int_id) never appear here. A job's life in an executor is bracketed by two more instant
decisions: :class:`AdmitJob` (build the job's state: its environments, its adapter's first
version, its episodes) and :class:`ReleaseJob` (drop it), so that an executor holds nothing
of a job outside that span. A cancelled job's generation in flight is stopped by one more,
:class:`AbortGeneration`: its own completion comes back at once, with no tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from marlaas.core.job_spec import JobSpec


@dataclass(slots=True)
class AdmitJob:
    """The scheduler admitted a job: build its state before any of its work (instant)."""

    work_id: int
    job: str
    spec: JobSpec
    index: int
    """The job's number in the run (its submission order): with the run's seed it fixes the
    job's random draws (prompts, lengths), in every world."""
    version: int
    """The adapter version it starts from: 0 for a new job (a freshly initialised adapter),
    else its last durable version (a resumed job)."""
    max_staleness: int
    """The staleness bound the scheduler enforces on the job [versions]: its
    rl.max_staleness, capped by the mechanism's staleness_cap (a preset's 0)."""


@dataclass(slots=True)
class ReleaseJob:
    """A job ended (finished or cancelled) and holds nothing any more: drop its state
    (instant). Its adapters left the engines and trainers by EvictAdapter / SwapOut first."""

    work_id: int
    job: str


@dataclass(slots=True)
class Generate:
    """Run one turn of one prompt group (``seqs`` samples) on an inference engine."""

    work_id: int
    job: str
    step: int
    """Training step that will consume this group."""
    group: int
    """Group index within the job (0, 1, ...); group g belongs to step g // prompts_per_step
    (one drawn in place of a dropped group: JobState.step_of, core.jobs.RESAMPLED_BASE)."""
    turn: int
    engine: str
    version: int
    """Adapter version to sample with (0 = the freshly initialised adapter)."""
    seqs: int
    context_tokens: int
    """Tokens already in the group's context (prompt and earlier turns), over all samples."""
    max_new_tokens: int
    """Cap per sample."""
    shared_tokens: int = 0
    """Prompt tokens per sample the samples share (cluster.engine.prefix_caching): held and
    prefilled once on the engine; 0 without prefix caching."""


@dataclass(slots=True)
class AbortGeneration:
    """Stop the generation ``generate`` (a cancelled job's :class:`Generate` in flight on
    ``engine``) now (instant): its sequences leave the engine's batch and free their KV and
    batch room for the others. Its own :class:`WorkDone` comes back as soon as the engine
    let it go (a simulator: at once), with no tokens in every executor (an aborted
    request's tokens are not returned: the event logs and the token rate the core measures
    are alike in both worlds); the core discards it as every completion of a cancelled job.
    A generation whose completion is already on its way (it finished meanwhile) is left as
    it is, and comes back with its tokens."""

    work_id: int
    job: str
    generate: int
    """The work id of the Generate to stop."""
    engine: str
    """The engine it runs on (the Generate's)."""


@dataclass(slots=True)
class EnvStep:
    """One environment step for every sample of a group (reward check, tool call, sandbox)."""

    work_id: int
    job: str
    step: int
    group: int
    turn: int
    seqs: int
    last_turn: bool
    """True when this step ends the episodes (the reward is final)."""


@dataclass(slots=True)
class LoadAdapter:
    """Make a job's adapter version resident on an inference engine."""

    work_id: int
    job: str
    version: int
    engine: str


@dataclass(slots=True)
class EvictAdapter:
    """Drop an idle adapter version from an inference engine (instant: frees its slot)."""

    work_id: int
    job: str
    version: int
    engine: str


@dataclass(slots=True)
class SwapIn:
    """Move a job's adapter and optimizer state (at ``version``, the newest published) onto a
    trainer, before a training step."""

    work_id: int
    job: str
    version: int
    trainer: str


@dataclass(slots=True)
class SwapOut:
    """Drop a job's adapter and optimizer state from a trainer (instant; the state is kept in
    storage since its last sync)."""

    work_id: int
    job: str
    trainer: str


@dataclass(slots=True)
class Train:
    """One training step of one job on a trainer (a group of devices)."""

    work_id: int
    job: str
    step: int
    trainer: str
    devices: tuple[str, ...]
    groups: tuple[int, ...]
    """The prompt groups in the batch."""
    seqs: int
    tokens: int
    """Tokens in the batch (prompts, responses and observations) [tokens]."""
    staleness: int
    """Largest version lag of a group in the batch."""
    version_out: int
    dropped: tuple[int, ...] = ()
    """The step's groups dropped as all alike (rl.resample_alike): not trained; their
    episodes end with the step."""
    shared_tokens: int = 0
    """Of ``tokens``, the repeats of each group's prompt in its other samples, (samples - 1)
    x prompt per group: a trainer that reads a shared beginning once does not read them
    again (marlaas.executors.token_layout) [tokens]."""


@dataclass(slots=True)
class Sync:
    """Publish a job's new adapter version to the inference engines."""

    work_id: int
    job: str
    version: int
    trainer: str


Decision = (
    Generate
    | EnvStep
    | LoadAdapter
    | EvictAdapter
    | SwapIn
    | SwapOut
    | Train
    | Sync
    | AdmitJob
    | ReleaseJob
    | AbortGeneration
)

INSTANT = (EvictAdapter, SwapOut, AdmitJob, ReleaseJob, AbortGeneration)
"""Decisions that complete when started: no WorkDone comes back for them."""


@dataclass(slots=True)
class WorkDone:
    """A piece of work finished (``ok=False``: it failed and will be retried)."""

    work_id: int
    ok: bool = True
    tokens: int = 0
    """Generate: tokens produced over all samples; EnvStep: observation tokens added;
    Train: tokens trained."""
    reward: float = math.nan
    """Mean reward of the group (EnvStep on the last turn, in real runs)."""
    alike: bool = False
    """EnvStep on the last turn: every sample of the group earned the same reward (no GRPO
    advantage; rl.resample_alike may drop the group)."""
    error: str = ""
    """Why the work failed (``ok=False``), one line."""
    prompt_tokens: int = -1
    """Generate: the measured context tokens per sequence the turn started from (-1: the
    scheduler's own count, the decision's context_tokens / seqs). Train: of the decision's
    shared_tokens, those the trainer did not read (it read each shared beginning once; 0: it
    read every sample whole; -1: not said)."""
    longest_tokens: int = -1
    """Generate: tokens of the group's longest sample (-1: unknown)."""
