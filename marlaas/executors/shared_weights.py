"""Frozen base weights shared with another user in the process (an in-process engine): one
copy of each tensor, not two."""

from __future__ import annotations

import torch


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
