"""The GRPO loss with a PPO-style clipped importance ratio, and the statistics of a step.

Per group (the samples of one prompt) the advantage is A = (r - mean(r)) / (std(r) + eps); per
completion token the ratio is rho = exp(logp_new - logp_old) against the sampling log-probs,
and the loss is -min(rho * A, clip(rho, 1 - clip_eps, 1 + clip_eps) * A), averaged over all
completion tokens of the batch. Samples of the current adapter version have rho = 1 up to
numerics; stale ones are corrected and clipped.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from marlaas.executors.rollout import TrainSample, TrainStats


@dataclass
class BackwardPass:
    """What :meth:`marlaas.executors.peft_trainer.PeftTrainer.backward` measured over its
    samples (sums, to be added up over the parts of one step)."""

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


def clipped_surrogate(
    logp: torch.Tensor,
    old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float,
    total_tokens: int,
) -> tuple[torch.Tensor, BackwardPass]:
    """The clipped surrogate loss of a micro-batch (log-probs ``logp`` and sampling log-probs
    ``old`` [B, C], ``advantages`` [B, 1], ``mask`` [B, C] of the completion tokens), summed
    over its completion tokens and divided by the step's ``total_tokens``; and what it
    measured (the loss, ratios and clipped tokens)."""
    ratio = torch.exp(logp - old)
    clipped_ratio = ratio.clamp(1 - clip_eps, 1 + clip_eps)
    per_tok = -torch.minimum(ratio * advantages, clipped_ratio * advantages)
    loss = (per_tok * mask).sum() / max(total_tokens, 1)
    with torch.no_grad():
        r = ratio[mask.bool()]
        clipped = ((ratio * advantages) > (clipped_ratio * advantages))[mask.bool()]
        measured = BackwardPass(
            float(loss), float(r.sum()), float(r.max()) if r.numel() else 0.0, int(clipped.sum())
        )
    return loss, measured


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
