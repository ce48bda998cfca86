"""The Python API: what ``marlaas simulate``, ``train`` and ``report`` do, as functions.

Exported by the package itself (``marlaas.load_workload``, ``marlaas.simulate``,
``marlaas.train``, ``marlaas.report``, ``marlaas.RunResult``), each loaded on first use, so
``import marlaas`` stays light (docs/python-api.md)::

    import marlaas

    workload = marlaas.load_workload("traces/small.yaml", {"jobs.*.rl.steps": 5})
    result = marlaas.simulate(workload, policy="fair", out="runs/api-fair")
    print(result.makespan_s, result.job_finish_s)
    marlaas.report(["runs/api-fair"], out="runs/api-report")

The functions take what the commands take, with the same checks and the same errors (as
exceptions: ``WorkloadError`` for a bad workload, ``OutputError`` for an ``out`` that is not
ours, ``BackendError`` without the training stack), and write the same folders, through the
same rules (marlaas.out_folder: checked and locked before any work, replaced whole).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from marlaas.core.policies import Policy
    from marlaas.drive.result import RunResult
    from marlaas.workload_file import WorkloadFile


def load_workload(path: str | Path, overrides: Mapping[str, Any] | None = None) -> WorkloadFile:
    """Read and validate the workload file ``path``, then apply ``overrides``: dotted paths
    to values, as ``--set`` gives them (``{"jobs.*.rl.steps": 5}``, ``{"scheduling.preset":
    "sequential"}``). Raises ``WorkloadError`` naming the field, the value and the bound."""
    from marlaas.workload_file import load_workload as load

    return load(path, dict(overrides) if overrides else None)


def _workload(workload: WorkloadFile | str | Path) -> WorkloadFile:
    """The workload itself, or the one its path names."""
    return load_workload(workload) if isinstance(workload, (str, Path)) else workload


def simulate(
    workload: WorkloadFile | str | Path,
    policy: Policy | str | None = None,
    *,
    seed: int | None = None,
    cost: str | Path | None = None,
    out: str | Path | None = None,
    progress: bool = False,
) -> RunResult:
    """Simulate ``workload`` (or the workload file it names) under ``policy`` (a name from
    ``marlaas policies`` or a Policy; default: the workload's) and ``seed`` (default: the
    workload's), with the cost profile ``cost`` (a bundled name such as ``a100-7b``, or a
    YAML file from ``marlaas calibrate``; default: the workload's cost model).

    Returns the :class:`~marlaas.RunResult` (records, makespan, each job's finish time). With
    ``out`` it also writes the run folder ``marlaas simulate --out`` writes (events.parquet,
    summary.json, workload.json, manifest.json), which :func:`report` reads. The run's
    invariants are checked either way; ``progress`` shows a progress bar on stderr."""
    from marlaas.sim.run import simulate_logged

    workload = _workload(workload)
    profile = _profile(cost, workload)
    if out is None:
        return simulate_logged(workload, policy, seed, progress, profile)[0]
    from marlaas.out_folder import claim
    from marlaas.runs import write_run_files
    from marlaas.sim.alone import alone_times

    with claim(out, "simulation") as target:  # checked and locked before any work
        alone = alone_times(workload, seed, profile.cost if profile else None, progress)
        result, events, summary = simulate_logged(workload, policy, seed, progress, profile,
                                                  alone_s=alone)  # fmt: skip
        with target.staged() as staging:
            write_run_files(staging, events, summary, workload)
    return result


def _profile(cost: str | Path | None, workload: WorkloadFile):
    """The cost profile ``cost`` names, over the workload's cost model; None for none."""
    if cost is None:
        return None
    from marlaas.sim.cost_profiles import load_profile
    from marlaas.sim.run import cost_of

    return load_profile(cost, base=cost_of(workload))


def train(
    workload: WorkloadFile | str | Path,
    out: str | Path,
    policy: Policy | str | None = None,
    *,
    seed: int | None = None,
    resume: bool = False,
    backend: str = "auto",
    tracker: str | None = None,
    base_dir: str | Path | None = None,
    progress: bool = False,
    **options: Any,
) -> RunResult:
    """Train every job of ``workload`` for real into the run folder ``out``, as ``marlaas
    train`` does: the same scheduler and policy over vLLM (or HF + PEFT, ``backend="hf"``)
    generation and PEFT training. ``resume`` continues a stopped run after its last durable
    step; ``tracker`` (``tensorboard`` or ``wandb``) also logs every step under ``out``.
    ``base_model.path`` is relative to ``base_dir`` (default: the workload file's folder
    when a path is given), then to the working folder. ``options`` go to the executor
    (``micro_batch_size``, ``max_model_len``, ``activation_checkpointing``).

    Needs the training stack (``pip install -e '.[train]'``): without it, a BackendError at
    once, before anything is written. Returns the :class:`~marlaas.RunResult` of the run."""
    from marlaas.executors.backends import require_training_stack

    require_training_stack("marlaas.train")
    from marlaas.executors.train import train_run

    if base_dir is None and isinstance(workload, (str, Path)):
        base_dir = Path(workload).parent
    loaded = _workload(workload)
    *_, result = train_run(
        loaded, out, policy, resume=resume, backend=backend, seed=seed, tracker=tracker,
        base_dir=None if base_dir is None else Path(base_dir), progress=progress, **options,
    )  # fmt: skip
    return result


def report(
    runs: str | Path | Sequence[str | Path], out: str | Path, *, static: bool = False
) -> Path:
    """Build the report of one or more run folders (simulated or real; several are
    compared, against the first), or of one sweep folder, into the folder ``out``, as
    ``marlaas report`` does: report.html, trace.json, summary.json, and with ``static`` the
    figures as PNG and SVG. Returns the path of report.html."""
    from marlaas.report.build import run_report

    folders = [runs] if isinstance(runs, (str, Path)) else list(runs)
    return run_report(folders, out, static=static)
