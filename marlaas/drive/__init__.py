"""The one driver loop: ``drive(scheduler, executor)`` runs a scheduler over any executor.

Executors are the worlds: :class:`marlaas.sim.SimPyExecutor` (a model of engines, trainers and
environments), :class:`marlaas.executors.real.RealExecutor` (real vLLM/HF generation, PEFT
training, real environments; in this process or as Ray actors) and :class:`FixedExecutor`
(fixed durations, for tests). Importing it first decides whether the compiled build of the
loop runs (:func:`marlaas.compiled.choose`).
"""

from marlaas import compiled

compiled.choose()  # before the imports below: they load compiled modules

from marlaas.drive.executor import Executor  # noqa: E402
from marlaas.drive.fixed import FixedExecutor  # noqa: E402
from marlaas.drive.invariants import InvariantError, check_invariants  # noqa: E402
from marlaas.drive.loop import Observer, RunError, drive  # noqa: E402
from marlaas.drive.result import RunResult  # noqa: E402

__all__ = [
    "Executor",
    "FixedExecutor",
    "InvariantError",
    "Observer",
    "RunError",
    "RunResult",
    "check_invariants",
    "drive",
]
