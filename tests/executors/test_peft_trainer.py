"""PeftTrainer: GRPO advantages, truncated importance weights, tenant isolation, save and resume."""

from __future__ import annotations

import hashlib
import json
import math
import re

import pytest

from marlaas.executors.rollout import TrainSample

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from marlaas.executors.grpo import group_advantages  # noqa: E402
from marlaas.executors.peft_trainer import PeftTrainer  # noqa: E402


def _samples(trainer, job, rewards, prompt=(10, 11, 12), shift=0.0, version=0):
    """Samples of one group whose 'sampling' log-probs are the current ones minus `shift`."""
    comps = [tuple(range(20 + i, 26 + i)) for i in range(len(rewards))]
    logps = trainer.logprobs(job, [prompt] * len(comps), comps)
    return [
        TrainSample(prompt, c, tuple(x - shift for x in lp), r, 0, version)
        for c, lp, r in zip(comps, logps, rewards, strict=True)
    ]


def _weights(trainer, job):
    return [p.detach().clone() for p in trainer._jobs[job].params]


def test_group_advantages():
    mk = lambda r, g: TrainSample((1,), (2,), (0.0,), r, g, 0)  # noqa: E731
    adv = group_advantages([mk(1, 0), mk(0, 0), mk(5, 1), mk(5, 1)], eps=0.0)
    assert adv[:2] == [1.0, -1.0]
    adv = group_advantages([mk(5, 1), mk(5, 1)])
    assert adv == [0.0, 0.0]  # no signal in a group with equal rewards


def test_training_one_tenant_never_touches_another(tiny_model_dir):
    trainer = PeftTrainer(tiny_model_dir, lr=1e-2, micro_batch_size=2)
    trainer.add_job("A", seed=0)
    trainer.add_job("B", seed=1)
    prompts, comps = [(5, 6, 7)], [(40, 41, 42, 43)]
    b_before, b_logp = _weights(trainer, "B"), trainer.logprobs("B", prompts, comps)
    a_before = _weights(trainer, "A")
    for _ in range(3):
        stats = trainer.train_step("A", _samples(trainer, "A", [1.0, 0.0, 0.5]))
        assert stats.grad_norm > 0
    assert trainer.version("A") == 3 and trainer.version("B") == 0
    assert any(not torch.equal(x, y) for x, y in zip(a_before, _weights(trainer, "A"), strict=True))
    assert all(torch.equal(x, y) for x, y in zip(b_before, _weights(trainer, "B"), strict=True))
    assert trainer.logprobs("B", prompts, comps) == b_logp
    assert all(p.grad is None for p in trainer._jobs["B"].params)


def test_on_policy_weight_is_one_and_stats(tiny_model_dir):
    trainer = PeftTrainer(tiny_model_dir, lr=1e-2, micro_batch_size=2)
    trainer.add_job("A", seed=0)
    stats = trainer.train_step("A", _samples(trainer, "A", [1.0, 0.0, 0.0, 1.0]))
    assert stats.samples == 4 and stats.tokens == 24
    assert stats.mean_reward == pytest.approx(0.5)
    assert stats.mean_weight == pytest.approx(1.0, abs=1e-5)
    assert stats.largest_weight == pytest.approx(1.0, abs=1e-5)
    assert stats.clip_fraction == 0.0 and stats.version == 1


def _gradient(trainer, job, samples):
    """`job`'s adapter gradients after a backward pass over `samples` (no optimizer step)."""
    tokens = sum(len(s.completion_ids) for s in samples)
    trainer.backward(job, samples, group_advantages(samples), tokens)
    grads = [p.grad.detach().clone() for p in trainer.adapter_parameters(job)]
    trainer.end_step(job)
    return grads


