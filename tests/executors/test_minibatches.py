"""A training step of several minibatches (decoupled PPO, marlaas.executors.grpo): one
optimizer step per minibatch of whole groups, the ratio to the step's starting policy clipped;
one minibatch is the step it always was, bit for bit."""

from __future__ import annotations

import math

import pytest

from marlaas.executors.rollout import TrainSample

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.executors.completion_logprobs import pad_rows  # noqa: E402
from marlaas.executors.grpo import (  # noqa: E402
    group_advantages,
    split_minibatches,
    truncated_surrogate,
)
from marlaas.executors.peft_trainer import PeftTrainer, TrainingInterrupted  # noqa: E402
from tests.executors.conftest import randomize_adapter  # noqa: E402

PROMPT = (10, 11, 12)


def _sample(completion, logprobs, reward, group, version=0):
    return TrainSample(PROMPT, tuple(completion), tuple(logprobs), reward, group, version)


def _groups(trainer, job, groups: int, shift: float = 0.0) -> list[TrainSample]:
    """``groups`` groups of three 5-token completions (rewards 1, 0, 0.5) whose sampling
    log-probs are the trainer's minus ``shift``."""
    comps = [tuple(range(20 + 3 * i, 25 + 3 * i)) for i in range(3 * groups)]
    logps = trainer.logprobs(job, [PROMPT] * len(comps), comps)
    rewards = [1.0, 0.0, 0.5] * groups
    return [
        _sample(c, [x - shift for x in lp], r, i // 3)
        for i, (c, lp, r) in enumerate(zip(comps, logps, rewards, strict=True))
    ]


def _trainer(model_dir, lr=1e-2, **job) -> PeftTrainer:
    trainer = PeftTrainer(model_dir, lr=lr, micro_batch_size=8)
    trainer.add_job("A", seed=0, **job)
    randomize_adapter(trainer, "A", seed=7, scale=0.1)  # B != 0: every weight has a gradient
    return trainer


def _weights(trainer, job="A"):
    return [p.detach().clone() for p in trainer.adapter_parameters(job)]


def _step_before_minibatches(trainer: PeftTrainer, job: str, samples) -> None:
    """The training step as it was before minibatches (one micro-batch), written out: the loss
    -min(pi / mu, max_weight) * A * pi / sg(pi) over the step's tokens, one AdamW step."""
    state = trainer._jobs[job]
    trainer._activate(job)
    trainer.model.train()
    advantages = torch.tensor(group_advantages(samples, trainer.adv_eps))[:, None]
    total = sum(len(s.completion_ids) for s in samples)
    logp, mask = trainer._completion_logprobs(samples)
    behaviour = pad_rows([s.logprobs for s in samples], mask.shape[1], trainer.device)
    proximal = logp.detach()
    weight = torch.exp(proximal - behaviour).clamp(max=trainer.max_weight)
    ((-weight * advantages * torch.exp(logp - proximal) * mask).sum() / total).backward()
    torch.nn.utils.clip_grad_norm_(state.params, trainer.max_grad_norm)
    state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    trainer.end_step(job)


def test_one_minibatch_is_the_step_before_minibatches_bit_for_bit(tiny_model_dir):
    ours, theirs = _trainer(tiny_model_dir), _trainer(tiny_model_dir)
    assert ours._jobs["A"].minibatches == 1  # the default
    for step in range(3):  # stale samples (log-probs 0.3 nat lower): their weights truncated
        samples = _groups(ours, "A", 2, shift=0.3 * ((step + 1) % 2))
        stats = ours.train_step("A", samples)
        _step_before_minibatches(theirs, "A", samples)
        assert stats.version == step + 1 and stats.extra["trust_clip_fraction"] == 0.0
        assert all(torch.equal(a, b) for a, b in zip(_weights(ours), _weights(theirs), strict=True))
    assert stats.clip_fraction == 1.0


def test_the_clip_cuts_exactly_the_tokens_that_left_the_trust_region_in_their_direction():
    # u = pi / pi_prox of five one-token samples, w = 1: cut where u > 1.2 with A > 0 and where
    # u < 0.8 with A < 0; a cut token has no gradient, the others -A * u / tokens.
    ratio = torch.tensor([1.5, 1.5, 0.5, 0.5, 1.1])[:, None]
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0])[:, None]
    logp = ratio.log().requires_grad_(True)
    zeros, mask = torch.zeros_like(ratio), torch.ones_like(ratio)
    loss, measured = truncated_surrogate(logp, zeros, advantages, mask, 1.0, 5, zeros, 0.2)
    loss.backward()
    expected = [0.0, 1.5 / 5, -0.5 / 5, 0.0, -1.1 / 5]
    assert logp.grad[:, 0].tolist() == pytest.approx(expected)
    assert measured.trust_clipped == 2 and measured.truncated == 0
    clipped_value = -(1.2 * 1 + 1.5 * -1 + 0.5 * 1 + 0.8 * -1 + 1.1 * 1) / 5
    assert measured.loss == pytest.approx(clipped_value)
    # without a proximal policy (a step's first minibatch) u = 1: nothing is cut
    logp = ratio.log().requires_grad_(True)
    loss, measured = truncated_surrogate(logp, ratio.log(), advantages, mask, 1.0, 5)  # w = 1
    loss.backward()
    assert logp.grad[:, 0].tolist() == pytest.approx((-advantages[:, 0] / 5).tolist())
    assert measured.trust_clipped == 0
    # clip-higher: the upper side at 1 + 0.6 keeps the rewarded u = 1.5's gradient, the
    # lower side still cuts the unrewarded u = 0.5
    logp = ratio.log().requires_grad_(True)
    loss, measured = truncated_surrogate(logp, zeros, advantages, mask, 1.0, 5, zeros, 0.2, 0.6)
    loss.backward()
    assert logp.grad[:, 0].tolist() == pytest.approx([-1.5 / 5, 1.5 / 5, -0.5 / 5, 0.0, -1.1 / 5])
    assert measured.trust_clipped == 1


