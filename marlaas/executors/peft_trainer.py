"""LoRA policy training for many tenants on one base model: one adapter and optimizer per job.

The loss is GRPO with decoupled PPO for stale samples: a truncated importance weight and a
trust region around the weights a step starts from (:mod:`marlaas.executors.grpo`). A step is
one optimizer step, or one per minibatch (a job's ``minibatches``, the workload's
``rl.minibatches``); the adapter's version goes up by one per step either way.

Memory (measured on SmolLM2-135M, docs/real-runs.md): the log-probs of the completion tokens
come from the decoder's hidden states through lm_head -> logsumexp -> gather, a chunk of
positions at a time (marlaas.executors.logprobs), never the [micro_batch, seq, vocab] logits;
activation checkpointing keeps each decoder layer's input only and recomputes the rest in the
backward pass (the same numbers, one more forward pass); micro-batches bound what one
forward/backward pass holds, and their gradients accumulate before one optimizer step.
"""

from __future__ import annotations

import io
import re
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from marlaas.executors.adapter_store import OPTIMIZER_FILE, read_optimizer
from marlaas.executors.completion_logprobs import (
    chunked_logprobs,
    full_logits_logprobs,
    pad_rows,
    plain_head,
    tree_matches,
)
from marlaas.executors.grpo import (
    BackwardPass,
    group_advantages,
    split_minibatches,
    staleness_lr_scale,
    step_stats,
    truncated_surrogate,
)
from marlaas.executors.lora_weights import load_weights, seeded_init, write_adapter
from marlaas.executors.rollout import TrainSample, TrainStats
from marlaas.executors.shared_weights import share_weights
from marlaas.executors.step_settings import check_step_settings
from marlaas.executors.thread_split import cpu_share, share_threads, working
from marlaas.executors.token_layout import layout, padded_layout

_JOB_NAME = re.compile(r"[A-Za-z0-9_-]+")
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


_UNCHECKED = object()


@dataclass
class _Job:
    rank: int
    alpha: float
    optimizer: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    version: int
    minibatches: int = 1
    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    lr_staleness_damping: float = 0.0


class TrainingInterrupted(RuntimeError):
    """A training step stopped by :meth:`PeftTrainer.interrupt` before its first optimizer
    step."""


@contextmanager
def _learning_rate_scaled(optimizer: torch.optim.Optimizer, scale: float) -> Iterator[None]:
    """``optimizer``'s learning rates times ``scale`` inside the block, as they were after."""
    rates = [group["lr"] for group in optimizer.param_groups]
    for group, lr in zip(optimizer.param_groups, rates, strict=True):
        group["lr"] = lr * scale
    try:
        yield
    finally:
        for group, lr in zip(optimizer.param_groups, rates, strict=True):
            group["lr"] = lr


def _never() -> bool:
    return False