def test_a_stale_sample_keeps_its_gradient_with_its_weight_truncated_at_one(tiny_model_dir):
    trainer = PeftTrainer(tiny_model_dir, lr=1e-2, micro_batch_size=8)
    trainer.add_job("A", seed=0)
    for _ in range(2):  # the trainer moves on: version 2
        trainer.train_step("A", _samples(trainer, "A", [1.0, 0.0]))
    # Sampled at version 0 with log-probs 1 nat lower: weight e ~ 2.72. The PPO ratio clipped
    # at 1.2 gave the rewarded sample no gradient (a policy that had moved towards a rewarded
    # token stopped reinforcing it); truncated at 1 it counts as a fresh sample does.
    fresh = _gradient(trainer, "A", _samples(trainer, "A", [1.0, 0.0]))
    up = _gradient(trainer, "A", _samples(trainer, "A", [1.0, 0.0], shift=1.0, version=0))
    down = _gradient(trainer, "A", _samples(trainer, "A", [1.0, 0.0], shift=-1.0, version=0))
    for g_fresh, g_up, g_down in zip(fresh, up, down, strict=True):
        torch.testing.assert_close(g_up, g_fresh, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(g_down, g_fresh / math.e, rtol=1e-4, atol=1e-6)
    stats = trainer.train_step("A", _samples(trainer, "A", [1.0, 0.0], shift=1.0, version=0))
    assert stats.largest_weight == pytest.approx(math.e, rel=1e-4)
    assert stats.max_staleness == 2
    assert stats.clip_fraction == pytest.approx(1.0) and stats.grad_norm > 0


def test_the_truncation_is_a_setting_and_counts_the_tokens_it_cut(tiny_model_dir):
    trainer = PeftTrainer(tiny_model_dir, lr=1e-2, micro_batch_size=8, max_weight=5.0)
    trainer.add_job("A", seed=0)
    fresh = _gradient(trainer, "A", _samples(trainer, "A", [1.0, 0.0]))
    stale = _gradient(trainer, "A", _samples(trainer, "A", [1.0, 0.0], shift=1.0))
    for g_fresh, g_stale in zip(fresh, stale, strict=True):
        torch.testing.assert_close(g_stale, math.e * g_fresh, rtol=1e-4, atol=1e-6)
    far = _samples(trainer, "A", [1.0, 0.0], shift=2.0)[0]  # weight e^2 ~ 7.4: truncated at 5
    near = _samples(trainer, "A", [1.0, 0.0])[1]
    stats = trainer.train_step("A", [far, near])
    assert stats.clip_fraction == pytest.approx(0.5)
    assert stats.largest_weight == pytest.approx(math.e**2, rel=1e-4)


def test_micro_batches_accumulate_to_the_full_batch_gradient(tiny_model_dir):
    grads = []
    for mb in (1, 8):
        trainer = PeftTrainer(tiny_model_dir, lr=1e-2, micro_batch_size=mb, max_grad_norm=1e9)
        trainer.add_job("A", seed=0)
        samples = _samples(trainer, "A", [1.0, 0.0, 0.3, 0.7])
        stats = trainer.train_step("A", samples)
        grads.append((stats.loss, stats.grad_norm))
    # (Adam's first step is lr * sign(grad), so the weights themselves are not compared.)
    assert grads[0][0] == pytest.approx(grads[1][0], abs=1e-6)
    assert grads[0][1] == pytest.approx(grads[1][1], rel=1e-4)


def test_save_adapter_and_resume(tiny_model_dir, tmp_path):
    trainer = PeftTrainer(tiny_model_dir, lr=1e-2)
    trainer.add_job("A", seed=0)
    trainer.train_step("A", _samples(trainer, "A", [1.0, 0.0]))
    with pytest.raises(ValueError, match="version 1"):
        trainer.save_adapter("A", 0, tmp_path / "x")
    out = trainer.save_adapter("A", 1, tmp_path / "A" / "v1")
    names = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "marlaas_adapter.json"} <= names
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]
    fresh = PeftTrainer(tiny_model_dir)
    fresh.add_job("other", seed=3)
    fresh.add_job("A", init_dir=out)
    assert fresh.version("A") == 1
    p, c = [(1, 2, 3)], [(50, 60, 70)]
    assert fresh.logprobs("A", p, c)[0] == pytest.approx(trainer.logprobs("A", p, c)[0], abs=1e-6)
    assert fresh.logprobs("A", p, c) != fresh.logprobs(None, p, c)


