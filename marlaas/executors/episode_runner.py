"""The episodes of every prompt group in flight: generation turns on the engine the scheduler
chose, environment steps with the workload's declared latency, and the training batch of a
finished step with its reward point."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from marlaas.core.job_spec import JobSpec
from marlaas.core.work import EnvStep, Generate, Train
from marlaas.datasets import PromptSet
from marlaas.envs import Environment, make_env
from marlaas.envs.job_dataset import job_prompt_set
from marlaas.executors.env_instances import Closings, new_envs
from marlaas.executors.env_loops import EnvLoops
from marlaas.executors.episodes import (
    ChatFormat,
    GroupEpisode,
    add_completions,
    start_group,
    step_envs,
)
from marlaas.executors.rollout import TrainSample


class EpisodeError(RuntimeError):
    """An episode that cannot go on (e.g. its prompt does not fit the context)."""


def prompt_too_long(
    spec: JobSpec, which: str, tokens: int, call: str, max_model_len: int
) -> EpisodeError:
    """The error of a first turn whose prompt (``tokens`` long, of ``which``: a group, a
    held-out problem) leaves no room under ``max_model_len``, naming the job's environment
    and the ``call`` that gave it."""
    return EpisodeError(
        f"{spec.name}: {which}'s prompt is {tokens:,} tokens (environment {spec.env.name}'s "
        f"{call}), and max_model_len is {max_model_len:,} tokens: no room to generate"
    )


@dataclass(frozen=True, slots=True)
class RewardPoint:
    """One training step of one job: the reward curve's point and the trainer's statistics."""

    job: str
    tenant: str
    step: int
    """Training step (adapter version before it), counting resumed steps."""
    mean_reward: float
    """Mean episode reward of the groups sampled for the step (dropped ones included)."""
    time_s: float
    """When the step finished [s since the run's start]."""
    staleness: int
    """Largest version lag of a sample in the batch, measured by the trainer [versions]."""
    max_staleness: int
    """The bound the scheduler enforced on the job [versions] (its rl.max_staleness, capped by
    the mechanism: a preset's 0)."""
    mean_ratio: float
    """Mean importance weight pi / mu of the step's tokens, before truncation (the trainer's
    ``mean_weight``; ``mean_ratio`` is its name in rewards.csv and journal.jsonl)."""
    clip_fraction: float
    """Fraction of the step's tokens whose weight was truncated."""
    loss: float
    samples: int
    rss_mb: float = 0.0
    """Resident memory of the run's process and its children when the step finished [MiB]."""
    trust_clip_fraction: float = 0.0
    """Fraction of the step's tokens whose ratio to the step's starting policy was clipped
    (no gradient; only from a step's second minibatch on, ``rl.minibatches``)."""
    dropped_groups: int = 0
    """Groups sampled for the step and dropped as all alike (``rl.resample_alike``); the
    mean reward counts them."""


class EpisodeRunner:
    """Keeps each group's episode between its turns, for the admitted jobs (``specs``: the
    executor's, shared).

    ``env_threads``: each job's environment calls run on an event loop in a thread of its
    own (:mod:`marlaas.executors.env_loops`), so that one blocking its thread stalls neither
    the run nor another job; False where the environments run elsewhere already (Ray's
    actors: ``make_env`` gives proxies that only await). :meth:`close` stops the threads.

    Every environment it makes is closed once (:mod:`marlaas.executors.env_instances`): a
    group's when it is trained (:meth:`release`) or its start failed, a job's left when the job
    is released, every one left when the run stops (:meth:`close`)."""

    def __init__(
        self,
        specs: dict[str, JobSpec],
        fmt: ChatFormat,
        max_model_len: int,
        seed: int,
        make_env: Callable[[str, dict], Environment] = make_env,
        env_threads: bool = True,
    ) -> None:
        self.specs, self.fmt, self.max_model_len = specs, fmt, max_model_len
        self.seed = seed
        self.make_env = make_env
        """A new environment for one sample's episode (here, or in an actor of a pool)."""
        self.env_loops = EnvLoops() if env_threads else None
        """Each job's loop of its environment calls (None: they run on the caller's loop)."""
        self._closings = Closings()
        """The environments being closed in the background."""
        self._index: dict[str, int] = {}
        self._episodes: dict[tuple[str, int], GroupEpisode] = {}
        self._prompt_sets: dict[str, PromptSet] = {}
        """Each job's dataset as the run first read it (its answers checked as loading the
        workload checks them): a file edited during the run does not change its prompts."""

    def admit(self, job: str, index: int) -> None:
        """A job was admitted as the run's ``index``-th (it seeds the job's prompts)."""
        self._index[job] = index

    def release_job(self, job: str) -> None:
        """A job ended (finished, cancelled or failed): forget it and its episodes (a
        cancelled job's unfinished ones); their environments are closed in the background,
        then its environment thread stops. Call it on the run's loop."""
        spec = self.specs[job]
        del self._index[job]
        self._prompt_sets.pop(job, None)
        envs = []
        for key in [key for key in self._episodes if key[0] == job]:
            envs += [s.env for s in self._episodes.pop(key).samples]
        loop = None if self.env_loops is None else self.env_loops.detach(job)
        stop = None if loop is None else loop.stop
        self._closings.start(envs, job, spec.env.timeout_s, loop, then=stop)

    async def close(self) -> list[str]:
        """The run ended: close every environment left, at once with the closes still going
        on in the background, under one deadline (each within its bound, and all within
        :data:`~marlaas.executors.env_instances.CLOSE_TIMEOUT_S` from now:
        :meth:`~marlaas.executors.env_instances.Closings.finish`), then stop every job's
        environment thread (their calls still running are cancelled, given a few seconds to
        end: :meth:`~marlaas.executors.env_loops.EnvLoops.close`); the names of threads left
        running, blocked in an environment's call. Every close runs to its end or its bound
        when one is interrupted (Ctrl-C, SIGTERM, a cancellation), and so does the threads'
        stop; the interruption is raised then."""
        by_job: dict[str, list] = {}
        for (job, _), episode in self._episodes.items():
            by_job.setdefault(job, []).extend(s.env for s in episode.samples)
        self._episodes.clear()
        for job, envs in by_job.items():
            self._closings.start(envs, job, self.specs[job].env.timeout_s, self._loop_of(job))
        try:
            await self._closings.finish()
        finally:
            stuck = [] if self.env_loops is None else await asyncio.to_thread(self.env_loops.close)
        return stuck

    def _loop_of(self, job: str):
        """``job``'s environment loop, if it has one already (None: this loop's)."""
        return None if self.env_loops is None else self.env_loops.running(job)

    def _close_group(self, job: str, envs: list[Environment]) -> None:
        """Close a group's environments in the background (its episode is over)."""
        spec = self.specs.get(job)
        timeout_s = None if spec is None else spec.env.timeout_s
        self._closings.start(envs, job, timeout_s, self._loop_of(job))

    async def _start(self, d: Generate, spec: JobSpec) -> GroupEpisode:
        """A new group's episode: its environments made and reset (closed again when that
        fails: a retry makes new ones)."""
        loop = None if self.env_loops is None else self.env_loops.of(d.job)
        envs = await new_envs(self.make_env, spec, d.seqs, loop, self._closings)
        try:
            seed = self.group_seed(d.job, d.group)
            problem = None
            if spec.dataset is not None:
                if d.job not in self._prompt_sets:
                    self._prompt_sets[d.job] = job_prompt_set(spec)
                problem = self._prompt_sets[d.job].train_problem(d.group, self.seed)
            episode, _ = await start_group(
                d.job, d.group, d.version, envs, seed, self.fmt, problem, spec.env.timeout_s,
                loop,
            )  # fmt: skip
        except BaseException:
            self._close_group(d.job, envs)
            raise
        return episode

    def group_seed(self, job: str, group: int) -> int:
        """Seed of a group's prompt (groups are numbered on over resumed parts, so a resumed
        job continues with new prompts)."""
        return (self.seed * 1_000_003 + self._index[job] * 10_007 + group) % 2**31

    async def generate(self, d: Generate, engine) -> tuple[int, int, int]:
        """One turn of the group on ``engine``: (tokens generated, the longest sample's
        tokens, mean context tokens per sequence it started from)."""
        spec, version = self.specs[d.job], d.version
        key, rl = (d.job, d.group), spec.rl
        if d.turn == 0:
            episode = self._episodes.get(key)
            if episode is None:  # a retried first turn keeps its prompt
                episode = await self._start(d, spec)
                self._episodes[key] = episode
            live = episode.samples
            prompts, n = [live[0].context], d.seqs
        else:
            episode = self._episodes[key]
            for sample in episode.live:
                if len(sample.context) + 1 >= self.max_model_len:
                    sample.done = True  # no room left in the context: the episode ends here
            live = episode.live
            prompts, n = [s.context for s in live], 1
        if not live:
            return 0, 0, 0
        context = round(sum(len(s.context) for s in live) / len(live))
        longest_context = max(len(s.context) for s in live)
        room = self.max_model_len - longest_context
        if room <= 0:  # only a first turn's: a later turn's full context ended its episode
            call = "reset()"
            if spec.dataset is not None:  # which row: the file's, named as loading names it
                row = self._prompt_sets[d.job].train_problem(d.group, self.seed).source
                call = f"reset_problem() of {row}"
            raise prompt_too_long(spec, f"group {d.group}", longest_context, call,
                                  self.max_model_len)  # fmt: skip
        seed = self.group_seed(d.job, d.group) * 131 + d.turn
        groups = await engine.generate(
            d.job, version, prompts, n, min(d.max_new_tokens, room), rl.temperature, seed
        )
        completions = [c for group in groups for c in group]
        longest = max((len(c.completion_ids) for c in completions), default=0)
        return add_completions(live, completions), longest, context

    async def env_step(self, d: EnvStep) -> tuple[int, float, bool]:
        """The group's environment step, each sample's within the job's ``env.timeout_s``,
        then the declared latency (the slowest of the group's samples); (observation tokens
        added, mean reward on the last turn else NaN, whether every sample's episode earned
        the same reward: on the last turn only)."""
        episode = self._episodes[(d.job, d.group)]
        rng = np.random.default_rng([self.seed, self._index[d.job], d.group, d.turn])
        env = self.specs[d.job].env
        latency_s = float(env.latency_s.sample(rng, d.seqs).max())
        added, mean = await step_envs(
            episode, d.last_turn, self.fmt, self.max_model_len, env.timeout_s
        )
        await asyncio.sleep(latency_s)
        if not d.last_turn:
            return added, math.nan, False
        return added, mean, episode.all_alike

    def batch(self, d: Train) -> tuple[list[TrainSample], float]:
        """The training samples of the step's groups, and the mean episode reward of every
        group sampled for the step (the dropped all-alike ones too: the policy's reward, not
        the filtered batch's)."""
        episodes = [self._episodes[(d.job, g)] for g in d.groups]
        samples = [s for e in episodes for s in e.train_samples()]
        sampled = episodes + [self._episodes[(d.job, g)] for g in d.dropped]
        return samples, sum(e.mean_reward for e in sampled) / len(sampled)

    def release(self, d: Train) -> None:
        """Forget the episodes of a trained step (its dropped groups' too); their
        environments are closed in the background. Call it on the run's loop."""
        envs = []
        for g in (*d.groups, *d.dropped):
            envs += [s.env for s in self._episodes.pop((d.job, g)).samples]
        self._close_group(d.job, envs)
