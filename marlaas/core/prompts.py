"""Each prompt group's own prompt length [tokens].

A group's samples share one prompt, as in GRPO. Its length is drawn from the job's
``prompt_tokens`` with ``numpy.random.default_rng([seed, job index, group])``: the same for a
workload, seed, job and group in every run, known to the core before the group starts (it
reserves the group's KV cache for it) and to the simulator (the prefill and the context of
the group's first turn). It is truncated at :func:`prompt_cap`, the longest prompt the job
can have, for which the feasibility check sizes an engine. A ``trace`` (or ``empirical``)
prompt is a row of the trace drawn with that generator; the simulator takes the row's
neighbours' responses for a paired trace (:mod:`marlaas.sim.turn_draws`, which also draws
the response lengths and environment waits: the core decides with prompt lengths only).
"""

from __future__ import annotations

import numpy as np

from marlaas.core.cluster_spec import shared_prefix
from marlaas.core.distributions import Constant, Uniform, largest
from marlaas.core.job_spec import JobSpec
from marlaas.core.limits import MAX_TOKENS
from marlaas.core.seeds import SeededBlock


def longest_prompt(spec: JobSpec) -> int:
    """The longest prompt ``spec.prompt_tokens`` gives [tokens]: a constant, the high end,
    the largest value, or a lognormal's p99.99 (:func:`largest` with its tail); at most
    MAX_TOKENS."""
    return int(min(round(largest(spec.prompt_tokens, tail=True)), MAX_TOKENS))


def prompt_cap(spec: JobSpec) -> int:
    """The longest prompt a group of the job can get [tokens]: rl.max_prompt_tokens when it
    is set and shorter, else :func:`longest_prompt`."""
    cap = spec.rl.max_prompt_tokens
    return longest_prompt(spec) if cap is None else min(cap, longest_prompt(spec))


def prompts_kv(prompt: int, group_size: int, caching: bool) -> int:
    """KV tokens a group's prompts of ``prompt`` tokens hold on an engine: a copy per sample,
    or with prefix caching the shared blocks (:func:`shared_prefix`) once and the rest per
    sample (the reservation :func:`marlaas.core.generation.kv_reserve` makes)."""
    shared = shared_prefix(prompt) if caching else 0
    return group_size * prompt - (group_size - 1) * shared


def largest_prompts_kv(spec: JobSpec, caching: bool) -> tuple[int, int]:
    """(prompt [tokens], :func:`prompts_kv` of it) for the prompt of ``spec`` whose group
    holds the most KV tokens. Without prefix caching that is the longest (:func:`prompt_cap`);
    with it, a prompt one token into a new block shares that block's tokens and holds fewer
    than the prompt that ends the block before it (8 samples of 33 tokens hold 40, of 32
    hold 256), so the candidates are the prompts the job can draw (a constant, the values)
    or, for a range, its top and the end of the last whole block below it."""
    cap, group = prompt_cap(spec), spec.rl.group_size
    if not caching or group == 1:
        return cap, prompts_kv(cap, group, caching)
    dist = spec.prompt_tokens
    values = getattr(dist, "values", None)
    if isinstance(dist, Constant):
        candidates = np.asarray([min(round(dist.value), cap)])
    elif values:
        candidates = np.unique(np.clip(np.round(np.asarray(values, dtype=float)), 0, cap))
    else:  # a range of whole prompts: a uniform's from its low end, a lognormal's from 0
        low = min(round(dist.low), cap) if isinstance(dist, Uniform) else 0
        block_end = shared_prefix(cap)  # the end of the last whole block below cap
        candidates = np.asarray([cap] + ([block_end] if block_end >= low else []))
    kv = [prompts_kv(int(p), group, True) for p in candidates]
    worst = int(np.argmax(kv))  # the first of equals: the shortest such prompt
    return int(candidates[worst]), kv[worst]


class PromptLengths:
    """One job's prompt length per group [tokens]."""

    def __init__(self, spec: JobSpec, seed: int, job: int) -> None:
        self.spec = spec
        self.seed, self.job = seed, job
        self.cap = prompt_cap(spec)
        """The longest prompt a group gets [tokens]."""
        dist = spec.prompt_tokens
        self._constant = min(round(dist.value), self.cap) if isinstance(dist, Constant) else None
        values = getattr(dist, "values", None)
        self._values = np.asarray(values, dtype=float) if values else None
        self._last = (-1, 0, -1)
        """(group, prompt, row) of the last group asked for (asked again and again)."""
        self._seeded = SeededBlock([seed, job])
        """Each group's generator, default_rng([seed, job, group]), made in blocks."""

    def prompt(self, group: int) -> int:
        """Group ``group``'s prompt length [tokens], the same for each of its samples."""
        return self._draw(group)[1]

    def row(self, group: int) -> int:
        """The row of the prompt trace (or ``empirical`` values) group ``group``'s prompt was
        drawn from; -1 when the prompt distribution has no rows."""
        return self._draw(group)[2]

    def _draw(self, group: int) -> tuple[int, int, int]:
        """(group, prompt length, trace row or -1)."""
        if self._last[0] == group:
            return self._last
        if self._constant is not None:
            self._last = (group, self._constant, -1)
            return self._last
        rng = self._seeded.rng(group)
        if self._values is not None:
            row = int(rng.integers(len(self._values)))
            drawn = self._values[row]
        else:
            row, drawn = -1, float(self.spec.prompt_tokens.sample(rng, 1)[0])
        self._last = (group, int(min(max(round(drawn), 0), self.cap)), row)
        return self._last