def test_a_saved_adapter_records_its_checksum_and_a_flipped_byte_does_not_load(
    tiny_model_dir, tmp_path
):
    """A byte changed in a saved adapter's tensor data loaded silently (its header and
    length were whole); the SHA-256 recorded when it was written now refuses it, naming the
    file. A folder saved before checksums were recorded loads as before."""
    from marlaas.executors.adapter_store import (
        META_FILE,
        WEIGHTS_FILE,
        WEIGHTS_SHA256,
        AdapterError,
    )

    trainer = PeftTrainer(tiny_model_dir)
    trainer.add_job("A", seed=0)
    out = trainer.save_adapter("A", 0, tmp_path / "A" / "v0")
    weights, meta_path = out / WEIGHTS_FILE, out / META_FILE
    meta = json.loads(meta_path.read_text())
    assert meta[WEIGHTS_SHA256] == hashlib.sha256(weights.read_bytes()).hexdigest()
    data = bytearray(weights.read_bytes())
    data[-2] ^= 0x04  # the last tensor's data
    weights.write_bytes(bytes(data))
    fresh = PeftTrainer(tiny_model_dir)
    with pytest.raises(AdapterError, match=rf"^{re.escape(str(weights))}: damaged: its "
                       "SHA-256 is [0-9a-f]{64}, but"):  # fmt: skip
        fresh.add_job("A", init_dir=out)
    del meta[WEIGHTS_SHA256]  # a version from before checksums: not checked
    meta_path.write_text(json.dumps(meta))
    fresh.add_job("A", init_dir=out)
    assert fresh.version("A") == 0


def test_a_saved_optimizer_state_records_its_checksum_and_a_flipped_byte_does_not_load(
    tiny_model_dir, tmp_path
):
    """A byte changed in a saved optimizer state's tensor data (Adam's moments) loaded
    silently: torch.load does not check the archive's checksums, and the job went on
    training from moments nobody wrote. The SHA-256 recorded when it was written refuses it
    on the trainer's load (a resume, a swap-in), naming the file, and the job is not added;
    a folder saved before checksums were recorded loads as before."""
    from marlaas.executors.adapter_store import (
        META_FILE,
        OPTIMIZER_FILE,
        OPTIMIZER_SHA256,
        AdapterError,
    )

    trainer = PeftTrainer(tiny_model_dir, lr=1e-2)
    trainer.add_job("A", seed=0)
    trainer.train_step("A", _samples(trainer, "A", [1.0, 0.0]))
    out = trainer.save_adapter("A", 1, tmp_path / "A" / "v1", optimizer=True)
    state, meta_path = out / OPTIMIZER_FILE, out / META_FILE
    meta = json.loads(meta_path.read_text())
    assert meta[OPTIMIZER_SHA256] == hashlib.sha256(state.read_bytes()).hexdigest()
    data = bytearray(state.read_bytes())
    moments = torch.load(state, weights_only=True)["state"][0]["exp_avg"]
    at = bytes(data).find(moments.numpy().tobytes())
    assert at > 0
    data[at + 2] ^= 0x40  # a byte of the first moment's data
    state.write_bytes(bytes(data))
    fresh = PeftTrainer(tiny_model_dir, lr=1e-2)
    with pytest.raises(AdapterError, match=rf"^{re.escape(str(state))}: damaged: its "
                       "SHA-256 is [0-9a-f]{64}, but"):  # fmt: skip
        fresh.add_job("A", init_dir=out)
    assert fresh.jobs == []
    del meta[OPTIMIZER_SHA256]  # a version from before checksums: not checked
    meta_path.write_text(json.dumps(meta))
    fresh.add_job("A", init_dir=out)
    assert fresh.version("A") == 1


def test_bad_job_names_and_unknown_jobs(tiny_model_dir):
    trainer = PeftTrainer(tiny_model_dir)
    with pytest.raises(ValueError, match="job name"):
        trainer.add_job("a.b")
    with pytest.raises(KeyError, match="add_job"):
        trainer.train_step("nope", [])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_train_step_on_gpu(tiny_model_dir):
    trainer = PeftTrainer(tiny_model_dir, lr=1e-2, device="cuda")
    trainer.add_job("A", seed=0)
    stats = trainer.train_step("A", _samples(trainer, "A", [1.0, 0.0]))
    assert stats.grad_norm > 0 and stats.mean_weight == pytest.approx(1.0, abs=1e-3)


