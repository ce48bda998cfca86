"""A training step's gradients are the same bit for bit on one thread and on two: the shared
prompt positions' gradients added in index order, and MKL's products in its strict
reproducible mode (set by importing marlaas.executors)."""

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from marlaas.executors.token_layout import Layout, predicting  # noqa: E402

THREADS = (1, 2)


def _on_threads(compute):
    """``compute()`` on one thread and on two (the caller's count restored)."""
    before = torch.get_num_threads()
    try:
        out = []
        for threads in THREADS:
            torch.set_num_threads(threads)
            out.append(compute())
        return out
    finally:
        torch.set_num_threads(before)


def test_the_shared_prompt_positions_gradient_is_summed_alike_on_any_thread_count():
    # a tree layout: position 59 (a prompt's last token) predicts every sample's first token
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(1, 273, 576, generator=g)
    cols = torch.cat([torch.full((8,), 59), torch.randint(60, 273, (150,), generator=g)])
    place = Layout(torch.zeros(1, 273), torch.zeros(1, 273), None, torch.zeros_like(cols), cols, 0)
    upstream = torch.randn(len(cols), 576, generator=g)

    def gradient(pick):
        h = hidden.clone().requires_grad_()
        (pick(h) * upstream).sum().backward()
        return h.grad

    ours = _on_threads(lambda: gradient(lambda h: predicting(h, place)))
    assert torch.equal(*ours)
    assert torch.equal(predicting(hidden, place), hidden[place.rows, place.cols])
    # advanced indexing's backward pass (what it replaces) adds them per thread here


_PRODUCT = """
import sys, torch
{setup}
g = torch.Generator().manual_seed(0)
weight = torch.randn(49152, 576, generator=g) * 0.02   # SmolLM2's output layer
grad = torch.randn(64, 49152, generator=g) * 1e-3
out = []
for threads in (1, 2):
    torch.set_num_threads(threads)
    out.append(grad @ weight)
print(torch.equal(*out))
"""


def _run(code: str, env: dict | None = None) -> str:
    """The last line ``code`` prints in a fresh interpreter, MKL_CBWR taken out of the
    environment unless ``env`` sets it."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"} | (env or {})
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def test_importing_the_executors_makes_mkl_products_alike_on_any_thread_count():
    if "mkl" not in torch.__config__.show().lower():
        pytest.skip("torch is not built with MKL")
    if _run(_PRODUCT.format(setup="")) == "True":
        pytest.skip("this machine's MKL sums the product alike on one and two threads anyway")
    assert _run(_PRODUCT.format(setup="import marlaas.executors")) == "True"


def test_a_users_own_mkl_setting_is_kept():
    show = "import os, marlaas.executors; print(os.environ['MKL_CBWR'])"
    assert _run(show) == "AUTO,STRICT"
    assert _run(show, {"MKL_CBWR": "COMPATIBLE"}) == "COMPATIBLE"


def test_the_trainers_log_probs_pick_the_predicting_positions_so(monkeypatch):
    """chunked_logprobs takes its positions through `predicting` (a stub decoder whose
    hidden states are a leaf: their gradient is what the trainer's LoRA layers get), and the
    gradient it gives them is the same on one thread and on two."""
    from types import SimpleNamespace

    from marlaas.executors import completion_logprobs
    from marlaas.executors.rollout import TrainSample
    from marlaas.executors.token_layout import tree_layout

    g = torch.Generator().manual_seed(1)
    chunk = [TrainSample(tuple(range(5 + group, 65 + group)),
                         tuple(range(70, 70 + 4 + i)) + (200 + i,) * (12 - i), (0.0,) * 16,
                         1.0, group, 0)
             for group in range(2) for i in range(8)]  # fmt: skip
    place = tree_layout(chunk, "cpu", torch.float32)  # answers sharing their beginnings
    hidden = torch.randn(1, place.tokens, 576, generator=g)
    head = torch.nn.Linear(576, 4096, bias=False)
    head.weight.data = torch.randn(4096, 576, generator=g) * 0.02
    picked = []

    def spy(states, layout):
        picked.append(layout)
        return predicting(states, layout)

    monkeypatch.setattr(completion_logprobs, "predicting", spy)

    def gradient():
        leaf = hidden.clone().requires_grad_()
        decoder = lambda **_: SimpleNamespace(last_hidden_state=leaf)  # noqa: E731
        causal_lm = SimpleNamespace(get_decoder=lambda: decoder)
        logp, mask = completion_logprobs.chunked_logprobs(causal_lm, head, chunk, place, "cpu")
        (logp * mask).sum().backward()
        return leaf.grad

    assert torch.equal(*_on_threads(gradient))
    assert picked == [place, place]
