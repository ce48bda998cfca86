"""Every step of an in-process vLLM engine, measured: what the engine model's terms are fitted on.

The simulator's engine (marlaas.sim.engine_model) charges a decode iteration ``base + per_seq
* n + per_kv_token * C + per_adapter * L`` and a prefill ``A * prefill_base + P /
prefill_rate``. A real run's event log holds only whole groups, whose spans mix many
iterations, other groups' prefills and, on a shared processor, the other engines' steps; the
engine's own steps say each term directly. :class:`StepMeter` reads the vLLM v1 scheduler's
requests around each ``engine.step()`` (on the engine thread) and keeps one
:class:`EngineStep` per step that computed anything: its span and, of the requests it
computed, the n decoding, the C context tokens they held, the L distinct adapters, the P
prompt tokens prefilled (prefix-cache hits left out: computed by an earlier request) and the A
groups those belong to (a group: one ``generate`` call, whose request ids begin alike,
:func:`group_of`).

A real run writes them as ``engine_steps.csv`` (:func:`steps_frame`: times on the run's
clock), which ``marlaas calibrate`` fits the engine terms on (marlaas.twin.decode_fit).
Engines out of this process (vLLM's AsyncLLM, Ray actors) are not measured.
"""

from __future__ import annotations

import time
from dataclasses import astuple, dataclass

import pandas as pd

ENGINE_STEPS_CSV = "engine_steps.csv"
COLUMNS = ("engine", "start_s", "duration_s", "decoding", "context_tokens", "adapters",
           "prefill_tokens", "prefills", "waiting")  # fmt: skip
READ = COLUMNS[:-1]
"""The columns ``marlaas calibrate`` reads (``waiting`` is not fitted; files of the first
measured runs lack it)."""


@dataclass(frozen=True, slots=True)
class EngineStep:
    """One engine step: when (``start`` on the monotonic clock [s]) and how long [s], and
    what it computed (see the module docstring)."""

    start: float
    duration_s: float
    decoding: int
    context_tokens: int
    adapters: int
    prefill_tokens: int
    prefills: int
    waiting: int = 0
    """Requests the engine held but did not compute in the step (vLLM's own queue: its
    token budget, KV cache or LoRA slots full)."""


class StepMeter:
    """Measures the steps of one in-process engine (vLLM v1 ``LLMEngine``): what its scheduler
    scheduled (``num_scheduled_tokens``: the tokens each request computes, prefix-cache hits
    left out), read by wrapping the scheduler's ``schedule``."""

    def __init__(self, engine) -> None:
        self.steps: list[EngineStep] = []
        self._scheduler = scheduler = engine.engine_core.engine_core.scheduler
        self._scheduled: tuple[int, ...] | None = None
        schedule = scheduler.schedule

        def measured(*args, **kwargs):
            held = {rid: r.num_computed_tokens for rid, r in scheduler.requests.items()}
            output = schedule(*args, **kwargs)
            self._scheduled = self._describe(output.num_scheduled_tokens, held)
            return output

        scheduler.schedule = measured

    def _describe(self, scheduled: dict[str, int], held: dict[str, int]):
        decoding = context = prefill = 0
        adapters, groups = set(), set()
        for rid, tokens in scheduled.items():
            request = self._scheduler.requests[rid]
            if request.lora_request is not None:
                adapters.add(request.lora_request.lora_int_id)
            done = held.get(rid, 0)
            if done >= request.num_prompt_tokens:  # decoding
                decoding += 1
                context += done
            else:
                prefill += tokens
                groups.add(group_of(rid))
        waiting = len(self._scheduler.requests) - len(scheduled)
        return decoding, context, len(adapters), prefill, len(groups), waiting

    def step(self, run_step):
        """``run_step()`` (the engine's step), measured; returns what it returns."""
        self._scheduled = None
        start = time.monotonic()
        out = run_step()
        duration = time.monotonic() - start
        if self._scheduled is not None and (self._scheduled[0] or self._scheduled[3]):
            self.steps.append(EngineStep(start, duration, *self._scheduled))
        return out


def group_of(request_id: str) -> str:
    """The group of a request: its id's first two ``-``-separated fields (``marlaas-<call>``,
    which VLLMGenerator gives every request of one ``generate`` call; vLLM appends its own
    suffix to the id)."""
    return "-".join(request_id.split("-", 2)[:2])


def steps_frame(steps: dict[str, list[EngineStep]], zero: float, offset_s: float = 0.0):
    """One row per step of every engine (``steps``: engine name -> its steps), ``start_s`` on
    the run's clock (monotonic ``zero``, plus ``offset_s``: a resumed run's earlier parts);
    steps before the clock (the warm-up, the yardstick) left out; the yardstick timed after
    the work (``RealExecutor.yardstick_again``) is not in a frame read before it."""
    rows = [
        (engine, s.start - zero + offset_s, *astuple(s)[1:])
        for engine, measured in steps.items() for s in measured if s.start >= zero
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=list(COLUMNS))
