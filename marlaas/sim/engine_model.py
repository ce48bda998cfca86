"""Continuous-batching decode on one inference engine, advanced analytically.

Every running sequence gains one token per decode iteration. One iteration takes

    dt(n, C, L) = base + per_seq * n + per_kv_token * C + per_adapter * L     [s]

for n running sequences holding C context tokens in all, with L distinct adapters. Between two
changes of the batch (an admission, or a sequence finishing) n and L are fixed and C grows by n
per iteration, so the time for k iterations is a quadratic in k, solved in closed form.
Engines that share one processor (cluster.shared_compute) run ``slowdown`` times slower while
others decode beside them (processor sharing); the simulator sets it as they start and stop.

Sequences finishing inside the batch are folded in piecewise without simulation events; the
engine only wakes the simulator when a whole group (its slowest sample) is done. The cost of
simulating an engine therefore grows with the number of sequences, not of tokens, and the
number of simulation events with the number of groups. Admitting a group first runs its
prefill, pausing decode for prompt tokens / prefill rate.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter

import numpy as np

from marlaas.sim.cost_model import CostModel

_EPS = 1e-7


class EngineModel:
    """Fluid model of one engine's decode; ``progress`` counts decode iterations done."""

    def __init__(self, cost: CostModel) -> None:
        self.base_s = cost.decode_base_ms / 1e3
        self.per_seq_s = cost.decode_per_seq_ms / 1e3
        self.per_kv_s = cost.decode_per_kv_token_ms / 1e3
        self.per_adapter_s = cost.decode_per_adapter_ms / 1e3
        self.prefill_s_per_token = 1.0 / cost.prefill_tokens_per_s
        self.warmup_s = cost.engine_warmup_s
        """Still to be paid by the first admission [s] (then 0)."""
        self.progress = 0.0
        """Decode iterations done since the engine started."""
        self.clock_s = 0.0
        """Simulation time [s] at which decode reached ``progress``."""
        self.resume_s = 0.0
        """Decode is paused for prefill until this time [s]."""
        self.running = 0
        self.context_offset = 0.0
        """Sum over running sequences of (prompt - progress at admission) [tokens]; the batch
        holds context_offset + running * progress tokens."""
        self.adapters: Counter = Counter()
        self.slowdown = 1.0
        """Factor on every iteration and prefill time (processor sharing; 1 = alone)."""
        self._seqs: list[tuple[float, int, int, float]] = []
        """Running sequences sorted by (progress at which they end, seq id, work id, offset)."""
        self._groups: list[tuple[float, int]] = []
        """Heap of (progress at which the group's slowest sample ends, work id)."""
        self._left: dict[int, int] = {}
        self._adapter_of: dict[int, object] = {}
        self._seq_ids = 0

    def _iteration(self, running: int, context: float, adapters: int) -> tuple[float, float]:
        """(time of the next iteration [s], its growth per iteration [s]) for ``running``
        sequences holding ``context`` tokens with ``adapters`` distinct adapters."""
        alpha = (
            self.base_s
            + self.per_seq_s * running
            + self.per_kv_s * context
            + self.per_adapter_s * adapters
        )
        return alpha * self.slowdown, self.per_kv_s * running * self.slowdown

    def _iteration_s(self) -> tuple[float, float]:
        context = self.context_offset + self.running * self.progress
        return self._iteration(self.running, context, len(self.adapters))

    def iteration_s(self, now: float) -> float:
        """How long a decode iteration takes at ``now`` [s] (0 when nothing decodes)."""
        self.advance(now)
        return self._iteration_s()[0] if self.running else 0.0

    def set_slowdown(self, now: float, factor: float) -> None:
        """From ``now`` [s] on, every iteration takes ``factor`` times as long."""
        self.advance(now)
        self.slowdown = factor

    def _end_sequence(self) -> None:
        _, _, work_id, offset = self._seqs.pop(0)
        self.running -= 1
        self.context_offset -= offset
        adapter = self._adapter_of[work_id]
        self.adapters[adapter] -= 1
        if not self.adapters[adapter]:
            del self.adapters[adapter]
        self._left[work_id] -= 1

    def advance(self, now: float) -> None:
        """Move decode forward to ``now`` [s], ending the sequences that finish on the way."""
        start = max(self.clock_s, self.resume_s)
        while self.running and now > start:
            alpha, slope = self._iteration_s()
            k = self._seqs[0][0] - self.progress
            needed = alpha * k + 0.5 * slope * k * k
            if start + needed <= now:
                self.progress = self._seqs[0][0]
                start += needed
                self._end_sequence()
                continue
            dt = now - start  # solve alpha k + slope k^2 / 2 = dt, in the stable form
            self.progress += 2 * dt / (alpha + math.sqrt(alpha * alpha + 2 * slope * dt))
            break
        self.clock_s = max(self.clock_s, now)
        if not self.running:
            self.context_offset = 0.0

    def admit(self, now: float, work_id: int, lengths: np.ndarray, prompt: float, adapter) -> None:
        """Start a group: ``lengths`` [tokens] per sample, ``prompt`` context per sample."""
        self.advance(now)
        prefill_s = prompt * len(lengths) * self.prefill_s_per_token * self.slowdown
        self.resume_s = max(self.resume_s, now) + prefill_s + self.warmup_s
        self.warmup_s = 0.0
        offset = prompt - self.progress
        for length in lengths.tolist():
            self._seq_ids += 1
            bisect.insort(self._seqs, (self.progress + length, self._seq_ids, work_id, offset))
        heapq.heappush(self._groups, (self.progress + float(lengths.max()), work_id))
        self.running += len(lengths)
        self.context_offset += offset * len(lengths)
        self.adapters[adapter] += len(lengths)
        self._left[work_id] = len(lengths)
        self._adapter_of[work_id] = adapter

    def next_group_done_s(self) -> float | None:
        """When the next group finishes [s], if nothing is admitted before."""
        if not self._groups:
            return None
        target = self._groups[0][0]
        t = max(self.clock_s, self.resume_s)
        progress, running, offset = self.progress, self.running, self.context_offset
        adapters = Counter(self.adapters)
        for end, _, work_id, seq_offset in self._seqs:
            k = max(end - progress, 0.0)
            alpha, _ = self._iteration(running, offset + running * progress, len(adapters))
            t += alpha * k + 0.5 * self.per_kv_s * self.slowdown * running * k * k
            if end >= target:
                return t
            progress, running, offset = end, running - 1, offset - seq_offset
            adapter = self._adapter_of[work_id]
            adapters[adapter] -= 1
            if not adapters[adapter]:
                del adapters[adapter]
        return t

    def pop_finished(self, now: float) -> list[int]:
        """Advance to ``now`` and return the work ids of groups whose last sample ended."""
        self.advance(now)
        limit = self.progress + _EPS * max(1.0, self.progress)
        while self._seqs and self._seqs[0][0] <= limit:
            self.progress = max(self.progress, self._seqs[0][0])
            self._end_sequence()
        done = []
        while self._groups and not self._left[self._groups[0][1]]:
            _, work_id = heapq.heappop(self._groups)
            del self._left[work_id], self._adapter_of[work_id]
            done.append(work_id)
        if not self.running:
            self.context_offset = 0.0
        return done