class PeftTrainer:
    """One frozen base model, one LoRA adapter + AdamW optimizer per job, GRPO/PPO updates.

    Gradients only ever reach the adapter of the job being trained: it is the only active
    adapter during its step, the others have requires_grad=False, and each optimizer holds only
    its own job's parameters. Methods are thread-safe (one lock): a driver may run train_step
    in a worker thread (asyncio.to_thread) while it keeps generating.

    A job's step takes one optimizer step per minibatch (:meth:`add_job`'s ``minibatches``,
    default 1): its groups in that many parts, each part's loss averaged over its tokens and
    clipped around the step's starting weights (``clip_eps``, ``clip_eps_high`` above), whose
    log-probs a no-grad forward pass computes first for the parts after the first.

    ``micro_batch_size`` sequences go through one forward/backward pass;
    ``activation_checkpointing`` (default on) trades one more forward pass per step for
    activation memory (a 64-sequence SmolLM2 step: 3.9 GB -> 1.3 GB peak resident, measured).
    ``shared_weights`` (Hugging Face name -> tensor, e.g. an in-process engine's
    ``plain_weights()``) replace the base model's frozen weights of the same name, shape,
    dtype, device and values (see :func:`marlaas.executors.shared_weights.share_weights`):
    one copy in the process, not two.
    """

    def __init__(
        self,
        model_dir: str | Path,
        lr: float = 1e-4,
        micro_batch_size: int = 8,
        *,
        max_weight: float = 1.0,
        adv_eps: float = 1e-4,
        max_grad_norm: float = 1.0,
        weight_decay: float = 0.0,
        target_modules: Sequence[str] = DEFAULT_TARGETS,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        activation_checkpointing: bool = True,
        shared_weights: dict[str, torch.Tensor] | None = None,
        sampled_in: str = "float32",
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_dir = Path(model_dir)
        self.lr, self.micro_batch_size = lr, micro_batch_size
        self.max_weight, self.adv_eps = max_weight, adv_eps
        self.max_grad_norm, self.weight_decay = max_grad_norm, weight_decay
        self.target_modules = list(target_modules)
        self.device = torch.device(device)
        self.sampled_in = sampled_in
        """What the engines computed the samples' log-probs in (cluster.engine.dtype): where
        that is this trainer's own dtype, on a CPU, a fresh step reuses them (proximal)."""
        self.processor = cpu_share(self.device.type == "cpu")
        """The processor's threads this trainer shares with an engine computing beside it (on
        a CPU; None elsewhere): :mod:`marlaas.executors.thread_split`."""
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
        self._tree = _UNCHECKED  # whether the prefix-tree layout gives the padded one's log-probs
        self.tokens_read = 0
        """Tokens the forward passes of completion log-probs have read (a counter)."""
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
        minibatches: int = 1,
        clip_eps: float = 0.2,
        clip_eps_high: float | None = None,
        lr_staleness_damping: float = 0.0,
    ) -> None:
        """Create the LoRA adapter and optimizer of `job`.

        With `init_dir` (a folder written by save_adapter) the adapter resumes from those
        weights at `version` (read from the folder when it has version metadata), and the
        optimizer from its saved state when the folder has one.
        `seed` makes the adapter initialization reproducible. Each of its steps takes
        `minibatches` optimizer steps, the ratio to the step's starting weights clipped at
        1 +- `clip_eps` (above at 1 + `clip_eps_high`; None: `clip_eps`;
        :mod:`marlaas.executors.grpo`), each at the learning rate divided by
        1 + `lr_staleness_damping` x its samples' staleness (``grpo.staleness_lr_scale``).
        """
        check_step_settings(minibatches, clip_eps, clip_eps_high, lr_staleness_damping)
        with self._lock:
            state = self._new_job(job, rank, alpha, lr, init_dir, version, seed)
            state.minibatches, state.clip_eps = minibatches, float(clip_eps)
            state.clip_eps_high = None if clip_eps_high is None else float(clip_eps_high)
            state.lr_staleness_damping = float(lr_staleness_damping)
            self._jobs[job] = state

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
            version = load_weights(self.model, job, Path(init_dir), default_version=version)
        elif seed is not None:
            seeded_init(self.model, job, seed)
        params = [p for n, p in self.model.named_parameters() if f".{job}." in n]
        if not params:
            raise RuntimeError(f"no LoRA parameters found for job {job!r}")
        opt = torch.optim.AdamW(params, lr=lr or self.lr, weight_decay=self.weight_decay)
        saved = Path(init_dir) / OPTIMIZER_FILE if init_dir is not None else None
        if saved is not None and saved.is_file():
            state = io.BytesIO(read_optimizer(saved.parent))  # its recorded SHA-256 checked
            # read on the CPU: load_state_dict moves each state to its parameter's device
            opt.load_state_dict(torch.load(state, map_location="cpu", weights_only=True))
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
        """Stop a training step in progress at its next micro-batch, before its first
        optimizer step (it raises :class:`TrainingInterrupted`; the job's adapter and version
        stay as they were). Once a step's first minibatch has taken its optimizer step, the
        step runs to its end: the weights have moved, and only the whole step is a version.
        Steps started after the call run whole. Does not wait for the lock: a run that is
        shutting down calls it so that it need not wait for a whole step."""
        self._interrupts += 1

    def minibatches(self, job: str) -> int:
        """Optimizer steps `job` takes per training step (at most: one per group)."""
        return self._job(job).minibatches

    def train_step(self, job: str, samples: Sequence[TrainSample]) -> TrainStats:
        """One training step of `job` on `samples` (GRPO advantages over all of them, decoupled
        PPO): one optimizer step per minibatch, the version + 1."""
        with self._lock:
            interrupts = self._interrupts
            state = self._job(job)
            if not samples:
                raise ValueError("train_step needs at least one sample")
            adv = group_advantages(samples, self.adv_eps)
            total_tokens = sum(len(s.completion_ids) for s in samples)
            parts = split_minibatches(samples, state.minibatches)
            proximal = self.proximal(job, samples, [i for part in parts[1:] for i in part])
            done, norms = BackwardPass(), []
            try:
                for n, part in enumerate(parts):
                    chosen = [samples[i] for i in part]
                    tokens = sum(len(s.completion_ids) for s in chosen)
                    measured = self.backward(
                        job, chosen, [adv[i] for i in part], tokens,
                        (lambda: self._interrupts != interrupts) if n == 0 else _never,
                        [proximal[i] for i in part] if n else None,
                    )  # fmt: skip
                    done += measured.scaled(tokens, total_tokens)
                    last = n == len(parts) - 1
                    norms.append(self.apply_gradients(job, chosen, new_version=last))
            finally:
                self.end_step(job)
            grad_norm = sum(norms) / len(norms)
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
        stopped: Callable[[], bool] = _never,
        proximal: Sequence[Sequence[float]] | None = None,
    ) -> BackwardPass:
        """Start a step of `job` (or a minibatch of one): its gradients (set to zero first)
        accumulate the GRPO loss of `samples` (each with its advantage), summed over their
        completion tokens and divided by `total_tokens` (the whole minibatch's, which these
        samples may be a part of). `proximal`: the samples' log-probs under the weights the
        step started from (None: the current weights, as in a step's first minibatch).
        Raises :class:`TrainingInterrupted` when `stopped()` before a micro-batch.
        Follow it with :meth:`apply_gradients`, and :meth:`end_step` in any case."""
        with self._lock, working(self.processor, self):
            state = self._job(job)
            self._activate(job)
            self.model.train()
            self._jobs[job].optimizer.zero_grad(set_to_none=True)
            done, read = BackwardPass(), self.tokens_read
            for start in range(0, len(samples), self.micro_batch_size):
                if stopped():
                    raise TrainingInterrupted(f"{job}: training step interrupted")
                share_threads(self.processor)
                chunk = samples[start : start + self.micro_batch_size]
                logp, mask = self._completion_logprobs(chunk)
                old = pad_rows([s.logprobs for s in chunk], mask.shape[1], self.device)
                a = torch.tensor(advantages[start : start + len(chunk)], device=self.device)
                prox = None
                if proximal is not None:
                    rows = proximal[start : start + len(chunk)]
                    prox = pad_rows(rows, mask.shape[1], self.device)
                loss, measured = truncated_surrogate(
                    logp, old, a[:, None], mask, self.max_weight, total_tokens,
                    prox, state.clip_eps, state.clip_eps_high,
                )  # fmt: skip
                loss.backward()
                done += measured
            return replace(done, read_tokens=self.tokens_read - read)

    def proximal(
        self, job: str, samples: Sequence[TrainSample], indices: Sequence[int]
    ) -> dict[int, list[float]]:
        """Index -> log-probs of ``samples[index]``'s completion under `job`'s current weights
        (no gradient), for ``indices`` (none: no forward pass). On a CPU, a step whose
        ``samples`` were all sampled by the version being trained (staleness 0: every step
        of an on-policy job) has them already: those weights' sampling log-probs, float32 as
        the trainer's and within about 1e-5 nat of them (marlaas.executors.grpo), so no
        forward pass either (the simulator charges none: marlaas.sim.cost_model.train_work).
        Engines that sample in bfloat16 (a GPU's; a CPU's with ``cluster.engine.dtype:
        bfloat16``: ``sampled_in``) are about 1e-2 nat away: there the pass is made."""
        if not indices:
            return {}
        version = self._job(job).version
        exact = self.device.type == "cpu" and self.model.dtype == getattr(torch, self.sampled_in)
        if exact and all(
            s.version == version and len(s.logprobs) == len(s.completion_ids) for s in samples
        ):
            return {i: list(samples[i].logprobs) for i in indices}
        prompts = [samples[i].prompt_ids for i in indices]
        logps = self.logprobs(job, prompts, [samples[i].completion_ids for i in indices])
        return dict(zip(indices, logps, strict=True))

    def adapter_parameters(self, job: str) -> list[torch.nn.Parameter]:
        """`job`'s adapter parameters, in a fixed order (their ``grad`` after
        :meth:`backward`)."""
        return self._job(job).params

    def apply_gradients(
        self, job: str, samples: Sequence[TrainSample] = (), *, new_version: bool = True
    ) -> float:
        """Clip `job`'s gradients to ``max_grad_norm`` and take its optimizer step (with
        `new_version`, a step's last: its version + 1); returns the gradient norm before
        clipping. `samples`: those the gradients are of (all the replicas' under data
        parallelism), whose staleness scales the step's learning rate when the job has an
        ``lr_staleness_damping``."""
        with self._lock:
            state = self._job(job)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(state.params, self.max_grad_norm))
            scale = staleness_lr_scale(samples, state.version, state.lr_staleness_damping)
            with _learning_rate_scaled(state.optimizer, scale):
                state.optimizer.step()
            state.optimizer.zero_grad(set_to_none=True)
            if new_version:
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
        with self._lock, working(self.processor, self):
            return self._logprobs(job, prompt_ids, completion_ids)

    def _logprobs(self, job, prompt_ids, completion_ids) -> list[list[float]]:
        chunk = [
            TrainSample(tuple(p), tuple(c), (), 0.0, 0, 0)
            for p, c in zip(prompt_ids, completion_ids, strict=True)
        ]
        out: list[list[float]] = []
        for start in range(0, len(chunk), self.micro_batch_size):
            part = chunk[start : start + self.micro_batch_size]
            share_threads(self.processor)
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
        """(log-probs [B, Cmax], mask [B, Cmax]) of the completion tokens of a micro-batch,
        chunked through the output layer when it is a plain one (checked once), else from
        the full logits (see :mod:`marlaas.executors.completion_logprobs`); the samples'
        shared beginnings read once where the model gives the same log-probs that way
        (checked once, :mod:`marlaas.executors.token_layout`). Adds the tokens the forward
        pass read to ``tokens_read``."""
        if self._tree is _UNCHECKED:
            self._tree = False
            self._tree = tree_matches(self.model, lambda c, t: self._layout_logprobs(c, t)[:2])
        logp, mask, read = self._layout_logprobs(chunk, self._tree)
        self.tokens_read += read
        return logp, mask

    def _layout_logprobs(self, chunk: Sequence[TrainSample], tree: bool):
        """(log-probs, mask, tokens read) of a micro-batch, the prefix tree allowed or not."""
        causal_lm = self._causal_lm()
        if self._head is _UNCHECKED:
            self._head = plain_head(causal_lm, self.pad_id)
        head = self._head
        place = layout(chunk, self.pad_id, self.device, self.model.dtype, tree)
        if head is None:  # a head with extra steps (softcapping, scaling): the full logits
            return (*full_logits_logprobs(self.model, chunk, place, self.device), place.tokens)
        return (*chunked_logprobs(causal_lm, head, chunk, place, self.device), place.tokens)

    def _full_logits_logprobs(self, chunk: Sequence[TrainSample]):
        """The same as _completion_logprobs from the model's full [B, L, vocab] logits (the
        reference it is tested against), padded."""
        place = padded_layout(chunk, self.pad_id, self.device)
        return full_logits_logprobs(self.model, chunk, place, self.device)

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
        meta = {"job": job, "version": state.version, "rank": state.rank, "alpha": state.alpha}
        saved = state.optimizer if optimizer else None
        return write_adapter(self.model, job, meta, out_dir, overwrite, saved)

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


def _pad_id(tokenizer, config) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id, config.eos_token_id):
        if isinstance(candidate, int):
            return candidate
    return 0
