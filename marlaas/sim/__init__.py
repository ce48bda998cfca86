"""The simulated world: a SimPy executor over a cost model of engines, trainers and envs.

``simulate``, ``simulate_run`` (marlaas.sim.run), ``SimPyExecutor`` (marlaas.sim.executor) and
``CostModel`` (marlaas.sim.cost_model) are importable from here; they load on first use.
Importing it first decides whether the compiled build of the executor runs
(:func:`marlaas.compiled.choose`).
"""

from importlib import import_module

from marlaas import compiled

compiled.choose()

_EXPORTS = {
    "CostModel": "marlaas.sim.cost_model",
    "SimPyExecutor": "marlaas.sim.executor",
    "simulate": "marlaas.sim.run",
    "simulate_run": "marlaas.sim.run",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'marlaas.sim' has no attribute {name!r}")
