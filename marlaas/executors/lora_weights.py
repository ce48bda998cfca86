"""A job's LoRA weights in a PEFT model: drawn from a seed of their own, loaded from an
adapter folder, and written to one (what vLLM and PEFT load, plus marlaas's metadata)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from marlaas.atomic import atomic_dir
from marlaas.executors.adapter_store import (
    META_FILE,
    OPTIMIZER_FILE,
    OPTIMIZER_SHA256,
    WEIGHTS_FILE,
    WEIGHTS_SHA256,
    read_weights,
    weights_digest,
)


def seeded_init(model: torch.nn.Module, job: str, seed: int) -> None:
    """Draw ``job``'s LoRA weights again from a generator of their own seeded with ``seed``:
    the very values PEFT draws from the global generator after ``torch.manual_seed(seed)``
    (per adapted module, in order: its A and B layers' default init, then A again, Kaiming
    uniform with a = sqrt(5); B stays zero), but the same whatever else runs, where the
    global generator is shared with every thread (a generation sampling while a job is
    admitted). tests/executors/test_peft_trainer.py checks the values are PEFT's."""
    generator = torch.Generator().manual_seed(seed)
    layers: dict[str, dict[str, torch.nn.Parameter]] = {}
    for name, param in model.named_parameters():
        for part in ("lora_A", "lora_B"):
            module, found, _ = name.partition(f".{part}.{job}.")
            if found:
                layers.setdefault(module, {})[part] = param
    with torch.no_grad():
        for layer in layers.values():
            a, b = layer["lora_A"], layer["lora_B"]
            drawn = [torch.empty(shape, dtype=a.dtype) for shape in (a.shape, b.shape, a.shape)]
            for weights in drawn:
                torch.nn.init.kaiming_uniform_(weights, a=math.sqrt(5), generator=generator)
            a.copy_(drawn[2])


def load_weights(model, job: str, folder: Path, default_version: int) -> int:
    """Load adapter weights saved by :func:`write_adapter` into `job`; return the saved
    version (``default_version`` when the folder has no metadata). The weights file is read
    once, and refused (an AdapterError naming it) when it is damaged or its bytes are not
    those whose SHA-256 its metadata recorded."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load

    weights = load(read_weights(folder))
    set_peft_model_state_dict(model, weights, adapter_name=job)
    meta = folder / META_FILE
    return json.loads(meta.read_text())["version"] if meta.exists() else default_version


def write_adapter(
    model,
    job: str,
    meta: dict,
    out_dir: str | Path,
    overwrite: bool,
    optimizer: torch.optim.Optimizer | None = None,
) -> Path:
    """Write `job`'s adapter to `out_dir`, atomically: what PEFT's save_pretrained writes for
    that one adapter, ``meta`` (job, version, rank, alpha) and the SHA-256 of the weights
    file as written (hashed from the page cache: adapters are small) as marlaas_adapter.json,
    and the state of ``optimizer`` when given (its SHA-256 recorded there too)."""
    with atomic_dir(out_dir, overwrite=overwrite) as tmp:
        model.save_pretrained(tmp, selected_adapters=[job])
        nested = tmp / job  # PEFT nests non-"default" adapters in a sub-folder
        if nested.is_dir():
            for item in nested.iterdir():
                item.rename(tmp / item.name)
            nested.rmdir()
        digests = {WEIGHTS_SHA256: weights_digest(tmp / WEIGHTS_FILE)}
        if optimizer is not None:  # through a Python file: a full disk is then an OSError
            with open(tmp / OPTIMIZER_FILE, "wb") as handle:  # (torch's own writer: no errno)
                torch.save(optimizer.state_dict(), handle)
            digests[OPTIMIZER_SHA256] = weights_digest(tmp / OPTIMIZER_FILE)
        (tmp / META_FILE).write_text(json.dumps({**meta, **digests}))
    return Path(out_dir)
