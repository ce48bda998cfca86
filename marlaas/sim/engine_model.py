"""Continuous-batching decode on one inference engine, advanced analytically.

Every running sequence gains one token per decode iteration. One iteration takes

    dt(n, C, L) = base + per_seq * n + per_kv_token * C + per_adapter * L     [s]

for n running sequences holding C context tokens in all, with L distinct adapters. Between two
events (an admission or a sequence finishing) n and L are fixed and C grows by n per
iteration, so the time for k iterations is a quadratic in k, solved in closed form. The cost
of simulating an engine therefore grows with the number of sequences (a heap push and pop
each), not with the number of tokens. Admitting a group first runs its prefill, pausing
decode for prompt tokens / prefill rate.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter

import numpy as np

from marlaas.core.workload import CostModel

_EPS = 1e-7


class EngineModel:
    """Fluid model of one engine's decode progress; ``progress`` counts iterations done."""

    def __init__(self, cost: CostModel) -> None:
        self.base_s = cost.decode_base_ms / 1e3
        self.per_seq_s = cost.decode_per_seq_ms / 1e3
        self.per_kv_s = cost.decode_per_kv_token_ms / 1e3
        self.per_adapter_s = cost.decode_per_adapter_ms / 1e3
        self.prefill_s_per_token = 1.0 / cost.prefill_tokens_per_s
        self.progress = 0.0
        """Decode iterations done since the engine started."""
        self.clock_s = 0.0
        """Simulation time that ``progress`` refers to."""
        self.resume_s = 0.0
        """Decode is paused for prefill until this time."""
        self.running = 0
        self.context_offset = 0.0
        """Sum over running sequences of (prompt - progress at admission); the batch's
        context is context_offset + running * progress."""
        self.adapters: Counter = Counter()
        self._finish: list[tuple[float, int, int, float]] = []
        """Heap of (progress at which it ends, seq id, work id, its context offset)."""
        self._left: dict[int, int] = {}
        """Work id -> sequences of that group still running."""
        self._adapter_of: dict[int, object] = {}
        self._seq_ids = 0

    def _alpha(self) -> float:
        context = self.context_offset + self.running * self.progress
        return (
            self.base_s
            + self.per_seq_s * self.running
            + self.per_kv_s * context
            + self.per_adapter_s * len(self.adapters)
        )

    def advance(self, now: float) -> None:
        """Move decode progress forward to ``now``."""
        start = max(self.clock_s, self.resume_s)
        if self.running and now > start:
            alpha, slope = self._alpha(), self.per_kv_s * self.running
            dt = now - start
            if slope > 0:
                k = (-alpha + math.sqrt(alpha * alpha + 2 * slope * dt)) / slope
            else:
                k = dt / alpha
            self.progress += k
        self.clock_s = max(self.clock_s, now)

    def admit(self, now: float, work_id: int, lengths: np.ndarray, prompt: float, adapter) -> None:
        """Start a group: ``lengths`` [tokens] per sample, ``prompt`` context per sample."""
        self.advance(now)
        self.resume_s = max(self.resume_s, now) + prompt * len(lengths) * self.prefill_s_per_token
        offset = prompt - self.progress
        for length in lengths:
            self._seq_ids += 1
            heapq.heappush(
                self._finish, (self.progress + float(length), self._seq_ids, work_id, offset)
            )
        self.running += len(lengths)
        self.context_offset += offset * len(lengths)
        self.adapters[adapter] += len(lengths)
        self._left[work_id] = len(lengths)
        self._adapter_of[work_id] = adapter

    def next_finish_s(self) -> float | None:
        """When the next sequence finishes, if nothing else changes."""
        if not self._finish:
            return None
        k = max(self._finish[0][0] - self.progress, 0.0)
        alpha, slope = self._alpha(), self.per_kv_s * self.running
        return max(self.clock_s, self.resume_s) + alpha * k + 0.5 * slope * k * k

    def pop_finished(self, now: float) -> list[int]:
        """Advance to ``now`` and return the work ids of groups whose last sample ended."""
        self.advance(now)
        done = []
        limit = self.progress + _EPS * max(1.0, self.progress)
        while self._finish and self._finish[0][0] <= limit:
            _, _, work_id, offset = heapq.heappop(self._finish)
            self.running -= 1
            self.context_offset -= offset
            adapter = self._adapter_of[work_id]
            self.adapters[adapter] -= 1
            if not self.adapters[adapter]:
                del self.adapters[adapter]
            self._left[work_id] -= 1
            if not self._left[work_id]:
                del self._left[work_id], self._adapter_of[work_id]
                done.append(work_id)
        if not self.running:
            self.context_offset = 0.0
        return done
