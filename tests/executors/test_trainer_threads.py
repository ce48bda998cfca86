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


def _product_alike(setup: str, env: dict | None = None) -> bool:
    import os

    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"} | (env or {})
    done = subprocess.run([sys.executable, "-c", _PRODUCT.format(setup=setup)], env=env,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    return done.stdout.strip().splitlines()[-1] == "True"


def test_importing_the_executors_makes_mkl_products_alike_on_any_thread_count():
    if "mkl" not in torch.__config__.show().lower():
        pytest.skip("torch is not built with MKL")
    assert _product_alike("import marlaas.executors")
    # what it mends (MKL's own default); and a user's own setting is kept
    assert not _product_alike("")
    assert not _product_alike("import marlaas.executors", {"MKL_CBWR": "AUTO"})