def test_an_interrupted_step_stops_before_its_optimizer_step_and_the_next_runs_whole(
    tiny_model_dir, monkeypatch
):
    from marlaas.executors.peft_trainer import TrainingInterrupted

    trainer = PeftTrainer(tiny_model_dir, lr=1e-2, micro_batch_size=1)
    trainer.add_job("A", seed=0)
    samples = _samples(trainer, "A", [1.0, 0.0, 0.5, 0.0])
    before, forward = _weights(trainer, "A"), trainer._completion_logprobs
    micro_batches = []

    def interrupted_during_the_first(chunk):  # as a run's shutdown would, from another thread
        micro_batches.append(len(chunk))
        trainer.interrupt()
        return forward(chunk)

    monkeypatch.setattr(trainer, "_completion_logprobs", interrupted_during_the_first)
    with pytest.raises(TrainingInterrupted, match="A: training step interrupted"):
        trainer.train_step("A", samples)
    assert micro_batches == [1]  # not the other three
    assert trainer.version("A") == 0
    assert all(torch.equal(x, y) for x, y in zip(before, _weights(trainer, "A"), strict=True))
    monkeypatch.undo()
    assert trainer.train_step("A", samples).version == 1


def test_a_seeded_adapter_is_peft_s_own_init_and_ignores_the_global_generator(
    tiny_model_dir, tmp_path
):
    """add_job(seed=s) and write_initial_adapter draw what PEFT draws after
    torch.manual_seed(s), for a first and a second adapter of a model, whatever the global
    generator's state (another thread may be sampling with it)."""
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ours = PeftTrainer(tiny_model_dir)
    for i, job in enumerate(("first", "second")):
        config = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, bias="none",
                            target_modules=ours.target_modules, task_type="CAUSAL_LM")  # fmt: skip
        torch.manual_seed(7)
        if i == 0:
            reference = get_peft_model(reference, config, adapter_name=job)
        else:
            reference.add_adapter(job, config)
        torch.manual_seed(12345)  # another thread's draws: they must not matter
        ours.add_job(job, rank=8, alpha=16, seed=7)
        theirs = {n: p for n, p in reference.named_parameters() if f".{job}." in n}
        mine = {n: p for n, p in ours.model.named_parameters() if f".{job}." in n}
        assert theirs.keys() == mine.keys() and len(mine) > 0
        assert all(torch.equal(theirs[n], mine[n]) for n in mine), job
    written = ours.write_initial_adapter("third", 8, 16, seed=7, out_dir=tmp_path / "v0")
    saved = load_file(str(written / "adapter_model.safetensors"))
    first = {n.replace(".first", ""): p for n, p in ours.model.named_parameters() if ".first." in n}
    assert {n.replace(".weight", "") for n in saved} <= {n.replace(".weight", "") for n in first}
    assert all(torch.equal(saved[n], first[n]) for n in saved)
    assert "third" not in ours.jobs and "third" not in getattr(ours.model, "peft_config", {})


def test_a_job_that_fails_to_load_leaves_the_model_as_it_was(tiny_model_dir, tmp_path):
    """An adapter folder whose optimizer state does not load: add_job fails, and the job can
    be added again (the half-added adapter does not stay in the model)."""
    trainer = PeftTrainer(tiny_model_dir, lr=1e-2)
    trainer.add_job("A", seed=0)
    trainer.train_step("A", _samples(trainer, "A", [1.0, 0.0]))
    saved = trainer.save_adapter("A", 1, tmp_path / "A" / "v1", optimizer=True)
    trainer.remove_job("A")
    good = (saved / "optimizer.pt").read_bytes()
    (saved / "optimizer.pt").write_bytes(b"not a torch file")
    with pytest.raises(Exception, match=r"pickle|zip|load"):
        trainer.add_job("A", init_dir=saved)
    assert trainer.jobs == []
    (saved / "optimizer.pt").write_bytes(good)
    trainer.add_job("A", init_dir=saved)
    assert trainer.version("A") == 1
    assert trainer.train_step("A", _samples(trainer, "A", [1.0, 0.0])).version == 2
