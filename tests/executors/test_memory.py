"""Memory of real runs: selected-token log-probs equal the full-logits ones (values and
gradients), the trainer's two ways agree, the engine's KV cache is what the workload can use,
and the monitor sees this process and its children."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from marlaas.executors.backends import (
    KV_BLOCK_TOKENS,
    EngineSizing,
    engine_kv_tokens,
    longest_sequence,
)
from marlaas.executors.memory import (
    MemoryMonitor,
    descendants,
    forked_copy,
    hwm_mb,
    peak_rss_mb,
    release_large_blocks,
    rss_mb,
    tree_rss_mb,
    weights_mb,
)
from marlaas.executors.rollout import TrainSample
from marlaas.workload_file import apply_overrides, load_workload

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ selected-token log-probs
@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
@pytest.mark.parametrize("with_bias", [False, True])
def test_token_logprobs_equal_the_full_log_softmax(chunk, with_bias):
    torch = pytest.importorskip("torch")
    from marlaas.executors.logprobs import token_logprobs

    gen = torch.Generator().manual_seed(0)
    n, hidden, vocab = 11, 16, 50  # 11 positions: chunks of 3 and 7 leave a remainder
    h = torch.randn(n, hidden, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(vocab, hidden, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(vocab, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = b if with_bias else None
    targets = torch.randint(vocab, (n,), generator=gen)
    upstream = torch.randn(n, generator=gen, dtype=torch.float64)

    mine = token_logprobs(h, w, targets, bias, chunk=chunk)
    logits = h @ w.t() + (b if with_bias else 0)
    full = torch.log_softmax(logits.float(), dim=1).gather(1, targets[:, None]).squeeze(1)
    assert mine.dtype == torch.float32
    torch.testing.assert_close(mine, full, rtol=1e-5, atol=1e-5)

    inputs = [h, w, *([b] if with_bias else [])]
    got = torch.autograd.grad((mine * upstream).sum(), inputs)
    ref = torch.log_softmax(logits, dim=1).gather(1, targets[:, None]).squeeze(1)
    want = torch.autograd.grad((ref * upstream).sum(), inputs)
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6)


def test_token_logprobs_refuses_bad_shapes():
    torch = pytest.importorskip("torch")
    from marlaas.executors.logprobs import token_logprobs

    with pytest.raises(ValueError, match="hidden"):
        token_logprobs(torch.zeros(2, 3, 4), torch.zeros(5, 4), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="chunk"):
        targets = torch.zeros(2, dtype=torch.long)
        token_logprobs(torch.zeros(2, 4), torch.zeros(5, 4), targets, None, chunk=0)


@pytest.mark.parametrize("checkpointing", [True, False])
def test_trainer_selected_token_logprobs_match_the_full_logits(tiny_model_dir, checkpointing):
    """The trainer's chunked log-probs (and their gradients in the LoRA weights), the
    samples' shared beginnings read once, equal the ones from the model's full [B, L, vocab]
    logits of right-padded rows, with and without checkpointing."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from marlaas.executors.peft_trainer import PeftTrainer

    trainer = PeftTrainer(tiny_model_dir, activation_checkpointing=checkpointing)
    trainer.add_job("A", seed=0)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a non-zero adapter, so that its B matrices get gradients too
        for p in trainer._jobs["A"].params:
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    samples = [  # different prompt and completion lengths: padding and offsets
        TrainSample((5, 6, 7), (20, 21, 22, 23), (-1.0,) * 4, 1.0, 0, 0),
        TrainSample((5, 6, 7, 8, 9), (30, 31), (-1.0,) * 2, 0.0, 0, 0),
        TrainSample((5,), (40, 41, 42), (-1.0,) * 3, 0.5, 0, 0),
    ]
    trainer._activate("A")
    trainer.model.train()
    try:
        results = []
        for way in (trainer._completion_logprobs, trainer._full_logits_logprobs):
            logp, mask = way(samples)
            params = trainer._jobs["A"].params
            grads = torch.autograd.grad((logp * mask).sum(), params)
            results.append((logp.detach(), mask, grads))
    finally:
        trainer._deactivate("A")
        trainer.model.eval()
    (logp, mask, grads), (ref_logp, ref_mask, ref_grads) = results
    assert trainer._head is not None  # the tiny Llama's head is a plain Linear: chunked path
    assert trainer._tree is True  # the samples begin alike: the prefix tree was used
    torch.testing.assert_close(mask, ref_mask)
    torch.testing.assert_close(logp * mask, ref_logp * ref_mask, rtol=1e-5, atol=1e-5)
    assert mask.sum() == 9
    for g, r in zip(grads, ref_grads, strict=True):  # the tree sums the shared prefix's
        # gradients in another order than the padded reference: float32 rounding, relative
        # to the largest gradient
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5 * float(r.abs().max()))