def test_split_minibatches_keeps_groups_whole_and_in_order():
    groups = [3, 3, 1, 1, 2, 2, 0, 0, 4]
    samples = [_sample((1,), (0.0,), 0.0, g) for g in groups]
    assert split_minibatches(samples, 1) == [list(range(9))]
    assert split_minibatches(samples, 2) == [[0, 1, 2, 3, 4, 5], [6, 7, 8]]  # 3 groups + 2
    assert split_minibatches(samples, 5) == [[0, 1], [2, 3], [4, 5], [6, 7], [8]]
    assert split_minibatches(samples, 8) == split_minibatches(samples, 5)  # one per group
    with pytest.raises(ValueError, match="minibatches must be at least 1"):
        split_minibatches(samples, 0)


def _recording(trainer, monkeypatch, before=None):
    """The adapter's gradients at each optimizer step of ``trainer`` (before the step);
    ``before(n)`` runs just before the n-th optimizer step (1, 2, ...)."""
    grads, apply = [], trainer.apply_gradients

    def recorded(job, *args, **kwargs):
        grads.append([p.grad.detach().clone() for p in trainer.adapter_parameters(job)])
        if before is not None:
            before(len(grads))
        return apply(job, *args, **kwargs)

    monkeypatch.setattr(trainer, "apply_gradients", recorded)
    return grads


@pytest.mark.parametrize(
    ("clip_eps", "clip_eps_high", "cut"),
    [(0.2, None, (True, True)), (1.0, None, (False, False)), (0.2, 1.0, (False, True))],
)
def test_the_second_minibatch_gets_no_gradient_from_tokens_the_first_pushed_past_the_clip(
    tiny_model_dir, monkeypatch, clip_eps, clip_eps_high, cut
):
    """Two identical groups (a rewarded and an unrewarded one-token completion) in two
    minibatches: the first optimizer step raises the rewarded token's probability 1.8-fold and
    lowers the other's to 0.44 of what it was, so in the second minibatch both ratios are
    past 1 +- 0.2 in their advantage's direction and neither has a gradient; within 1 +- 1
    both keep theirs; with the upper side at 1 + 1 (clip-higher) the rewarded one keeps its
    gradient and the other is cut."""
    trainer = PeftTrainer(tiny_model_dir, lr=1e-3, micro_batch_size=8)
    trainer.add_job("A", seed=0, minibatches=2, clip_eps=clip_eps, clip_eps_high=clip_eps_high)
    comps = [(40,), (41,)]
    start = trainer.logprobs("A", [PROMPT] * 2, comps)
    samples = [
        _sample(c, lp, r, g)
        for g in (0, 1)
        for c, lp, r in zip(comps, start, (1.0, 0.0), strict=True)
    ]
    moved = []

    def after_the_first(n):
        if n == 2:
            moved.append(trainer.logprobs("A", [PROMPT] * 2, comps))

    grads = _recording(trainer, monkeypatch, after_the_first)
    stats = trainer.train_step("A", samples)
    assert len(grads) == 2 and stats.version == 1
    rewarded, other = [math.exp(m[0] - s[0]) for m, s in zip(moved[0], start, strict=True)]
    assert 1.2 < rewarded < 2 and 0 < other < 0.8  # after the first optimizer step
    assert any(g.abs().sum() > 0 for g in grads[0])
    second = sum(float(g.abs().sum()) for g in grads[1])
    assert (second == 0.0) == all(cut)
    assert stats.extra["trust_clip_fraction"] == sum(cut) / 4  # 4 tokens, 2 in the second half


