"""A base model folder is checked before any work: a loadable config, weights, a tokenizer
(it was a traceback, and a partial run folder, once the model failed to load)."""

from __future__ import annotations

import json

import pytest

from marlaas.executors.backends import ModelDirError, check_model_dir

CONFIG = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2,
          "hidden_size": 128}  # fmt: skip


def folder(tmp_path, config=CONFIG, files=("model.safetensors", "tokenizer.json")):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    for name in files:
        (tmp_path / name).write_text("")
    return tmp_path


def test_a_complete_folder_passes(tmp_path):
    assert check_model_dir(folder(tmp_path), "m") == tmp_path
    sharded = folder(tmp_path / "s", files=("model-00001-of-00002.safetensors", "tokenizer.model"))
    assert check_model_dir(sharded, "m") == sharded


@pytest.mark.parametrize(
    ("config", "files", "message"),
    [
        ("{nope", ("model.safetensors", "tokenizer.json"), "is not a JSON model config"),
        ("[1]", ("model.safetensors", "tokenizer.json"), "names no model_type"),
        ({}, ("model.safetensors", "tokenizer.json"), "names no model_type"),
        ({**CONFIG, "hidden_size": 0}, ("model.safetensors", "tokenizer.json"),
         "hidden_size: a positive integer, got '0'"),
        ({**CONFIG, "num_hidden_layers": True}, ("model.safetensors", "tokenizer.json"),
         "num_hidden_layers: a positive integer"),
        ({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 64},
         ("model.safetensors", "tokenizer.json"),
         r"\(model_type 'gpt2'\) has no num_hidden_layers, num_attention_heads, hidden_size: "
         "a real run reads a decoder config"),
        (CONFIG, ("tokenizer.json",), "has no weights"),
        (CONFIG, ("model.safetensors",), "has no tokenizer"),
    ],
)  # fmt: skip
def test_what_is_wrong_is_named(tmp_path, config, files, message):
    with pytest.raises(ModelDirError, match=message):
        check_model_dir(folder(tmp_path / "m", config, files), "base_model.path 'm'")
