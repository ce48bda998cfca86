"""LoRA policy training for many tenants on one base model: one adapter and optimizer per job.

The loss is GRPO with a PPO-style clipped importance ratio: per group (the samples of one
prompt) the advantage is A = (r - mean(r)) / (std(r) + eps); per completion token the ratio is
rho = exp(logp_new - logp_old) against the sampling log-probs, and the loss is
-min(rho * A, clip(rho, 1 - clip_eps, 1 + clip_eps) * A), averaged over all completion tokens
of the batch. Samples of the current adapter version have rho = 1 up to numerics; stale ones are
corrected and clipped.

Memory (measured on SmolLM2-135M, docs/real-runs.md): the log-probs of the completion tokens
come from the decoder's hidden states through lm_head -> logsumexp -> gather, a chunk of
positions at a time (marlaas.executors.logprobs), never the [micro_batch, seq, vocab] logits;
activation checkpointing keeps each decoder layer's input only and recomputes the rest in the
backward pass (the same numbers, one more forward pass); micro-batches bound what one
forward/backward pass holds, and their gradients accumulate before one optimizer step.
"""

from __future__ import annotations

import json
import math
import re
import threading
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from marlaas.atomic import atomic_dir
from marlaas.executors.adapter_store import OPTIMIZER_FILE
from marlaas.executors.logprobs import token_logprobs
from marlaas.executors.rollout import TrainSample, TrainStats

_JOB_NAME = re.compile(r"[A-Za-z0-9_-]+")
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
VERSION_FILE = "marlaas_adapter.json"


_UNCHECKED = object()


@dataclass
class _Job:
    rank: int
    alpha: float
    optimizer: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    version: int


@dataclass
class BackwardPass:
    """What :meth:`PeftTrainer.backward` measured over its samples (sums, to be added up
    over the parts of one step)."""

    loss: float = 0.0
    """Clipped surrogate loss of these samples, over the step's completion tokens."""
    ratio_sum: float = 0.0
    """Sum of the importance ratios of their completion tokens."""
    ratio_max: float = 0.0
    clipped: int = 0
    """Completion tokens whose ratio was clipped."""

    def __add__(self, other: BackwardPass) -> BackwardPass:
        return BackwardPass(
            self.loss + other.loss, self.ratio_sum + other.ratio_sum,
            max(self.ratio_max, other.ratio_max), self.clipped + other.clipped,
        )  # fmt: skip


def step_stats(
    job: str,
    version: int,
    samples: Sequence[TrainSample],
    total_tokens: int,
    done: BackwardPass,
    grad_norm: float,
) -> TrainStats:
    """The statistics of a step of `job` on `samples` that reached `version`."""
    return TrainStats(
        job=job,
        version=version,
        loss=done.loss,
        samples=len(samples),
        tokens=total_tokens,
        mean_reward=sum(s.reward for s in samples) / len(samples),
        mean_ratio=done.ratio_sum / max(total_tokens, 1),
        max_ratio=done.ratio_max,
        clip_fraction=done.clipped / max(total_tokens, 1),
        grad_norm=grad_norm,
        max_staleness=max(version - 1 - s.version for s in samples),
    )


class TrainingInterrupted(RuntimeError):
    """A training step stopped by :meth:`PeftTrainer.interrupt` before its optimizer step."""


