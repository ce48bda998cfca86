"""Keeps generation and training from computing at the same time on a shared CPU.

On a CPU the inference engine and the trainer share the same cores and OpenMP thread pools;
run together they spin against each other (measured: SmolLM2-135M steps tens of times slower).
The gate lets any number of generation calls overlap each other (they share engine batches)
but never a training step; a waiting training step holds back new generation calls so that
it is not starved. Environment steps are not gated: their latency still overlaps everything.
On a GPU setup (engines and trainers on different devices) the driver does not use it.
"""

from __future__ import annotations

import asyncio
import contextlib


class ComputeGate:
    """Shared entry for generation, exclusive entry for training (asyncio)."""

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._generating = 0
        self._training = False
        self._train_waiting = 0

    @contextlib.asynccontextmanager
    async def generation(self):
        """Enter for one generation call."""
        async with self._cond:
            await self._cond.wait_for(lambda: not self._training and not self._train_waiting)
            self._generating += 1
        try:
            yield
        finally:
            async with self._cond:
                self._generating -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def training(self):
        """Enter for one training step (alone)."""
        async with self._cond:
            self._train_waiting += 1
            await self._cond.wait_for(lambda: not self._training and not self._generating)
            self._train_waiting -= 1
            self._training = True
        try:
            yield
        finally:
            async with self._cond:
                self._training = False
                self._cond.notify_all()
