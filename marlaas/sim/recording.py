"""What a real run did, for a replay to do the same: each group turn's prompt and generated
lengths, each environment step's duration and the groups dropped as all alike, read from
the real run's event log.

The log keeps a group turn's total tokens and its longest sample's: the replay gives one sample
the longest length and shares the rest equally among the others (the group ends when its
longest sample does; the others leave the batch earlier)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from marlaas.eventlog import DONE_OUTCOMES

Key = tuple[str, int, int]
"""(job, group, turn)."""


@dataclass(frozen=True)
class Recording:
    """Per (job, group, turn): (total, longest) tokens of the generation, seconds of the env
    step."""

    tokens: dict[Key, tuple[int, int]] = field(default_factory=dict)
    env_s: dict[Key, float] = field(default_factory=dict)
    prompt_tokens: dict[Key, float] = field(default_factory=dict)
    """Context tokens per sequence each turn started from (where the log has them)."""
    resampled: frozenset[tuple[str, int]] = frozenset()
    """(job, group) of the groups the run dropped as all alike (rl.resample_alike)."""

    def lengths(self, key: Key, seqs: int, otherwise: np.ndarray) -> np.ndarray:
        """Each sample's tokens for a replayed turn (``otherwise`` when not recorded)."""
        if key not in self.tokens:
            return otherwise
        total, longest = self.tokens[key]
        if longest < 0 or seqs == 1:  # a log without the longest sample: the mean for all
            return np.full(seqs, total / seqs)
        rest = max(total - longest, 0) / (seqs - 1)
        return np.array([longest] + [rest] * (seqs - 1), dtype=float)

    @classmethod
    def from_events(cls, events: pd.DataFrame) -> Recording:
        """The finished generate and env rows of an event log (one row per piece of work)."""
        ok = events[events["outcome"].isin(DONE_OUTCOMES)]
        gen = ok[ok["kind"] == "generate"]
        env = ok[ok["kind"] == "env"]
        dropped = env[env["outcome"] == "resampled"]
        resampled = frozenset(zip(dropped["job"], dropped["group"].astype(int), strict=True))
        tokens = {
            (j, int(g), int(t)): (int(tok), int(longest))
            for j, g, t, tok, longest in zip(
                gen["job"],
                gen["group"],
                gen["turn"],
                gen["tokens"],
                gen["longest_tokens"],
                strict=True,
            )
        }
        prompts = {
            (j, int(g), int(t)): float(p)
            for j, g, t, p in zip(
                gen["job"], gen["group"], gen["turn"], gen["prompt_tokens"], strict=True
            )
            if p >= 0
        }
        env_s = {
            (j, int(g), int(t)): end - start
            for j, g, t, start, end in zip(
                env["job"], env["group"], env["turn"], env["start_s"], env["end_s"], strict=True
            )
        }
        return cls(tokens, env_s, prompts, resampled)
