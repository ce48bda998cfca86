"""Stand-ins for what an episode runner drives besides its environments: a chat format of one
token per character and an engine that samples one token per sequence (tests of environment
calls that need no model)."""

from __future__ import annotations


class CharFormat:
    """A chat format of one token per character (its code), no template."""

    def prompt(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def observation(self, text: str, stopped: bool) -> list[int]:
        return [ord(c) for c in text]


class OneTokenEngine:
    """An engine's stand-in that samples one token per sequence, ending for ``finish``; a
    generator's for ``marlaas evaluate`` too (its tokenizer: none)."""

    tokenizer = None

    def __init__(self, finish: str = "stop") -> None:
        self.finish = finish

    async def generate(self, job, version, prompts, n, max_new_tokens, temperature, seed):
        from marlaas.executors.rollout import Completion

        return [[Completion(tuple(p), (1,), (0.0,), "x", self.finish) for _ in range(n)]
                for p in prompts]  # fmt: skip
