"""Generation on HF transformers + PEFT: the fallback backend when vLLM is not installed.

Adapters are loaded from the folders PeftTrainer.save_adapter writes, into one PeftModel, one
PEFT adapter per (name, version). Concurrent `generate` calls are coalesced: requests that
arrive while a batch runs are sampled together in the next batch, each row with its own
adapter (PEFT mixed-adapter batches, `adapter_names=`), like vLLM's multi-LoRA batches. A
cancelled call (an aborted generation) stops sampling its rows at the batch's next decode
step; its rows stay in the batch's tensors until the batch ends (no continuous batching).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from marlaas.executors.rollout import Completion
from marlaas.executors.thread_split import cpu_share, share_threads, working

BASE = "__base__"  # PEFT's adapter name for "no adapter" in mixed batches


@dataclass
class _Row:
    key: str
    prompt_ids: list[int]
    seed: int
    max_new_tokens: int
    temperature: float
    adapter: str | None
    version: int
    stopped: bool = False
    """Its caller was cancelled (its generation aborted): it samples no more tokens."""


@dataclass
class _Pending:
    rows: list[_Row]
    future: asyncio.Future = field(repr=False)


class HFGenerator:
    """The Generator interface on transformers + PEFT (slow, exact, no extra dependencies)."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        max_batch_size: int = 64,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
        self.model.eval()
        self.device = torch.device(device)
        self.processor = cpu_share(self.device.type == "cpu")
        """The processor's threads shared with a trainer computing beside it (on a CPU):
        :mod:`marlaas.executors.thread_split`."""
        self.max_batch_size = max_batch_size
        self.eos_id = self.tokenizer.eos_token_id
        self.pad_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_id
        )
        self._adapters: dict[tuple[str, int], str] = {}
        self._loading: dict[str, tuple[str, int]] = {}
        """PEFT adapter name -> (adapter, version) of each load in progress."""
        self._queue: list[_Pending] = []
        self._worker: asyncio.Task | None = None
        self._model_lock = threading.Lock()  # adapter loads/deletes vs. a batch in a thread
        self.batches_run = 0
        """Model batches sampled so far (concurrent calls share one batch)."""

    # ---------------------------------------------------------------- adapters
    async def publish(self, adapter: str, version: int, adapter_dir: str | Path) -> None:
        """Load the adapter folder as (adapter, version)."""
        from peft import PeftModel

        key = f"{adapter}__v{version}"
        if (adapter, version) in self._adapters:
            raise ValueError(f"adapter {adapter!r} version {version} is already published")

        def load() -> None:
            with self._model_lock:
                if isinstance(self.model, PeftModel):
                    self.model.load_adapter(str(adapter_dir), adapter_name=key)
                else:
                    self.model = PeftModel.from_pretrained(
                        self.model, str(adapter_dir), adapter_name=key
                    )
                self.model.eval()

        self._loading[key] = (adapter, version)
        try:
            await asyncio.to_thread(load)
        finally:
            del self._loading[key]
        self._adapters[(adapter, version)] = key

    async def retire(self, adapter: str, version: int) -> None:
        """Unload (adapter, version)."""
        key = self._adapters.pop((adapter, version), None)
        if key is None:
            raise KeyError(f"adapter {adapter!r} version {version} is not published")

        def delete() -> None:
            with self._model_lock, warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "active adapter was deleted"
                self.model.delete_adapter(key)
                # A PeftModel cannot run without an adapter: the plain model. The model's own
                # list, not _adapters: a load that finished before this holds the lock is in
                # the model but not yet in _adapters (its task has not resumed).
                if not self.model.peft_config:
                    self.model = self.model.unload()

        await asyncio.to_thread(delete)

    def published(self) -> list[tuple[str, int]]:
        """The (adapter, version) pairs available for generation."""
        return sorted(self._adapters)

    async def resident(self) -> set[tuple[str, int]]:
        """The (adapter, version) pairs the PEFT model itself holds."""
        names = set(getattr(self.model, "peft_config", {}))
        loading = {self._loading[name] for name in names if name in self._loading}
        return (
            {key for key, name in self._adapters.items() if name in names}
            | loading
            | {("?", -1) for name in names - set(self._adapters.values()) - set(self._loading)}
        )

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
        """Sample `n` completions per prompt; list of groups in prompt order."""
        key = BASE if adapter is None else self._adapters.get((adapter, version))
        if key is None:
            raise KeyError(f"adapter {adapter!r} version {version} is not published")
        base_seed = 0 if seed is None else seed
        rows = []
        for i, prompt in enumerate(prompts):
            ids = self._encode(prompt)
            for k in range(n):
                rows.append(
                    _Row(
                        key,
                        ids,
                        _mix(base_seed, i, k),
                        max_new_tokens,
                        temperature,
                        adapter,
                        version if adapter is not None else -1,
                    )
                )
        future = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(rows, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        try:
            flat = await future
        except asyncio.CancelledError:  # aborted: its rows stop at the next decode step
            for row in rows:
                row.stopped = True
            raise
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    async def close(self) -> None:
        """Wait for the running batch and drop the model."""
        if self._worker is not None:
            await self._worker
        self._adapters.clear()

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            batch = [p for p in batch if not p.future.done()]  # cancelled callers: skip
            rows = [r for p in batch for r in p.rows]
            if not rows:
                continue
            try:
                results: list[Completion] = []
                for s in range(0, len(rows), self.max_batch_size):
                    part = rows[s : s + self.max_batch_size]
                    results += await asyncio.to_thread(self._sample, part)
            except Exception as exc:  # hand the error to every waiting caller
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(exc)
                continue
            pos = 0
            for p in batch:
                if not p.future.done():  # a caller cancelled (the run is stopping) gets nothing
                    p.future.set_result(results[pos : pos + len(p.rows)])
                pos += len(p.rows)

    def _encode(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt).input_ids)
        return [int(t) for t in prompt]

    def _sample(self, rows: list[_Row]) -> list[Completion]:
        """Sample all rows in one left-padded batch (runs in a worker thread)."""
        with self._model_lock, torch.no_grad(), working(self.processor, self):
            return self._sample_locked(rows)

    def _sample_locked(self, rows: list[_Row]) -> list[Completion]:
        """The batch's decode loop. A row whose caller was cancelled (``stopped``, read at
        every step) samples no more: it stays in the batch's tensors until the others are
        done, and a batch of only stopped rows ends at its next step. A row stopped before
        its batch starts is not in it: its job may have ended since, and its adapter been
        retired (the rows of a later part of a coalesced batch; a forward pass naming an
        adapter that is gone fails for every row in it)."""
        from transformers import DynamicCache

        if any(r.stopped for r in rows):
            sampled = iter(self._sample_locked([r for r in rows if not r.stopped]))
            return [
                Completion(tuple(r.prompt_ids), (), (), "", "length", r.adapter, r.version)
                if r.stopped else next(sampled)
                for r in rows
            ]  # fmt: skip
        if not rows:
            return []
        self.batches_run += 1
        b, plen = len(rows), max(len(r.prompt_ids) for r in rows)
        ids = torch.full((b, plen), self.pad_id, dtype=torch.long)
        attn = torch.zeros((b, plen), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, plen - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            attn[i, plen - len(r.prompt_ids) :] = 1
        ids, attn = ids.to(self.device), attn.to(self.device)
        gens = [torch.Generator().manual_seed(r.seed) for r in rows]
        kwargs = {}
        if any(r.key != BASE for r in rows) or hasattr(self.model, "peft_config"):
            # A PeftModel gets every row's adapter, "__base__" included: a batch of base rows
            # must not fall back to its active adapter, which retire() may have deleted.
            kwargs["adapter_names"] = [r.key for r in rows]
        out_ids: list[list[int]] = [[] for _ in rows]
        out_lp: list[list[float]] = [[] for _ in rows]
        finish = ["length"] * b
        done = [False] * b
        cache = DynamicCache()
        step_in, pos = ids, (attn.cumsum(1) - 1).clamp(min=0)
        for t in range(max(r.max_new_tokens for r in rows)):
            share_threads(self.processor)  # each step with its share of the threads
            logits = (
                self.model(
                    input_ids=step_in,
                    attention_mask=attn,
                    position_ids=pos,
                    past_key_values=cache,
                    use_cache=True,
                    **kwargs,
                )
                .logits[:, -1]
                .float()
            )  # [B, V]
            logp = torch.log_softmax(logits, dim=-1)
            nxt = torch.empty(b, dtype=torch.long)
            for i, r in enumerate(rows):
                if done[i] or t >= r.max_new_tokens or r.stopped:
                    done[i] = True
                    nxt[i] = self.pad_id
                    continue
                if r.temperature <= 0:
                    tok = int(logits[i].argmax())
                else:
                    probs = torch.softmax(logits[i] / r.temperature, dim=-1).cpu()
                    tok = int(torch.multinomial(probs, 1, generator=gens[i]))
                nxt[i] = tok
                out_ids[i].append(tok)
                out_lp[i].append(float(logp[i, tok]))
                if tok == self.eos_id:
                    done[i], finish[i] = True, "stop"
            if all(done):
                break
            step_in = nxt[:, None].to(self.device)
            pos = pos[:, -1:] + 1
            attn = torch.cat([attn, torch.ones((b, 1), dtype=attn.dtype, device=self.device)], 1)
        return [
            Completion(
                prompt_ids=tuple(r.prompt_ids),
                completion_ids=tuple(out_ids[i]),
                logprobs=tuple(out_lp[i]),
                text=self.tokenizer.decode(out_ids[i], skip_special_tokens=True),
                finish_reason=finish[i],
                adapter=r.adapter,
                version=r.version,
            )
            for i, r in enumerate(rows)
        ]


def _mix(seed: int, i: int, k: int) -> int:
    """A 63-bit seed for sample k of prompt i, derived from the call's seed."""
    digest = hashlib.blake2b(f"{seed}/{i}/{k}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1
