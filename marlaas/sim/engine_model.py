"""Continuous-batching decode on one inference engine, advanced analytically.

Every running sequence gains one token per decode iteration. One iteration takes

    dt(n, C, L) = base + per_seq * n + per_kv_token * C + per_adapter * L     [s]

for n running sequences holding C context tokens in all, with L distinct adapters (a prompt
shared by a group's samples counts once per sample: each sample's attention reads it). Between two
changes of the batch (an admission, or a sequence finishing) n and L are fixed and C grows by n
per iteration, so the time for k iterations is a quadratic in k, solved in closed form.
Engines that share one processor (cluster.shared_compute) run ``slowdown`` times slower while
others decode beside them (they take turns: the simulator sets it as they start and stop) and
pause while another prefills or an adapter loads.

Sequences finishing inside the batch are folded in piecewise without simulation events; the
engine only wakes the simulator when a whole group (its slowest sample) is done. The cost of
simulating an engine therefore grows with the number of sequences, not of tokens, and the
number of simulation events with the number of groups. Admitting a group first runs its
prefill, pausing decode for a fixed cost plus prompt tokens / prefill rate (a prompt the
group's samples share, cluster.engine.prefix_caching, is prefilled once).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from marlaas.sim.cost_model import CostModel

_EPS = 1e-7


class _Users:
    """The running sequences of one adapter on an engine."""

    def __init__(self, adapter: object) -> None:
        self.adapter = adapter
        self.count = 0


class _Group:
    """What the running sequences of one group share: their context offset (prompt - progress
    at admission) [tokens], their adapter's users, how many of them still run, and the
    progress at their admission with their lengths [tokens] (what a stopped group had
    generated)."""

    def __init__(
        self, offset: float, users: _Users, left: int, start: float, lengths: list
    ) -> None:
        self.offset = offset
        self.users = users
        self.left = left
        self.start = start
        self.lengths = lengths


class EngineModel:
    """Fluid model of one engine's decode; ``progress`` counts decode iterations done."""

    def __init__(self, cost: CostModel) -> None:
        self.base_s = cost.decode_base_ms / 1e3
        self.per_seq_s = cost.decode_per_seq_ms / 1e3
        self.per_kv_s = cost.decode_per_kv_token_ms / 1e3
        self.per_adapter_s = cost.decode_per_adapter_ms / 1e3
        self.prefill_s_per_token = 1.0 / cost.prefill_tokens_per_s
        self.prefill_base_s = cost.prefill_base_ms / 1e3
        self.progress = 0.0
        """Decode iterations done since the engine started."""
        self.clock_s = 0.0
        """Simulation time [s] at which decode reached ``progress``."""
        self.resume_s = 0.0
        """Decode is paused for a prefill or an adapter load until this time [s]."""
        self.running = 0
        self.context_offset = 0.0
        """Sum over running sequences of (prompt - progress at admission) [tokens]; the batch
        holds context_offset + running * progress tokens."""
        self.adapters: dict[object, _Users] = {}
        """Each distinct adapter of the running sequences, with how many of them use it."""
        self.slowdown = 1.0
        """Factor on every iteration time (engines taking turns on one processor; 1 = alone)."""
        self.prefill_slowdown = 1.0
        """Factor on every prefill time (1 = alone)."""
        self._seqs: list[tuple[float, int, _Group]] = []
        """Running sequences sorted by (progress at which they end, seq id), with their group
        (one object per group: what a sequence's end changes is read without a lookup)."""
        self._groups: list[tuple[float, int, _Group]] = []
        """Heap of (progress at which the group's slowest sample ends, work id, group)."""
        self._seq_ids = 0

    def iteration_s(self, now: float) -> float:
        """How long a decode iteration takes at ``now`` [s] (0 when nothing decodes)."""
        self.advance(now)
        if not self.running:
            return 0.0
        context = self.context_offset + self.running * self.progress
        alpha = self.base_s + self.per_seq_s * self.running + self.per_kv_s * context
        return (alpha + self.per_adapter_s * len(self.adapters)) * self.slowdown

    def set_slowdown(self, now: float, factor: float, prefill_factor: float) -> None:
        """From ``now`` [s] on, every iteration takes ``factor`` times as long, and every
        prefill ``prefill_factor`` times."""
        self.advance(now)
        self.slowdown = factor
        self.prefill_slowdown = prefill_factor

    def pause(self, now: float, seconds: float) -> None:
        """Decode waits ``seconds`` more from ``now`` (or from the end of a pause already
        under way): another engine's prefill, or an adapter load, on the thread they take
        turns on. Nothing waits where nothing decodes once ``now`` is reached (the last
        sequences may end at ``now`` itself)."""
        self.advance(now)
        if not self.running:
            return
        resume = self.resume_s
        self.resume_s = (now if now > resume else resume) + seconds

    def _end_sequence(self) -> None:
        group = self._seqs.pop(0)[2]
        self.running -= 1
        self.context_offset -= group.offset
        group.left -= 1
        users = group.users
        users.count -= 1
        if not users.count:
            del self.adapters[users.adapter]

    def advance(self, now: float, settle: bool = False) -> None:
        """Move decode forward to ``now`` [s], ending the sequences that finish on the way;
        with ``settle``, also those whose time left does not move a clock at ``now`` (below
        its float resolution: near 2^34 s, 1.7e10 s, one step is 3.8e-6 s)."""
        clock, resume = self.clock_s, self.resume_s
        start = resume if resume > clock else clock  # max(clock, resume), without a call
        if self.running and (now > start or (settle and now == start)):
            base, per_seq, per_kv = self.base_s, self.per_seq_s, self.per_kv_s
            per_adapter, slowdown, seqs = self.per_adapter_s, self.slowdown, self._seqs
            progress, offset, adapters = self.progress, self.context_offset, self.adapters
            # the counts as floats: the same values (exact), and float-only arithmetic is
            # the interpreter's fast path (an int operand takes its generic one)
            running, distinct = float(self.running), float(len(adapters))
            while running and (now > start or settle):
                # dt(n, C, L) of the module docstring now (alpha), and its growth per iteration
                context = offset + running * progress
                alpha = base + per_seq * running + per_kv * context
                alpha = (alpha + per_adapter * distinct) * slowdown
                slope = per_kv * running * slowdown
                end = seqs[0][0]
                k = end - progress
                needed = alpha * k + 0.5 * slope * k * k
                if start + needed > now:
                    if now > start:  # solve alpha k + slope k^2 / 2 = dt, in the stable form
                        dt = now - start
                        progress += 2.0 * dt / (alpha + math.sqrt(alpha * alpha + 2.0 * slope * dt))
                    break
                progress = end  # the first sequence ends (as _end_sequence, inline)
                start += needed
                group = seqs.pop(0)[2]
                running -= 1.0
                offset -= group.offset
                group.left -= 1
                users = group.users
                users.count -= 1
                if not users.count:
                    del adapters[users.adapter]
                    distinct -= 1.0
            self.progress, self.running, self.context_offset = progress, int(running), offset
        if now > clock:
            self.clock_s = now
        if not self.running:
            self.context_offset = 0.0

    def admit(
        self, now: float, work_id: int, lengths, prompt: float, adapter, shared: float = 0.0
    ) -> float:
        """Start a group: ``lengths`` [tokens] per sample (a sequence or an array),
        ``prompt`` context per sample, of which ``shared`` tokens are the same for every
        sample and prefilled once (prefix caching); return its prefill's time [s]."""
        self.advance(now)
        if isinstance(lengths, np.ndarray):
            lengths = lengths.tolist()
        n = len(lengths)
        tokens = prompt * n - shared * (n - 1)
        prefill_s = (
            self.prefill_base_s + tokens * self.prefill_s_per_token
        ) * self.prefill_slowdown
        resume = self.resume_s
        self.resume_s = (now if now > resume else resume) + prefill_s
        progress, first = self.progress, self._seq_ids + 1
        offset = prompt - progress
        users = self.adapters.get(adapter)
        if users is None:
            users = self.adapters[adapter] = _Users(adapter)
        users.count += n
        group = _Group(offset, users, n, progress, lengths)
        self._seqs += [(progress + length, first + k, group) for k, length in enumerate(lengths)]
        self._seqs.sort()  # the same order as inserting one by one: seq ids are unique
        self._seq_ids += n
        heapq.heappush(self._groups, (progress + float(max(lengths)), work_id, group))
        self.running += n
        self.context_offset += offset * n
        return prefill_s

    def abort(self, now: float, work_id: int) -> tuple[int, int] | None:
        """Stop group ``work_id`` at ``now`` [s]: its running sequences leave the batch (their
        KV and batch room are free; the iterations after ``now`` cost what the smaller batch
        costs). Returns (tokens it generated, its longest sample's tokens) [tokens], or None
        when no such group runs. A prefill under way is not shortened."""
        self.advance(now)
        groups = self._groups
        found = [entry for entry in groups if entry[1] == work_id]
        if not found:
            return None
        groups.remove(found[0])  # work ids are unique: the first field that differs
        heapq.heapify(groups)
        group = found[0][2]
        if group.left:
            self._seqs = [seq for seq in self._seqs if seq[2] is not group]
            users = group.users
            self.running -= group.left
            self.context_offset -= group.offset * group.left
            users.count -= group.left
            if not users.count:
                del self.adapters[users.adapter]
            group.left = 0
        if not self.running:
            self.context_offset = 0.0
        done = math.floor(max(self.progress - group.start, 0.0) + _EPS)  # iterations it ran
        made = [length if length < done else done for length in group.lengths]
        return sum(made), max(made)

    @property
    def groups(self) -> int:
        """Groups on the engine whose completion is not reported yet."""
        return len(self._groups)

    def next_group_done_s(self) -> float | None:
        """When the next group finishes [s], if nothing is admitted before."""
        if not self._groups:
            return None
        target = self._groups[0][0]
        clock, resume = self.clock_s, self.resume_s
        t = resume if resume > clock else clock
        progress, offset = self.progress, self.context_offset
        running, distinct = float(self.running), float(len(self.adapters))  # as in advance
        users_left: dict[_Users, int] = {}  # adapters met so far -> their sequences left
        base, per_seq, per_kv = self.base_s, self.per_seq_s, self.per_kv_s
        per_adapter, slowdown = self.per_adapter_s, self.slowdown
        growth = 0.5 * per_kv * slowdown  # the first factors of the growth term, as below
        for end, _, group in self._seqs:
            k = end - progress
            if k < 0.0:
                k = 0.0
            context = offset + running * progress  # as in advance: the same floats
            alpha = base + per_seq * running + per_kv * context
            alpha = (alpha + per_adapter * distinct) * slowdown
            t += alpha * k + growth * running * k * k  # 0.5 * per_kv * slowdown * running ...
            if end >= target:
                return t
            progress, running, offset = end, running - 1.0, offset - group.offset
            users = group.users
            count = users_left.get(users, users.count) - 1
            users_left[users] = count
            if not count:
                distinct -= 1.0
        return t

    def pop_finished(self, now: float) -> list[int]:
        """Advance to ``now`` and return the work ids of groups whose last sample ended.

        ``now`` is a group's end as :meth:`next_group_done_s` computed it; where the time its
        last iterations take is below the clock's resolution at ``now``, that end is ``now``
        itself, no time passes, and :meth:`advance` alone would end nothing: the wake-up would
        be scheduled at ``now`` again, for ever. Those sequences end here (settled)."""
        self.advance(now)
        limit = self.progress + _EPS * max(1.0, self.progress)
        seqs = self._seqs
        while seqs and seqs[0][0] <= limit:
            if seqs[0][0] > self.progress:
                self.progress = seqs[0][0]
            self._end_sequence()
        if seqs:
            self.advance(now, settle=True)  # every one left ends later: its time left is > 0
        done = []
        groups = self._groups
        while groups and not groups[0][2].left:
            done.append(heapq.heappop(groups)[1])
        if not self.running:
            self.context_offset = 0.0
        return done