# ------------------------------------------------------------------ engine budgets
def test_engine_kv_tokens_is_what_the_workload_can_hold():
    workload = load_workload(REPO / "traces" / "real-smollm2.yaml")
    # calc-tool: 80-token prompt + turn 1 (24 new + 16 observed) + turn 2 (24 new) = 144
    assert longest_sequence(workload.jobs) == 144
    sizing = EngineSizing.of_workload(workload)
    assert engine_kv_tokens(sizing, max_model_len=2048) == 64 * 144  # 9,216, not 65,536
    # at least one max_model_len sequence (vLLM refuses less), in whole blocks
    assert engine_kv_tokens(sizing, max_model_len=10_000) == 10_112
    assert 10_112 % KV_BLOCK_TOKENS == 0
    # never more than the workload's kv_tokens
    small = apply_overrides(workload, {"cluster.engine.kv_tokens": 4096})
    assert engine_kv_tokens(EngineSizing.of_workload(small), max_model_len=512) == 4096


# ------------------------------------------------------------------ measuring
def test_rss_figures_of_this_process(tmp_path):
    now = rss_mb()
    assert 1.0 < now <= peak_rss_mb() + 1.0
    assert hwm_mb("self") == pytest.approx(peak_rss_mb(), rel=0.05)
    assert tree_rss_mb() >= now - 1.0
    assert rss_mb(2**22 + 12345) == 0.0 and hwm_mb(2**22 + 12345) == 0.0  # no such process
    (tmp_path / "model.safetensors").write_bytes(b"\0" * (3 * 1024 * 1024))
    assert weights_mb(tmp_path) == pytest.approx(3.0)
    if sys.platform.startswith("linux"):
        assert release_large_blocks() in (True, False)  # no error; False with the env set