class PeftTrainer:
    """One frozen base model, one LoRA adapter + AdamW optimizer per job, GRPO/PPO updates.

    Gradients only ever reach the adapter of the job being trained: it is the only active
    adapter during its step, the others have requires_grad=False, and each optimizer holds only
    its own job's parameters. Methods are thread-safe (one lock): a driver may run train_step
    in a worker thread (asyncio.to_thread) while it keeps generating.

    ``micro_batch_size`` sequences go through one forward/backward pass;
    ``activation_checkpointing`` (default on) trades one more forward pass per step for
    activation memory (a 64-sequence SmolLM2 step: 3.9 GB -> 1.3 GB peak resident, measured).
    ``shared_weights`` (Hugging Face name -> tensor, e.g. an in-process engine's
    ``plain_weights()``) replace the base model's frozen weights of the same name, shape,
    dtype, device and values (see :func:`share_weights`): one copy in the process, not two.
    """

    def __init__(
        self,
        model_dir: str | Path,
        lr: float = 1e-4,
        micro_batch_size: int = 8,
        *,
        clip_eps: float = 0.2,
        adv_eps: float = 1e-4,
        max_grad_norm: float = 1.0,
        weight_decay: float = 0.0,
        target_modules: Sequence[str] = DEFAULT_TARGETS,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        activation_checkpointing: bool = True,
        shared_weights: dict[str, torch.Tensor] | None = None,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_dir = Path(model_dir)
        self.lr, self.micro_batch_size = lr, micro_batch_size
        self.clip_eps, self.adv_eps = clip_eps, adv_eps
        self.max_grad_norm, self.weight_decay = max_grad_norm, weight_decay
        self.target_modules = list(target_modules)
        self.device = torch.device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        base = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=dtype).to(self.device)
        base.requires_grad_(False)
        self.shared = share_weights(base, shared_weights or {})
        if activation_checkpointing:  # keep each layer's input only, recompute the rest
            base.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        self.model = base  # becomes a PeftModel with the first job
        self.pad_id = _pad_id(self.tokenizer, base.config)
        self._jobs: dict[str, _Job] = {}
        self._head = _UNCHECKED  # lm_head when the logits are exactly lm_head(hidden states)
        # One model: steps of different jobs must not interleave (a driver may call from threads).
        self._lock = threading.RLock()
        self._interrupts = 0  # PeftTrainer.interrupt calls so far

    # ---------------------------------------------------------------- jobs
    @property
    def jobs(self) -> list[str]:
        """Names of the jobs this trainer holds."""
        return list(self._jobs)

    def version(self, job: str) -> int:
        """Current adapter version of `job` (0 after add_job, +1 per train_step)."""
        return self._job(job).version

    def add_job(
        self,
        job: str,
        rank: int = 8,
        alpha: float = 16.0,
        lr: float | None = None,
        *,
        init_dir: str | Path | None = None,
        version: int = 0,
        seed: int | None = None,
    ) -> None:
        """Create the LoRA adapter and optimizer of `job`.

        With `init_dir` (a folder written by save_adapter) the adapter resumes from those
        weights at `version` (read from the folder when it has version metadata), and the
        optimizer from its saved state when the folder has one.
        `seed` makes the adapter initialization reproducible.
        """
        with self._lock:
            self._jobs[job] = self._new_job(job, rank, alpha, lr, init_dir, version, seed)

    def _new_job(self, job, rank, alpha, lr, init_dir, version, seed) -> _Job:
        """The job's adapter, added to the model, and its optimizer (not yet among jobs)."""
        from peft import LoraConfig, PeftModel, get_peft_model

        if not _JOB_NAME.fullmatch(job):
            raise ValueError(f"job name {job!r} must match [A-Za-z0-9_-]+")
        if job in self._jobs:
            raise ValueError(f"job {job!r} already exists")
        config = LoraConfig(
            r=rank,
            lora_alpha=alpha,
            lora_dropout=0.0,
            bias="none",
            target_modules=self.target_modules,
            task_type="CAUSAL_LM",
        )
        if not isinstance(self.model, PeftModel):
            self.model = get_peft_model(self.model, config, adapter_name=job)
        else:
            self.model.add_adapter(job, config)
            if self.model.active_adapter not in self.model.peft_config:
                self.model.set_adapter(job)  # the active one was removed with its job
        try:
            return self._fill_job(job, rank, alpha, lr, init_dir, version, seed)
        except BaseException:  # a folder that does not load: the model as it was
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                self.model.delete_adapter(job)
            raise

    def _fill_job(self, job, rank, alpha, lr, init_dir, version, seed) -> _Job:
        """The weights of ``job``'s adapter (just added) and its optimizer."""
        if init_dir is not None:
            version = _load_weights(self.model, job, Path(init_dir), default_version=version)
        elif seed is not None:
            _seeded_init(self.model, job, seed)
        params = [p for n, p in self.model.named_parameters() if f".{job}." in n]
        if not params:
            raise RuntimeError(f"no LoRA parameters found for job {job!r}")
        opt = torch.optim.AdamW(params, lr=lr or self.lr, weight_decay=self.weight_decay)
        saved = Path(init_dir) / OPTIMIZER_FILE if init_dir is not None else None
        if saved is not None and saved.is_file():
            # read on the CPU: load_state_dict moves each state to its parameter's device
            opt.load_state_dict(torch.load(saved, map_location="cpu", weights_only=True))
        for p in params:
            p.requires_grad_(False)  # trainable only while its own step runs
        return _Job(rank, alpha, opt, params, version)

    def write_initial_adapter(
        self, job: str, rank: int, alpha: float, seed: int, out_dir: str | Path
    ) -> Path:
        """Write version 0 of a new job to ``out_dir`` (as save_adapter does: a freshly
        initialised adapter, ``seed`` drawing its A matrices, no optimizer state) without
        taking the job on: it is never among :attr:`jobs`, and nothing of it stays."""
        from peft import PeftModel

        with self._lock:
            state = self._new_job(job, rank, alpha, None, None, 0, seed)
            try:
                return self._write(job, state, out_dir, True, False)
            finally:
                if isinstance(self.model, PeftModel):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", UserWarning)
                        self.model.delete_adapter(job)

    def remove_job(self, job: str) -> None:
        """Drop the adapter and optimizer of `job` (save them first to keep them)."""
        with self._lock, warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "active adapter was deleted"
            self._job(job)
            del self._jobs[job]
            self.model.delete_adapter(job)

    # ---------------------------------------------------------------- training
    def interrupt(self) -> None:
        """Stop a training step in progress at its next micro-batch, before its optimizer
        step (it raises :class:`TrainingInterrupted`; the job's adapter and version stay as
        they were). Steps started after the call run whole. Does not wait for the lock: a
        run that is shutting down calls it so that it need not wait for a whole step."""
        self._interrupts += 1

    def train_step(self, job: str, samples: Sequence[TrainSample]) -> TrainStats:
        """One optimizer step of `job` on `samples` (GRPO advantages, clipped ratio)."""
        with self._lock:
            interrupts = self._interrupts
            self._job(job)
            if not samples:
                raise ValueError("train_step needs at least one sample")
            adv = group_advantages(samples, self.adv_eps)
            total_tokens = sum(len(s.completion_ids) for s in samples)
            try:
                done = self.backward(job, samples, adv, total_tokens,
                                     lambda: self._interrupts != interrupts)  # fmt: skip
                grad_norm = self.apply_gradients(job)
            finally:
                self.end_step(job)
            return step_stats(job, self.version(job), samples, total_tokens, done, grad_norm)

    # A step in three parts, for a caller that runs one step over several trainers (the
    # replicas of marlaas.executors.data_parallel): backward on each, gradients reduced
    # between them, apply_gradients on each, end_step on each whatever happened.
    def backward(
        self,
        job: str,
        samples: Sequence[TrainSample],
        advantages: Sequence[float],
        total_tokens: int,
        stopped: Callable[[], bool] = lambda: False,
    ) -> BackwardPass:
        """Start a step of `job`: its gradients (set to zero first) accumulate the clipped
        surrogate loss of `samples` (each with its advantage), summed over their completion
        tokens and divided by `total_tokens` (the whole step's, which these samples may be a
        part of). Raises :class:`TrainingInterrupted` when `stopped()` before a micro-batch.
        Follow it with :meth:`apply_gradients`, and :meth:`end_step` in any case."""
        with self._lock:
            self._job(job)
            self._activate(job)
            self.model.train()
            self._jobs[job].optimizer.zero_grad(set_to_none=True)
            done = BackwardPass()
            for start in range(0, len(samples), self.micro_batch_size):
                if stopped():
                    raise TrainingInterrupted(f"{job}: training step interrupted")
                chunk = samples[start : start + self.micro_batch_size]
                logp, mask = self._completion_logprobs(chunk)
                old = _pad_rows([s.logprobs for s in chunk], mask.shape[1], self.device)
                a = torch.tensor(advantages[start : start + len(chunk)], device=self.device)
                a = a[:, None]
                ratio = torch.exp(logp - old)
                clipped_ratio = ratio.clamp(1 - self.clip_eps, 1 + self.clip_eps)
                per_tok = -torch.minimum(ratio * a, clipped_ratio * a)
                loss = (per_tok * mask).sum() / max(total_tokens, 1)
                loss.backward()
                with torch.no_grad():
                    r = ratio[mask.bool()]
                    done.loss += float(loss)
                    done.ratio_sum += float(r.sum())
                    if r.numel():
                        done.ratio_max = max(done.ratio_max, float(r.max()))
                    done.clipped += int(((ratio * a) > (clipped_ratio * a))[mask.bool()].sum())
            return done

    def adapter_parameters(self, job: str) -> list[torch.nn.Parameter]:
        """`job`'s adapter parameters, in a fixed order (their ``grad`` after
        :meth:`backward`)."""
        return self._job(job).params

    def apply_gradients(self, job: str) -> float:
        """Clip `job`'s gradients to ``max_grad_norm`` and take its optimizer step (its
        version + 1); returns the gradient norm before clipping."""
        with self._lock:
            state = self._job(job)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(state.params, self.max_grad_norm))
            state.optimizer.step()
            state.optimizer.zero_grad(set_to_none=True)
            state.version += 1
            return grad_norm

    def end_step(self, job: str) -> None:
        """End a step of `job` begun by :meth:`backward`: its adapter frozen again, its
        gradients dropped, the model back in eval mode (whether or not it stepped)."""
        with self._lock:
            if job in self._jobs:
                self._deactivate(job)
            self.model.eval()

    @torch.no_grad()
    def logprobs(
        self,
        job: str | None,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
    ) -> list[list[float]]:
        """Log-probs [nats] of each completion token under `job`'s adapter (None: base model)."""
        with self._lock:
            return self._logprobs(job, prompt_ids, completion_ids)

    def _logprobs(self, job, prompt_ids, completion_ids) -> list[list[float]]:
        chunk = [
            TrainSample(tuple(p), tuple(c), (), 0.0, 0, 0)
            for p, c in zip(prompt_ids, completion_ids, strict=True)
        ]
        out: list[list[float]] = []
        for start in range(0, len(chunk), self.micro_batch_size):
            part = chunk[start : start + self.micro_batch_size]
            if job is None:
                with self._no_adapter():
                    logp, _ = self._completion_logprobs(part)
            else:
                self._job(job)
                self.model.set_adapter(job)
                logp, _ = self._completion_logprobs(part)
            rows = zip(logp, part, strict=True)
            out += [row[: len(s.completion_ids)].tolist() for row, s in rows]
        return out

    def _completion_logprobs(self, chunk: Sequence[TrainSample]):
        """(log-probs [B, Cmax], mask [B, Cmax]) of the completion tokens of a micro-batch.

        The decoder's hidden states, then lm_head -> logsumexp -> gather on the completion
        positions only, a chunk of positions at a time (marlaas.executors.logprobs): the
        [B, L, vocab] logits of the whole micro-batch never exist.
        """
        ids, attn = self._batch_ids(chunk)
        causal_lm = self._causal_lm()
        if self._head is _UNCHECKED:
            self._head = _plain_head(causal_lm, self.pad_id)
        head = self._head
        if head is None:  # a head with extra steps (softcapping, scaling): the full logits
            return self._full_logits_logprobs(chunk)
        decoder = causal_lm.get_decoder()
        hidden = decoder(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state
        rows, cols, targets, slots = [], [], [], []
        for i, s in enumerate(chunk):
            p, c = len(s.prompt_ids), len(s.completion_ids)
            # Token t of the completion (position P+t) is predicted by the state at P+t-1.
            rows += [i] * c
            cols += range(p - 1, p - 1 + c)
            targets += s.completion_ids
            slots += range(c)
        as_long = lambda v: torch.tensor(v, dtype=torch.long, device=self.device)  # noqa: E731
        rows, cols, slots = as_long(rows), as_long(cols), as_long(slots)
        flat = token_logprobs(hidden[rows, cols], head.weight, as_long(targets), head.bias)
        cmax = max(len(s.completion_ids) for s in chunk)
        logp = torch.zeros((len(chunk), cmax), device=self.device).index_put((rows, slots), flat)
        mask = torch.zeros((len(chunk), cmax), device=self.device)
        mask[rows, slots] = 1.0
        return logp, mask

    def _full_logits_logprobs(self, chunk: Sequence[TrainSample]):
        """The same as _completion_logprobs from the model's full [B, L, vocab] logits (the
        reference it is tested against, and the way for heads that are not a plain Linear)."""
        ids, attn = self._batch_ids(chunk)
        logits = self.model(input_ids=ids, attention_mask=attn, use_cache=False).logits.float()
        cmax = max(len(s.completion_ids) for s in chunk)
        # Token t of the completion (position P+t) is predicted by the logits at P+t-1.
        index = torch.zeros((len(chunk), cmax), dtype=torch.long, device=self.device)
        mask = torch.zeros((len(chunk), cmax), device=self.device)
        for i, s in enumerate(chunk):
            p, c = len(s.prompt_ids), len(s.completion_ids)
            index[i, :c] = torch.arange(p - 1, p - 1 + c)
            mask[i, :c] = 1.0
        picked = logits.gather(1, index[:, :, None].expand(-1, -1, logits.shape[-1]))
        targets = torch.zeros_like(index)
        for i, s in enumerate(chunk):
            targets[i, : len(s.completion_ids)] = torch.tensor(s.completion_ids)
        logp = picked.gather(2, targets[:, :, None]).squeeze(2) - picked.logsumexp(dim=2)
        return logp * mask, mask

    def _batch_ids(self, chunk: Sequence[TrainSample]):
        """(input ids [B, L], attention mask [B, L]): prompt + completion, right-padded."""
        seqs = [list(s.prompt_ids) + list(s.completion_ids) for s in chunk]
        length = max(map(len, seqs))
        ids = torch.full((len(seqs), length), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(seqs), length), dtype=torch.long)
        for i, seq in enumerate(seqs):
            ids[i, : len(seq)] = torch.tensor(seq)
            attn[i, : len(seq)] = 1
        return ids.to(self.device), attn.to(self.device)

    def _causal_lm(self):
        """The transformers model under the PEFT wrapper (its LoRA layers injected in place)."""
        from peft import PeftModel

        return self.model.get_base_model() if isinstance(self.model, PeftModel) else self.model

    # ---------------------------------------------------------------- saving
    def save_adapter(
        self,
        job: str,
        version: int,
        out_dir: str | Path,
        *,
        overwrite: bool = False,
        optimizer: bool = False,
    ) -> Path:
        """Write `job`'s adapter (at its current `version`) to `out_dir`, atomically.

        The folder is what PEFT's save_pretrained writes for that one adapter (adapter_config.json
        + adapter_model.safetensors), loadable by vLLM's LoRARequest, plus marlaas_adapter.json,
        and with `optimizer` the optimizer state (optimizer.pt) that add_job restores.
        """
        with self._lock:
            return self._save_adapter(job, version, out_dir, overwrite, optimizer)

    def _save_adapter(self, job: str, version: int, out_dir, overwrite, optimizer) -> Path:
        state = self._job(job)
        if version != state.version:
            raise ValueError(f"job {job!r} is at version {state.version}, not {version}")
        return self._write(job, state, out_dir, overwrite, optimizer)

    def _write(self, job: str, state: _Job, out_dir, overwrite, optimizer) -> Path:
        version = state.version
        with atomic_dir(out_dir, overwrite=overwrite) as tmp:
            self.model.save_pretrained(tmp, selected_adapters=[job])
            nested = tmp / job  # PEFT nests non-"default" adapters in a sub-folder
            if nested.is_dir():
                for item in nested.iterdir():
                    item.rename(tmp / item.name)
                nested.rmdir()
            meta = {"job": job, "version": version, "rank": state.rank, "alpha": state.alpha}
            (tmp / VERSION_FILE).write_text(json.dumps(meta))
            if optimizer:
                torch.save(state.optimizer.state_dict(), tmp / OPTIMIZER_FILE)
        return Path(out_dir)

    # ---------------------------------------------------------------- helpers
    def _job(self, job: str) -> _Job:
        try:
            return self._jobs[job]
        except KeyError:
            raise KeyError(f"unknown job {job!r}; add it with add_job()") from None

    def _activate(self, job: str) -> None:
        self.model.set_adapter(job)
        for other, st in self._jobs.items():
            for p in st.params:
                p.requires_grad_(other == job)

    def _deactivate(self, job: str) -> None:
        for p in self._jobs[job].params:
            p.requires_grad_(False)
            p.grad = None

    def _no_adapter(self):
        return self.model.disable_adapter()


