"""The one driver loop: ``drive(scheduler, executor)`` runs a scheduler over any executor.

Executors are the worlds: :class:`marlaas.sim.SimPyExecutor` (a model of engines, trainers and
environments), :class:`marlaas.executors.LocalExecutor` (real vLLM/HF generation, PEFT
training, real environments) and :class:`FixedExecutor` (fixed durations, for tests).
"""

from marlaas.drive.executor import Executor
from marlaas.drive.fixed import FixedExecutor
from marlaas.drive.invariants import InvariantError, check_invariants
from marlaas.drive.loop import Observer, RunError, drive
from marlaas.drive.result import RunResult

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