def test_monitor_sees_children_and_its_peak_is_at_least_every_sample():
    # the child holds its memory until told (its stdin closed), not for a fixed time: a test
    # process starved on a loaded machine would see it end first
    allocate = ("import sys; b = bytearray(80 * 2**20); b[::4096] = b'x' * 20480; "
                "sys.stdin.read()")  # fmt: skip
    with MemoryMonitor(period_s=0.05) as monitor:
        child = subprocess.Popen([sys.executable, "-c", allocate], stdin=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if child.pid in descendants() and rss_mb(child.pid) > 80:
                    break
                assert child.poll() is None, f"the child ended (status {child.returncode})"
                time.sleep(0.05)
            else:
                pytest.fail("the child did not hold its 80 MiB within 60 s")
            sampled = monitor.mark()
        finally:
            child.stdin.close()
            child.wait(timeout=30)
    summary = monitor.summary()
    assert sampled >= rss_mb() + 80 - 5  # this process and the child's 80 MiB
    assert summary["tree_peak_rss_mb"] >= sampled - 0.1
    assert summary["peak_rss_mb"] == pytest.approx(peak_rss_mb(), abs=1.0)
    [seen] = [c for c in summary["children"] if c["pid"] == child.pid]
    assert seen["peak_rss_mb"] >= 80  # its own high-water mark (VmHWM)
    assert "bytearray" in seen["command"]
    assert summary["end_rss_mb"] > 0


def test_timeline_is_on_the_runs_clock_and_dates_the_peak():
    with MemoryMonitor(period_s=0.02) as monitor:
        time.sleep(0.1)
        monitor.zero, monitor.offset_s = time.monotonic(), 100.0  # the run's clock starts
        time.sleep(0.1)
    timeline = monitor.timeline()
    times = [t for t, _, _ in timeline]
    assert times == sorted(times) and times[0] < 100.0 < times[-1]  # setup, then the run
    peaks = [peak for _, _, peak in timeline]
    assert peaks == sorted(peaks) and peaks[-1] == pytest.approx(peak_rss_mb(), abs=1.0)
    first = next(t for t, _, peak in timeline if peak >= peaks[-1])
    assert monitor.summary()["peak_at_s"] == pytest.approx(first, abs=0.01)


def test_a_fork_before_exec_is_not_counted_twice():
    import os

    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: wait until the parent has looked, then leave
        os.close(write)
        os.read(read, 1)
        os._exit(0)
    os.close(read)
    try:
        assert pid in descendants()
        assert forked_copy(pid)
        with MemoryMonitor(period_s=10) as monitor:
            total = monitor.mark()
        assert total == pytest.approx(rss_mb(), rel=0.05)  # not twice this process
        assert all(c["pid"] != pid for c in monitor.summary()["children"])
    finally:
        os.write(write, b"x")
        os.close(write)
        os.waitpid(pid, 0)
    assert not forked_copy(pid)  # gone


def test_a_trainer_uses_shared_weights_that_match_and_keeps_its_own_otherwise(tiny_model_dir):
    """Shared base weights (e.g. an in-process engine's) replace the trainer's own copy where
    name, shape, dtype and values match; the log-probs and a training step are unchanged."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from marlaas.executors.peft_trainer import PeftTrainer

    own = PeftTrainer(tiny_model_dir)
    params = dict(own.model.named_parameters())
    embed = "model.embed_tokens.weight"
    norm = "model.norm.weight"
    tensors = {
        # the same values in a padded vocabulary (as vLLM pads it), another copy
        embed: torch.cat([params[embed].detach(), torch.zeros(61, params[embed].shape[1])]),
        norm: params[norm].detach().clone() + 1.0,  # other values: not shared
        "model.layers.0.mlp.up_proj.weight": torch.zeros(3, 3),  # another shape: not shared
        "no.such.weight": torch.zeros(1),
    }
    shared = PeftTrainer(tiny_model_dir, shared_weights=tensors)
    assert shared.shared == [embed]
    mine = dict(shared.model.named_parameters())
    assert mine[embed].data_ptr() == tensors[embed].data_ptr()
    assert mine[embed].shape == params[embed].shape  # the first rows
    assert mine[norm].data_ptr() != tensors[norm].data_ptr()
    head = shared._causal_lm().get_output_embeddings().weight
    assert head.data_ptr() == tensors[embed].data_ptr()  # tied: the head reads the same tensor
    samples = [TrainSample((5, 6, 7), (20, 21, 22), (-1.0,) * 3, r, 0, 0) for r in (0.0, 1.0)]
    for trainer in (own, shared):
        trainer.add_job("A", seed=0)
    before = tensors[embed].clone()
    stats = [t.train_step("A", samples) for t in (own, shared)]
    assert stats[0].loss == pytest.approx(stats[1].loss, rel=1e-6)
    assert torch.equal(tensors[embed], before)  # frozen: the shared tensor is left as it was
    lp = [t.logprobs("A", [(5, 6, 7)], [(20, 21, 22)]) for t in (own, shared)]
    assert lp[0][0] == pytest.approx(lp[1][0], rel=1e-6)


def test_a_model_command_runs_again_under_jemalloc_where_it_is_installed(tmp_path, monkeypatch):
    from marlaas.allocator import ALLOCATOR_ENV, STARTED_AGAIN_ENV, jemalloc_exec

    library = tmp_path / "libjemalloc.so"
    library.write_bytes(b"")
    orig = ["python", "-X", "dev", "/venv/bin/marlaas", "train", "w.yaml", "--out", "r"]
    monkeypatch.setattr(sys, "orig_argv", orig)
    env = {"PATH": "/bin", "LD_PRELOAD": "libother.so"}
    command, new_env = jemalloc_exec(["train", "w.yaml", "--out", "r"], env, library)
    assert command == [sys.executable, *orig[1:]]  # the same command line, options and all
    assert new_env == {"PATH": "/bin", "LD_PRELOAD": f"{library} libother.so"}
    assert env["LD_PRELOAD"] == "libother.so"  # the caller's left as it was
    assert jemalloc_exec(["evaluate"], {}, library)[1]["LD_PRELOAD"] == str(library)
    assert jemalloc_exec(["serve"], {ALLOCATOR_ENV: " JEMALLOC "}, library) is not None
    assert jemalloc_exec(["serve"], {ALLOCATOR_ENV: ""}, library) is not None  # the default
    for args in (["simulate", "w.yaml"], ["--help"], []):  # no model: nothing to gain
        assert jemalloc_exec(args, {}, library) is None
    for env in (
        {"LD_PRELOAD": str(library)},  # preloaded
        {"LD_PRELOAD": "/usr/lib/libtcmalloc_minimal.so.4"},  # the user's own allocator
        {STARTED_AGAIN_ENV: "2"},  # started again, even where the loader dropped LD_PRELOAD
        {ALLOCATOR_ENV: "glibc"},
    ):
        assert jemalloc_exec(["train"], env, library) is None, env
    spaced = tmp_path / "a b" / "libjemalloc.so"
    assert jemalloc_exec(["train"], {}, spaced) is None  # LD_PRELOAD splits on spaces
    with pytest.raises(ValueError, match=r"MARLAAS_ALLOCATOR='tcmalloc': use jemalloc or glibc"):
        jemalloc_exec(["train"], {ALLOCATOR_ENV: "tcmalloc"}, library)


def test_the_process_started_again_learns_the_first_ones_signal_mask(monkeypatch):
    from marlaas.allocator import STARTED_AGAIN_ENV, first_mask

    monkeypatch.delenv(STARTED_AGAIN_ENV, raising=False)
    assert first_mask() is None
    monkeypatch.setenv(STARTED_AGAIN_ENV, "2,15")
    assert first_mask() == {2, 15}
    assert STARTED_AGAIN_ENV not in os.environ  # no child inherits it
    monkeypatch.setenv(STARTED_AGAIN_ENV, "")
    assert first_mask() == set()


def test_the_allocator_of_this_process_is_named():
    from marlaas.allocator import allocator_in_use

    expected = "jemalloc" if "libjemalloc" in os.environ.get("LD_PRELOAD", "") else "glibc"
    assert allocator_in_use() == expected
