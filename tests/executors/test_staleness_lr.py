"""A late step moves less (rl.lr_staleness_damping): the learning rate of each optimizer step
divided by 1 + damping x its samples' staleness beyond one version
(marlaas.executors.grpo.staleness_lr_scale)."""

from __future__ import annotations

import math

import pytest

from marlaas.core.workload import WorkloadError, parse_workload
from marlaas.executors.rollout import TrainSample
from tests.core.test_workload import minimal

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.executors.grpo import staleness_lr_scale  # noqa: E402
from marlaas.executors.peft_trainer import PeftTrainer  # noqa: E402
from marlaas.executors.step_settings import check_step_settings  # noqa: E402
from tests.executors.conftest import randomize_adapter  # noqa: E402

PROMPT = (10, 11, 12)


def _sample(tokens: int, version: int, reward: float = 1.0, group: int = 0) -> TrainSample:
    completion = tuple(range(20, 20 + tokens))
    return TrainSample(PROMPT, completion, (-1.0,) * tokens, reward, group, version)


def test_the_scale_is_one_over_one_plus_damping_times_the_staleness_beyond_one_version():
    fresh, behind, late = _sample(3, 5), _sample(2, 4), _sample(1, 2)  # staleness 0, 1 and 3
    assert staleness_lr_scale([fresh, late], 5, 0.0) == 1.0  # no damping
    assert staleness_lr_scale([fresh, behind], 5, 4.0) == 1.0  # at most one version behind
    # tokens: 3 at 0, 2 at 1, 1 at 3 -> (0 + 0 + 1 x 2) / 6 beyond one version
    assert staleness_lr_scale([fresh, behind, late], 5, 1.0) == pytest.approx(1 / (1 + 2 / 6))
    assert staleness_lr_scale([late], 5, 0.5) == pytest.approx(1 / 2)
    assert staleness_lr_scale([late], 5, 1.0) == pytest.approx(1 / 3)  # Zhang's 1 / tau
    assert staleness_lr_scale([_sample(2, 7)], 5, 1.0) == 1.0  # newer than the weights: 0
    assert staleness_lr_scale([], 5, 1.0) == 1.0


def _trainer(model_dir, lr: float, damping: float) -> PeftTrainer:
    trainer = PeftTrainer(model_dir, lr=lr, micro_batch_size=8)
    trainer.add_job("A", seed=0, lr_staleness_damping=damping)
    randomize_adapter(trainer, "A", seed=7, scale=0.1)  # B != 0: every weight has a gradient
    return trainer


def _weights(trainer):
    return [p.detach().clone() for p in trainer.adapter_parameters("A")]


def _step_samples(trainer, version: int) -> list[TrainSample]:
    comps = [tuple(range(20 + 3 * i, 25 + 3 * i)) for i in range(3)]
    logps = trainer.logprobs("A", [PROMPT] * 3, comps)
    return [
        TrainSample(PROMPT, c, tuple(lp), r, 0, version)
        for c, lp, r in zip(comps, logps, (1.0, 0.0, 0.5), strict=True)
    ]


def test_a_stale_step_moves_as_far_as_a_fresh_one_at_the_damped_rate(tiny_model_dir):
    """AdamW's first step is linear in the learning rate: two versions stale at damping 1 is
    the step of the same samples, fresh, at half the rate. The rate is the job's again after
    it."""
    damped, halved = _trainer(tiny_model_dir, 1e-2, 1.0), _trainer(tiny_model_dir, 5e-3, 0.0)
    start = _weights(damped)
    damped.train_step("A", _step_samples(damped, version=-2))  # the weights are at version 0
    halved.train_step("A", _step_samples(halved, version=0))
    moved = [a - b for a, b in zip(_weights(damped), start, strict=True)]
    assert any(bool(m.abs().max() > 1e-4) for m in moved)  # the step did move
    for a, b in zip(_weights(damped), _weights(halved), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert all(group["lr"] == 1e-2 for group in damped._jobs["A"].optimizer.param_groups)
    # without damping the same stale step is the full-rate one: the weights differ
    undamped = _trainer(tiny_model_dir, 1e-2, 0.0)
    undamped.train_step("A", _step_samples(undamped, version=-2))
    assert not all(
        torch.allclose(a, b) for a, b in zip(_weights(undamped), _weights(halved), strict=True)
    )


@pytest.mark.parametrize("bad", [-0.5, math.nan, math.inf, 101.0, "1", True])
def test_the_trainer_refuses_a_bad_damping_by_name(bad):
    with pytest.raises(ValueError, match="lr_staleness_damping"):
        check_step_settings(1, 0.2, None, bad)


@pytest.mark.parametrize("bad", [-0.5, math.nan, math.inf, 101.0, "x"])
def test_the_workload_refuses_a_bad_damping_by_name(bad):
    data = minimal()
    data["jobs"][0]["rl"] = {"lr_staleness_damping": bad}
    with pytest.raises(WorkloadError, match=r"jobs\[0\]\.rl\.lr_staleness_damping"):
        parse_workload(data, source="w.yaml")


def test_the_workload_default_is_no_damping():
    assert parse_workload(minimal()).jobs[0].rl.lr_staleness_damping == 0.0
    data = minimal()
    data["jobs"][0]["rl"] = {"lr_staleness_damping": 1}
    assert parse_workload(data).jobs[0].rl.lr_staleness_damping == 1.0
