"""Which engine a rollout group goes on, once the generation stage has picked its job
(:mod:`marlaas.core.generation`): the mechanism's choice (an engine that holds the group's
adapter, else the open engine with the most free sequences), or, for a policy that ranks
engines (``Policy.engine_key``), the policy's among the job's homes and a few open engines."""

from __future__ import annotations

import math
from collections.abc import Set as AbstractSet

from marlaas.core.cluster import AdapterKey, Cluster, Engine
from marlaas.core.free_engines import FreeEngines
from marlaas.core.jobs import JobState
from marlaas.core.policies import Policy

OPEN_TRIES = 4
"""Open engines offered to a policy that ranks engines, in the mechanism's order, before a
group waits (each is a search of the free-room index: placement stays cheap)."""

_NO_HOSTS: frozenset[int] = frozenset()
"""The hosts of an adapter that no engine holds."""


class EngineChoice:
    """Picks the engine for a group that needs ``seqs`` sequences, ``tokens`` KV tokens and
    ``adapter``, among the engines where it fits now (the cluster's, shared)."""

    def __init__(self, cluster: Cluster, policy: Policy, by_name: dict[str, JobState]) -> None:
        self.policy = policy
        self._by_name = by_name
        """The live jobs by name (the scheduler's map, shared)."""
        engines = cluster.engines
        self._engines = engines
        self._free = engines[0].directory.free if engines else FreeEngines(0)
        self._hosts = engines[0].directory.hosts if engines else {}
        self._max_seqs = engines[0].spec.max_seqs if engines else 0
        self._slots = engines[0].spec.adapter_slots if engines else 0
        self._kv_tokens = engines[0].spec.kv_tokens if engines else 0

    def by_mechanism(self, seqs: int, tokens: int, adapter: AdapterKey) -> Engine | None:
        """The engine to place a group on: one that holds its adapter first (the most free
        sequences, then the lowest index), else the open engine with the most free sequences,
        then the lowest index; None when no engine has room."""
        free = self._free
        if free.most_tokens < tokens:
            return None  # no engine has the room, whichever adapters it holds
        engines, hosts = self._engines, self._hosts.get(adapter)
        if not hosts:
            found = free.best(seqs, tokens)
            return None if found is None else engines[found]
        best, most = -1, -self._max_seqs - 1  # best: an engine index; most: -(its sequences)
        seqs_left, tokens_left = self._max_seqs - seqs, self._kv_tokens - tokens
        for index in hosts:  # engine.fits and engine.can_host, inline
            engine = engines[index]
            if (
                engine.tokens <= tokens_left
                and engine.seqs <= seqs_left
                and adapter not in engine.loading
                and (-engine.seqs > most or (-engine.seqs == most and index < best))
            ):
                best, most = index, -engine.seqs
        if best >= 0:
            return engines[best]
        found = free.best(seqs, tokens, hosts)
        return None if found is None else engines[found]

    def by_policy(self, seqs: int, tokens: int, adapter: AdapterKey) -> Engine | None:
        """The engine to place a group on when the policy ranks engines: the candidates are
        the engines that hold the adapter or another of the job's versions (its homes) and
        the first open engine with the free share the policy asks (``open_share``), in the
        mechanism's order (up to OPEN_TRIES, up to one already weighed), that the policy
        does not refuse; among those where the group fits now, the ones that hold the
        adapter ready first, then the policy's lowest engine_key (None: not there; an engine
        still loading the adapter ranks with those that need a load). When the best is still
        loading the adapter, the group waits for that load (its end offers the engine again)
        rather than load it on a second engine, unless the search finds an open engine the
        policy takes before the first one already weighed: the wait would leave that room
        idle and pile the job's groups on one engine.
        None when no candidate fits, the policy takes none, or the group waits."""
        engines, hosts, free = self._engines, self._hosts, self._free
        if free.most_tokens < tokens:
            return None  # no engine has the room, whichever adapters it holds
        name, version = adapter
        job = self._by_name[name]
        holding = hosts.get(adapter, _NO_HOSTS)
        homes: AbstractSet[int] = _NO_HOSTS  # read only: one version's hosts are not copied
        for held in range(max(job.start_version, version - 3), job.published + 1):
            held_by = hosts.get((name, held))
            if held_by:
                homes = held_by if not homes else homes | held_by
        policy = self.policy
        best: Engine | None = None
        best_key: tuple | None = None  # (not ready, rank, index): the lowest index on a tie
        best_loading = False
        count = len(homes)
        seqs_left, tokens_left, slots = self._max_seqs - seqs, self._kv_tokens - tokens, self._slots
        for index in homes:
            engine = engines[index]
            if engine.tokens > tokens_left or engine.seqs > seqs_left:  # engine.fits, inline
                continue
            resident = engine.resident  # engine.can_host, inline
            loading = False
            if adapter in resident:
                loading = adapter in engine.loading  # it will hold the adapter shortly
            elif len(resident) >= slots and not engine.unused:
                continue
            rank = policy.engine_key(job, engine, count)
            if rank is None:
                continue
            key = (index not in holding or loading, rank, index)  # ready first, then by rank
            if best_key is None or key < best_key:
                best, best_key, best_loading = engine, key, loading
        if best_key is not None and not best_key[0]:
            return best  # it holds the adapter, ready: no open engine is better
        share = policy.open_share(job, count)
        if share > 0:  # the room the policy asks of an open engine, rounded up
            seqs = max(seqs, math.ceil(self._max_seqs * share))
            tokens = max(tokens, math.ceil(self._kv_tokens * share))
        tries = OPEN_TRIES
        for found in free.in_order(seqs, tokens):  # open engines in the mechanism's order
            if found in homes or found in holding:
                break  # a candidate already weighed: no better open one
            engine = engines[found]
            rank = policy.engine_key(job, engine, count)
            if rank is not None:
                if best_loading or best_key is None or (True, rank) < best_key[:2]:
                    return engine
                break
            tries -= 1
            if not tries:
                break
        return None if best_loading else best  # the best is loading the adapter: wait for it
