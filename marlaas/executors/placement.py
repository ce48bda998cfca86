"""Where the real executor's engines, trainers and environments run: the ``Backends`` it
enacts decisions over (:class:`marlaas.executors.real.RealExecutor`).

Two implementations hold them: :class:`marlaas.executors.local.LocalBackends` builds them in
this process, :class:`marlaas.executors.ray_backends.RayBackends` as Ray actors, each behind a
thin forwarder with the same methods, so the executor cannot tell them apart. Neither imports
torch or Ray here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from marlaas.core.cluster import Cluster
from marlaas.envs.base import Environment
from marlaas.executors.backends import EngineSizing
from marlaas.executors.rollout import Generator

EXECUTOR_KINDS = ("local", "ray")
"""What ``summary.json``'s ``executor`` says ran a real run."""


class BackendRestarted(RuntimeError):
    """The backend behind a forwarder died and was restarted: the call did not run on the
    backend the executor had filled (it now holds nothing); its ``restarted`` is True until
    the executor has put back what it had put there."""


class Backends(Protocol):
    """The engines, trainers and environment factory of one real run.

    ``engines`` (engine name -> :class:`~marlaas.executors.rollout.Generator`) and
    ``trainers`` (trainer name -> a PeftTrainer, or a forwarder with its methods) are filled
    by :meth:`open`. A forwarder whose backend was restarted has ``restarted`` set (see
    :class:`BackendRestarted`).
    """

    kind: str
    """``local`` or ``ray`` (:data:`EXECUTOR_KINDS`)."""
    engines: dict[str, Generator]
    trainers: dict[str, Any]
    tokenizer: Any
    """The base model's tokenizer (episodes are tokenized in the driver)."""
    make_env: Callable[[str, dict], Environment]
    """A new environment instance for one episode: ``make_env(name, args)``."""

    async def open(
        self, sizing: EngineSizing, cluster: Cluster, max_model_len: int, seed: int
    ) -> None:
        """Build the engines and trainers of ``cluster`` (the models load)."""
        ...

    def owns(self, engine: str) -> bool:
        """Whether ``engine`` was built here (else it was passed in, e.g. by a test)."""
        ...

    async def close(self) -> None:
        """Release what was built (also after a partial :meth:`open`)."""
        ...
