"""The environment interface: one episode per instance, async so real latency overlaps."""

from __future__ import annotations

import abc
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from marlaas.datasets import Problem


@dataclass(frozen=True, slots=True)
class StepResult:
    """What the environment answers to one action."""

    observation: str
    """Text to append to the conversation before the next model turn ("" when done)."""
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class Environment(abc.ABC):
    """An episode of a task: `reset(seed)` gives the prompt, `step(action)` scores model output.

    One instance runs one episode at a time; `reset` starts a new one. Options come as a dict
    (`args`), validated by each environment; `options` names the ones it takes, so that a
    workload with a misspelt option is refused on load. Everything random is drawn from `seed`,
    so an episode is reproducible. Latency beyond the environment's own computation is the
    workload's `env.latency_s`, which the executor waits: environments do not sleep.
    `close()` releases what an instance holds once its episode is over (optional).
    """

    options: ClassVar[tuple[str, ...] | None] = None
    """The option names this environment reads (None: not declared, nothing is refused)."""
    needs_dataset: ClassVar[bool] = False
    """True: its prompts and reference answers come from the job's dataset, through
    ``reset_problem`` (a workload refuses such a job without a dataset, and a dataset on a job
    whose environment draws its own prompts)."""

    @classmethod
    def check_runtime(cls) -> None:
        """Raise (a RuntimeError naming what is missing) when this machine cannot run the
        environment for real, e.g. a code sandbox without its isolation tool. A real run calls
        it before it starts; validating options and simulating do not."""
        return None

    @classmethod
    def check_reference_answer(cls, answer: str) -> None:
        """Raise a ValueError saying why this environment cannot score a dataset's reference
        ``answer`` (e.g. ``regex``'s answer that is no regular expression). Loading a workload
        calls it on every row of a job's dataset when a class overrides it, so that a bad row
        is refused, naming its file, row and column, before any run starts; the default
        accepts every answer."""
        return None

    def __init__(self, args: dict[str, Any] | None = None) -> None:
        self.args: dict[str, Any] = dict(args or {})

    @abc.abstractmethod
    async def reset(self, seed: int) -> str:
        """Start an episode; return the prompt (observation) text."""

    async def reset_problem(self, problem: Problem) -> str:
        """Start an episode on a dataset's ``problem``; return the prompt text. Only the
        environments with ``needs_dataset`` take one."""
        raise TypeError(f"{type(self).__name__} draws its own prompts; it takes no dataset")

    @abc.abstractmethod
    async def step(self, action: str) -> StepResult:
        """Score one model turn `action`."""

    async def close(self) -> None:
        """Release what this instance holds (a subprocess, a connection, a temporary folder):
        a real run calls it once per instance it made, when the instance's episode is over
        (its group trained or given up, its job finished, cancelled or failed) or the run
        stops (its end, Ctrl-C, SIGTERM, the service's stop). It runs where the instance's
        calls ran, within the job's ``env.timeout_s`` and at most
        :data:`marlaas.executors.env_instances.CLOSE_TIMEOUT_S`; what it raises, or a close
        that does not return in time, is one warning naming the environment and the job, and
        the run goes on. The default holds nothing and does nothing."""
        return None

    def _arg(self, name: str, default: Any, kind: type | tuple[type, ...],
             low: float | None = None, high: float | None = None) -> Any:  # fmt: skip
        """Read option `name` from args, checking its type (bool is not accepted as a number)
        and, for a number, that it is finite and within [`low`, `high`]: a value the episode
        cannot use (an empty range to draw from, a prompt of a billion characters, a NaN
        reward) is refused when the job is checked, not when its first episode runs."""
        value = self.args.get(name, default)
        bad_bool = isinstance(value, bool) and kind is not bool and bool not in _as_tuple(kind)
        if bad_bool or not isinstance(value, kind):
            raise ValueError(f"{type(self).__name__}: option {name!r} must be "
                             f"{_kind_name(kind)}, got {value!r:.80}")  # fmt: skip
        if low is None and high is None:
            return value
        low = -math.inf if low is None else low
        high = math.inf if high is None else high
        finite = isinstance(value, int) or math.isfinite(value)  # (an int may be past float's)
        if not (finite and low <= value <= high):
            raise ValueError(f"{type(self).__name__}: option {name!r} must be from {low:,} to "
                             f"{high:,}, got {value!r:.80}")  # fmt: skip
        return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    """What an option of ``kind`` is, in words: ``a whole number``, ``a number``."""
    kinds = set(_as_tuple(kind))
    if kinds == {int}:
        return "a whole number"
    if kinds <= {int, float}:
        return "a number"
    names = {str: "text", bool: "true or false", list: "a list", dict: "a mapping"}
    return " or ".join(names.get(k, k.__name__) for k in _as_tuple(kind))


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def parse_number(text: str) -> float | None:
    """The answer in `text`: the first number after the last "=", else the first number.

    "14 + 44 = 58" answers 58 (a worked answer counts; the format bonus rewards a bare one),
    "58" answers 58, "no idea" answers None.
    """
    _, equals, tail = text.rpartition("=")
    match = _NUMBER.search(tail if equals else text)
    if match is None and equals:
        match = _NUMBER.search(text)
    return float(match.group()) if match else None


def is_bare_number(text: str) -> bool:
    """True when `text` (stripped) is just a number."""
    return _NUMBER.fullmatch(text.strip()) is not None
