"""An aborted generation (its call cancelled: the real executor's AbortGeneration) stops in
the engine: vLLM aborts its requests before its next step, the HF generator stops its rows
at the next decode step; the other calls in the same batches get what they get alone."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

LONG, SHORT = ["a long answer"], ["hi"]
CANCEL_AFTER_STEPS = 20
"""Decode steps of a long call (400 tokens) before the test cancels it (or its job)."""
WAIT_S = 120.0
"""The longest a test waits for the long call to reach the point of its cancel [s]."""
HOLD_S = 60.0
"""The longest the HF generator's step :data:`CANCEL_AFTER_STEPS` is held for the cancel to
stop its rows [s] (a bound for a loaded machine: past it the test fails, naming it)."""


class HeldAtTheCancel:
    """The HF generator's decode steps counted (``share_threads`` is called once a step), and
    its step :data:`CANCEL_AFTER_STEPS` held on its thread until the rows of its batch that
    ``cancelled`` picks are stopped (their call cancelled), at most :data:`HOLD_S`;
    ``on_hold`` is called as the hold begins (it may send the cancel). The steps after the
    cancel are then those of the engine, whatever the pace of the thread that cancels
    (counted without the hold, a loaded machine could let the batch run on before the cancel
    reached it)."""

    def __init__(self, monkeypatch, cancelled=lambda row: True, on_hold=lambda: None) -> None:
        from marlaas.executors import hf_generator

        self.steps, self.at_cancel, self.stopped = 0, None, None
        self.armed = True
        """Whether steps are counted (and the hold comes)."""
        share, sample = hf_generator.share_threads, hf_generator.HFGenerator._sample_locked
        batch: list = []

        def sample_locked(generator, rows):
            batch[:] = rows
            return sample(generator, rows)

        def counted(*args, **kwargs):
            if self.armed:
                self.steps += 1
                if self.steps == CANCEL_AFTER_STEPS:
                    self._hold([r for r in batch if cancelled(r)], on_hold)
            return share(*args, **kwargs)

        monkeypatch.setattr(hf_generator.HFGenerator, "_sample_locked", sample_locked)
        monkeypatch.setattr(hf_generator, "share_threads", counted)

    def _hold(self, rows: list, on_hold) -> None:
        self.at_cancel = self.steps
        on_hold()
        deadline = time.monotonic() + HOLD_S
        while not all(r.stopped for r in rows) and time.monotonic() < deadline:
            time.sleep(0.005)
        self.stopped = bool(rows) and all(r.stopped for r in rows)

    def check(self) -> None:
        """The cancel stopped the rows at the held step, and the batch ended within a quarter
        of the ~380 steps it had left (it ends at that step)."""
        assert self.at_cancel is not None, f"the calls ended in {self.steps} steps, uncut"
        assert self.stopped, f"the cancel did not stop the rows within {HOLD_S:g} s"
        assert self.steps - self.at_cancel < (400 - CANCEL_AFTER_STEPS) / 4, vars(self)


async def long_and_short(gen, long_tokens: int, running) -> tuple[list, float]:
    """A long call and a short one at once; the long one is cancelled once
    ``running()`` says it decodes. Returns (the short call's groups, seconds from the cancel
    until the generator has nothing running)."""
    long = asyncio.create_task(gen.generate(None, 0, LONG, *long_call(long_tokens)))
    short = asyncio.create_task(gen.generate(None, 0, SHORT, 2, 8, temperature=1.0, seed=3))
    deadline = time.monotonic() + WAIT_S
    while not running():
        assert not long.done(), "the long call ended before it was to be cancelled"
        assert time.monotonic() < deadline, f"the long call did not decode within {WAIT_S:g} s"
        await asyncio.sleep(0.001)
    assert not long.done()
    long.cancel()
    cancelled_at = time.monotonic()
    with contextlib.suppress(asyncio.CancelledError):
        await long
    groups = await short
    await idle(gen)
    return groups, time.monotonic() - cancelled_at


def long_call(tokens: int) -> tuple:
    """(samples, max_new_tokens, temperature, seed) of the long call: seeded so that one of
    its samples runs to the cap on the tiny model (greedy ends after 33 tokens)."""
    return 4, tokens, 1.0, 11


async def idle(gen) -> None:
    """Wait until the generator runs nothing (HF: its batch worker; vLLM: its engine pump)."""
    task = getattr(gen, "_worker", None) or getattr(gen, "_pump_task", None)
    if task is not None:
        await task


@pytest.fixture(scope="module")
def hf(tiny_model_dir):
    from marlaas.executors.hf_generator import HFGenerator

    return HFGenerator(tiny_model_dir)


def test_hf_an_aborted_call_stops_sampling_at_the_next_step(hf, monkeypatch):
    """Counted in the generator's decode steps, not in seconds: the long call is cancelled at
    its step CANCEL_AFTER_STEPS, held there until the cancel stopped its rows (it was at a
    tenth of its time alone, and a machine that decodes it in under 0.5 s failed the test),
    and the batch must end there."""
    held = HeldAtTheCancel(monkeypatch, cancelled=lambda row: row.max_new_tokens == 400)
    held.armed = False
    alone = asyncio.run(hf.generate(None, 0, SHORT, 2, 8, temperature=1.0, seed=3))
    groups = asyncio.run(hf.generate(None, 0, LONG, *long_call(400)))
    assert max(len(c.completion_ids) for c in groups[0]) == 400  # long enough to be cut
    held.armed = True
    groups, _ = asyncio.run(long_and_short(hf, 400, lambda: held.at_cancel is not None))
    held.check()  # the batch ended at the cancel, not after the ~380 steps left to decode
    assert [c.completion_ids for c in groups[0]] == [c.completion_ids for c in alone[0]]


def test_hf_rows_of_a_cancelled_call_in_a_batch_not_started_are_never_sampled(hf):
    from marlaas.executors.hf_generator import _Row

    row = _Row("__base__", [1, 2, 3], 0, 50, 1.0, None, -1, stopped=True)
    before = hf.batches_run
    (completion,) = hf._sample([row])
    assert completion.completion_ids == () and hf.batches_run == before


@pytest.mark.slow
def test_vllm_an_aborted_call_leaves_the_engine_before_its_next_step(vllm_generator):
    gen = vllm_generator
    alone = asyncio.run(gen.generate(None, 0, SHORT, 2, 8, temperature=1.0, seed=3))
    steps_before = len(gen.meter.steps)
    asyncio.run(gen.generate(None, 0, LONG, *long_call(100)))
    whole = len(gen.meter.steps) - steps_before  # a step decodes one token of each request
    assert whole >= 50, "the long call must run long enough to be cut"
    steps_before = len(gen.meter.steps)
    groups, _ = asyncio.run(
        long_and_short(gen, 100, lambda: len(gen.meter.steps) >= steps_before + 3)
    )
    assert gen.engine.get_num_unfinished_requests() == 0 and not gen._waiting
    assert [c.completion_ids for c in groups[0]] == [c.completion_ids for c in alone[0]]
    assert len(gen.meter.steps) - steps_before < whole / 2  # the long requests were cut


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_a_real_run_cancelled_during_a_long_generation_ends_at_the_cancel(
    tiny_model_dir, tmp_path, backend, monkeypatch
):
    """A real run whose only job is cancelled while its groups decode 400 tokens each: the
    engine stops them, and the job ends right after the cancel, not when they would have.
    The cancel comes after the engine's first CANCEL_AFTER_STEPS decode steps of the run, and
    the steps after it are counted: a cancel 1 s after the groups began (as it was) could
    come after their end on a fast machine, and a job's end within 0.5 s of the cancel is a
    wall-clock bound a loaded machine can exceed."""
    if backend == "vllm":
        try:
            import vllm  # noqa: F401
        except Exception as exc:
            pytest.skip(f"vllm not importable: {exc}")
    from marlaas.core.scheduler import Scheduler
    from marlaas.core.work import AbortGeneration, Generate
    from marlaas.drive import drive
    from marlaas.drive.inbox import Cancel, Inbox, Submit
    from marlaas.eventlog import records_to_frame
    from marlaas.executors.adapter_store import AdapterStore
    from marlaas.executors.backends import EngineSizing
    from marlaas.executors.local import LocalExecutor
    from tests.core.fixed_driver import Watched
    from tests.executors.test_driver import tiny_workload

    workload = tiny_workload(tiny_model_dir, **{
        "jobs.emit-a.rl.max_new_tokens": 400, "jobs.emit-a.rl.steps": 2,
        "jobs.emit-a.response_tokens": {"dist": "constant", "value": 400},
    })  # fmt: skip
    workload = workload.model_copy(update={"jobs": workload.jobs[:1]})
    scheduler = Scheduler.for_workload(workload)
    inbox = Inbox()
    inbox.put(Submit(workload.jobs[0]), 0.0)
    started: list = []
    cancel: dict = {}
    decoded = {"steps": 0}  # the engine's steps since the first Generate of the run

    def on_start(decision, now):
        started.append((now, decision))
        if isinstance(decision, Generate):
            cancel["armed"] = True
            if held is not None:
                held.armed = True

    def counted(step):
        """``step`` (the engine's decode step), counted; the cancel once it decoded a while."""

        def decode(*args, **kwargs):
            out = step(*args, **kwargs)
            if cancel.get("armed"):
                decoded["steps"] += 1
                if decoded["steps"] == CANCEL_AFTER_STEPS:
                    cancel_now()
            return out

        return decode

    held = None
    if backend == "hf":  # held at the cancel until it stopped the rows
        held = HeldAtTheCancel(monkeypatch, on_hold=lambda: cancel_now())
        held.armed = False
    else:
        from marlaas.executors.engine_steps import StepMeter

        monkeypatch.setattr(StepMeter, "step", counted(StepMeter.step))

    def cancel_now():
        cancel["at"], cancel["steps"] = executor.now(), decoded["steps"]
        if held is not None:
            cancel["steps"] = held.steps
        inbox.put(Cancel("emit-a"))  # at once: the loop stamps it with its clock

    store = AdapterStore(tmp_path / "adapters")
    with LocalExecutor(
        EngineSizing.of_workload(workload), scheduler.cluster, store=store,
        model_dir=tiny_model_dir, backend=backend,
    ) as executor:  # fmt: skip
        result = drive(scheduler, Watched(executor, on_start), inbox,
                       on_ended=lambda outcome: inbox.close())  # fmt: skip
        decoded_in_the_run = decoded["steps"] if held is None else held.steps
    outcome = result.jobs["emit-a"]
    assert outcome.state == "cancelled"
    aborts = [now for now, d in started if isinstance(d, AbortGeneration)]
    assert aborts and min(aborts) >= cancel["at"]
    # the engine let its groups go at once: a few steps more, not the ~380 left to decode
    if held is not None:
        held.check()
    assert decoded_in_the_run - cancel["steps"] < (400 - CANCEL_AFTER_STEPS) / 4, decoded
    rows = records_to_frame(result.records)
    generated = rows[rows["kind"] == "generate"]
    assert (generated["outcome"] == "cancelled").all()
    assert (generated["end_s"] <= outcome.end_s).all()


def test_hf_a_stopped_row_waiting_in_a_later_part_of_a_batch_leaves_its_adapter_alone(
    hf, tiny_model_dir, tmp_path
):
    """A call aborted while its rows wait in a part of a batch not started yet (batches are
    sampled max_batch_size rows at a time) has its job's adapter retired as soon as the job
    ends, before that part starts: its rows must not name the adapter in the part's forward
    pass, or the other calls sampled beside them fail with it (PEFT: no such adapter)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from marlaas.executors.hf_generator import BASE, _Row

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    config = LoraConfig(r=2, target_modules=["q_proj", "v_proj"])
    get_peft_model(model, config).save_pretrained(tmp_path / "kept")
    asyncio.run(hf.publish("kept", 1, tmp_path / "kept"))  # a PeftModel from here on
    try:

        def live() -> _Row:
            return _Row(BASE, [1, 2, 3], 5, 6, 1.0, None, -1)

        retired = _Row("gone__v1", [1, 2, 3], 0, 50, 1.0, "gone", 1, stopped=True)
        (alone,) = hf._sample([live()])
        beside, stopped = hf._sample([live(), retired])
    finally:
        asyncio.run(hf.retire("kept", 1))
    assert beside.completion_ids == alone.completion_ids
    assert stopped.completion_ids == () and stopped.adapter == "gone"
