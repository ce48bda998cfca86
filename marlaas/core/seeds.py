"""Seeded generators in bulk: ``numpy.random.default_rng([*prefix, i])`` for many ``i``.

Building a generator from a list of ints costs about 7 µs (numpy hashes the list with its
SeedSequence, then seeds a PCG64 from it); a run that seeds one per prompt group pays it tens
of thousands of times. :class:`SeededBlock` computes the PCG64 states of a block of
consecutive ``i`` at once, with SeedSequence's hash written over numpy arrays (32-bit words
kept in uint64, masked after each product), and hands out one reused generator set to the
state of ``i``: the same numbers as ``default_rng([*prefix, i])``, for about a third of the
cost. The constants and steps are numpy's (numpy/random/bit_generator.pyx: SeedSequence's
``mix_entropy`` and ``generate_state``; numpy/random/src/pcg64: ``pcg64_set_seed``);
tests/core/test_seeds.py checks the states against numpy's own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MASK32 = 0xFFFFFFFF
INIT_A, MULT_A = 0x43B0D7E5, 0x931E8875
"""SeedSequence's hash of the entropy into its pool."""
INIT_B, MULT_B = 0x8B51F9DD, 0x58F38DED
"""SeedSequence's hash of its pool into the generated words."""
MIX_MULT_L, MIX_MULT_R = 0xCA01F9DD, 0x4973F715
POOL_SIZE = 4
"""SeedSequence's pool of 32-bit words."""
PCG64_MULT = 0x2360ED051FC65DA44385DF649FCCF645
MASK128 = (1 << 128) - 1


def _words(value: int) -> list[int]:
    """An int as SeedSequence reads it: 32-bit words, least significant first."""
    if value < 0:
        raise ValueError(f"seed words must be non-negative, got {value}")
    out = [value & MASK32]
    value >>= 32
    while value:
        out.append(value & MASK32)
        value >>= 32
    return out


def pcg64_states(prefix: Sequence[int], last: np.ndarray) -> list[tuple[int, int]]:
    """The PCG64 (state, increment) of ``default_rng([*prefix, i])`` for each ``i`` of
    ``last`` (non-negative ints below 2**32)."""
    if len(last) and (int(last.min()) < 0 or int(last.max()) > MASK32):
        raise ValueError("the varying seed word must lie in [0, 2**32)")
    n, mask = len(last), np.uint64(MASK32)
    entropy = [np.full(n, w, dtype=np.uint64) for p in prefix for w in _words(int(p))]
    entropy.append(np.asarray(last, dtype=np.uint64))
    hash_const = INIT_A

    def hashmix(value: np.ndarray) -> np.ndarray:
        nonlocal hash_const
        value = value ^ np.uint64(hash_const)
        hash_const = (hash_const * MULT_A) & MASK32
        value = (value * np.uint64(hash_const)) & mask
        return value ^ (value >> np.uint64(16))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        result = (np.uint64(MIX_MULT_L) * x - np.uint64(MIX_MULT_R) * y) & mask
        return result ^ (result >> np.uint64(16))

    zero = np.zeros(n, dtype=np.uint64)
    pool = [hashmix(entropy[i] if i < len(entropy) else zero) for i in range(POOL_SIZE)]
    for src in range(POOL_SIZE):
        for dst in range(POOL_SIZE):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for src in range(POOL_SIZE, len(entropy)):
        for dst in range(POOL_SIZE):
            pool[dst] = mix(pool[dst], hashmix(entropy[src]))
    hash_const, words = INIT_B, []
    for i in range(2 * POOL_SIZE):  # generate_state(4, uint64): 8 words, little-endian pairs
        value = pool[i % POOL_SIZE] ^ np.uint64(hash_const)
        hash_const = (hash_const * MULT_B) & MASK32
        value = (value * np.uint64(hash_const)) & mask
        words.append(value ^ (value >> np.uint64(16)))
    seeds = [(words[2 * k] | (words[2 * k + 1] << np.uint64(32))).tolist() for k in range(4)]
    states = []
    for high, low, inc_high, inc_low in zip(*seeds, strict=True):  # pcg64_set_seed
        inc = ((((inc_high << 64) | inc_low) << 1) | 1) & MASK128
        state = (inc + ((high << 64) | low)) & MASK128
        states.append(((state * PCG64_MULT + inc) & MASK128, inc))
    return states


class SeededBlock:
    """``default_rng([*prefix, i])`` for ``i`` asked in (mostly) increasing order, from
    blocks of ``size`` states computed at once; an ``i`` before the current block gets a
    generator of its own."""

    def __init__(self, prefix: Sequence[int], size: int = 128) -> None:
        self.prefix = [int(p) for p in prefix]
        self.size = size
        self._first = 0
        self._states: list[tuple[int, int]] = []
        self._bits = np.random.PCG64(0)
        self._rng = np.random.Generator(self._bits)

    def rng(self, i: int) -> np.random.Generator:
        """A generator in the state of ``default_rng([*prefix, i])`` (the same object again
        and again: use it before asking for the next one)."""
        offset = i - self._first
        if offset < 0 or i > MASK32:
            return np.random.default_rng([*self.prefix, i])
        if offset >= len(self._states):
            self._first, offset = i, 0
            self._states = pcg64_states(self.prefix, np.arange(i, min(i + self.size, MASK32 + 1)))
        state, inc = self._states[offset]
        self._bits.state = {
            "bit_generator": "PCG64", "state": {"state": state, "inc": inc},
            "has_uint32": 0, "uinteger": 0,
        }  # fmt: skip
        return self._rng
