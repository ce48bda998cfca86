"""``marlaas train`` on a simulator-only install: a one-line error with the install command."""

from __future__ import annotations

import importlib.util

from marlaas.cli import main


def test_train_without_the_training_stack_says_what_to_install(monkeypatch, tmp_path, capsys):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name in ("torch", "peft") else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    out = tmp_path / "run"
    assert main(["train", "traces/real-tiny.yaml", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("marlaas: error: real runs need torch, peft") and "pip install" in err
    assert not out.exists()