def _seeded_init(model: torch.nn.Module, job: str, seed: int) -> None:
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


def share_weights(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> list[str]:
    """Point ``model``'s parameters at ``tensors`` of the same name (tied parameters once),
    where dtype and device match, the shape matches or has more rows (an engine pads its
    vocabulary: the first rows are used) and sampled rows hold the same values; the names
    shared. The model's own copies are then never read: memory-mapped from the weight file,
    they never become resident. The parameters must stay frozen (both users read them)."""
    shared = []
    for name, param in model.named_parameters():
        other = tensors.get(name)
        if other is None or other.dtype != param.dtype or other.device != param.device:
            continue
        if other.dim() != param.dim() or other.dim() == 0:
            continue
        if other.shape[1:] != param.shape[1:] or other.shape[0] < param.shape[0]:
            continue
        other = other[: param.shape[0]]
        if not _same_rows(param.data, other):
            continue
        param.data = other
        shared.append(name)
    return shared


def _same_rows(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The first, middle and last rows are equal (reading all of ``a`` would page it in)."""
    if a.shape[0] == 0:
        return True
    rows = sorted({0, a.shape[0] // 2, a.shape[0] - 1})
    return all(torch.equal(a[i], b[i]) for i in rows)


def group_advantages(samples: Sequence[TrainSample], eps: float = 1e-4) -> list[float]:
    """GRPO advantages: (reward - group mean) / (group std + eps), std with ddof 0.

    A group whose rewards are all equal carries no signal: its advantages are 0.
    """
    groups: dict[object, list[float]] = defaultdict(list)
    for s in samples:
        groups[s.group_id].append(s.reward)
    stats = {}
    for g, rewards in groups.items():
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        stats[g] = (mean, std)
    out = []
    for s in samples:
        mean, std = stats[s.group_id]
        out.append(0.0 if std == 0.0 else (s.reward - mean) / (std + eps))
    return out


@torch.no_grad()
def _plain_head(causal_lm, pad_id: int) -> torch.nn.Linear | None:
    """The output layer when the model's logits are exactly ``lm_head(decoder hidden states)``
    (checked once on a few tokens: some models scale or softcap them after lm_head), else
    None."""
    head = causal_lm.get_output_embeddings()
    if type(head) is not torch.nn.Linear or not hasattr(causal_lm, "get_decoder"):
        return None
    device = head.weight.device
    ids = torch.tensor([[pad_id, 1, 2, 3]], device=device) % head.weight.shape[0]
    was_training = causal_lm.training
    causal_lm.eval()
    try:
        logits = causal_lm(input_ids=ids).logits.float()
        mine = head(causal_lm.get_decoder()(input_ids=ids).last_hidden_state).float()
    finally:
        causal_lm.train(was_training)
    return head if torch.allclose(logits, mine, rtol=1e-4, atol=1e-4) else None


def _pad_rows(rows: Sequence[Sequence[float]], width: int, device) -> torch.Tensor:
    out = torch.zeros((len(rows), width), device=device)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(list(row), dtype=torch.float32)
    return out


def _pad_id(tokenizer, config) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id, config.eos_token_id):
        if isinstance(candidate, int):
            return candidate
    return 0


def _load_weights(model, job: str, folder: Path, default_version: int) -> int:
    """Load adapter weights saved by save_adapter into `job`; return the saved version."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = load_file(str(folder / "adapter_model.safetensors"))
    set_peft_model_state_dict(model, weights, adapter_name=job)
    meta = folder / VERSION_FILE
    return json.loads(meta.read_text())["version"] if meta.exists() else default_version