def test_a_step_of_k_minibatches_takes_k_optimizer_steps_and_one_version(tiny_model_dir):
    trainer = _trainer(tiny_model_dir, minibatches=3)
    for step in (1, 2):
        stats = trainer.train_step("A", _groups(trainer, "A", 3))
        assert stats.version == trainer.version("A") == step
        assert stats.samples == 9 and stats.tokens == 45
        optimizer_steps = {float(s["step"]) for s in trainer._jobs["A"].optimizer.state.values()}
        assert optimizer_steps == {3.0 * step}
        assert stats.mean_weight == pytest.approx(1.0, abs=1e-4)  # pi_prox / mu: fresh samples
    # fewer groups than minibatches: one optimizer step per group
    trainer.train_step("A", _groups(trainer, "A", 2))
    assert {float(s["step"]) for s in trainer._jobs["A"].optimizer.state.values()} == {8.0}
    assert trainer.version("A") == 3


def test_bad_step_settings_are_refused_naming_the_field(tiny_model_dir):
    trainer = PeftTrainer(tiny_model_dir)
    for bad in (0, -1, 2.0, True, "2"):
        with pytest.raises(ValueError, match="minibatches must be an int >= 1"):
            trainer.add_job("A", minibatches=bad)
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=r"clip_eps must be in \(0, 1\]"):
            trainer.add_job("A", clip_eps=bad)
    for bad in (0.0, -0.1, 10.5):
        with pytest.raises(ValueError, match=r"clip_eps_high must be in \(0, 10\]"):
            trainer.add_job("A", clip_eps_high=bad)
    with pytest.raises(ValueError, match=r"clip_eps_high must be a number"):
        trainer.add_job("A", clip_eps_high="0.3")
    assert trainer.jobs == []


def test_an_interrupt_stops_a_step_only_before_its_first_optimizer_step(
    tiny_model_dir, monkeypatch
):
    trainer = _trainer(tiny_model_dir, minibatches=2)
    samples = _groups(trainer, "A", 2)
    trainer.train_step("A", _groups(trainer, "A", 2))
    before = _weights(trainer)  # samples one version stale: the step's log-probs come first
    forward = trainer._completion_logprobs

    def interrupted(chunk):  # the step's first forward pass: the step stops
        trainer.interrupt()
        return forward(chunk)

    monkeypatch.setattr(trainer, "_completion_logprobs", interrupted)
    with pytest.raises(TrainingInterrupted):
        trainer.train_step("A", samples)
    assert trainer.version("A") == 1
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(trainer), strict=True))
    monkeypatch.undo()
    # interrupted between its minibatches (at its first optimizer step): it runs to its end
    grads = _recording(trainer, monkeypatch, lambda n: trainer.interrupt() if n == 1 else None)
    assert trainer.train_step("A", samples).version == 2 and len(grads) == 2
    assert any(g.abs().sum() > 0 for g in grads[1])  # the second minibatch was trained


def test_an_on_policy_step_takes_its_starting_log_probs_from_sampling(tiny_model_dir):
    """Samples of the version being trained: the step's starting log-probs are their sampling
    log-probs, so it makes no forward pass for them (the simulator charges none); one version
    stale, it makes one, which gives them to within 1e-5 nat."""
    ours, theirs = _trainer(tiny_model_dir, minibatches=2), _trainer(tiny_model_dir, minibatches=2)
    samples = _groups(ours, "A", 2)  # version 0, the trainer's log-probs: what sampling gives
    read = ours.tokens_read
    ours.train_step("A", samples)
    assert ours.tokens_read - read == 2 * (3 + 3 * 5)  # the two minibatches' passes only
    taken = theirs.proximal("A", samples, [3, 4, 5])  # fresh: the sampling log-probs
    assert taken == {i: list(samples[i].logprobs) for i in (3, 4, 5)}
    theirs._jobs["A"].version = 1  # the same samples a version stale: a forward pass
    read = theirs.tokens_read
    computed = theirs.proximal("A", samples, [3, 4, 5])
    assert theirs.tokens_read - read == 3 + 3 * 5  # the prompt once, three completions
    for i in (3, 4, 5):
        assert computed[i] == pytest.approx(taken[i], abs=1e-5)
