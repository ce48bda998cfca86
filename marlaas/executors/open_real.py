"""The real executor of ``train`` and ``serve``: its backends in this process, or as Ray
actors (``--ray [ADDRESS]``) on a cluster joined or started for the run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from marlaas.core.cluster import Cluster
from marlaas.executors.adapter_store import AdapterStore
from marlaas.executors.backends import EngineSizing
from marlaas.executors.real import RealExecutor

EXECUTOR_OPTIONS = ("max_model_len", "chat_template")
"""Options of the executor itself; the others go to its backends."""


@contextmanager
def open_real_executor(
    sizing: EngineSizing,
    cluster: Cluster,
    *,
    store: AdapterStore,
    model_dir: Path,
    backend: str,
    seed: int,
    env_workers: int,
    ray: str | None = None,
    **options,
) -> Iterator[RealExecutor]:
    """The real executor, open for the block.

    ``ray``: None for backends in this process (:class:`LocalBackends`: ``options`` may pass
    ``generators`` and ``trainers``); else the Ray cluster's address (``auto``, ``HOST:PORT``,
    or ``local``: a local cluster started for the block, see
    :func:`~marlaas.ray_cluster.ray_session`) for :class:`RayBackends`.
    ``env_workers``: the cluster's concurrent environment steps (the Ray pool serves them).
    """
    own = {k: options.pop(k) for k in EXECUTOR_OPTIONS if k in options}
    if ray is None:
        from marlaas.executors.local import LocalBackends

        backends, session = LocalBackends(model_dir, backend, **options), nullcontext()
    else:
        from marlaas.executors.ray_backends import RayBackends
        from marlaas.ray_cluster import ray_session

        given = sorted(k for k in ("generators", "trainers") if options.pop(k, None))
        if given:
            raise ValueError(f"--ray builds every engine and trainer as an actor; {given} given")
        backends = RayBackends(model_dir, backend, env_workers=env_workers, **options)
        actors = len(cluster.engines) + len(cluster.trainers)
        session = ray_session(ray, num_cpus=max(os.cpu_count() or 1, actors))
    with session, RealExecutor(sizing, cluster, store=store, backends=backends,
                               model_dir=model_dir, seed=seed, **own) as executor:  # fmt: skip
        yield executor
