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
ours, ``BackendError`` without the training stack; a TypeError naming an argument of the
wrong type), and write the same folders, through the same rules (marlaas.out_folder: checked
and locked before any work, replaced whole).
"""

from __future__ import annotations

import numbers
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from marlaas.core.policies import Policy
    from marlaas.drive.result import RunResult
    from marlaas.workload_file import WorkloadFile


def load_workload(path: str | Path, overrides: Mapping[str, Any] | None = None) -> WorkloadFile:
    """Read and validate the workload file ``path``, then apply ``overrides``: dotted paths
    to values, as ``--set`` gives them (``{"jobs.*.rl.steps": 5}``, ``{"scheduling.preset":
    "sequential"}``). Raises ``WorkloadError`` naming the field, the value and the bound, and
    TypeError for a ``path`` that is no path or ``overrides`` that are no such mapping."""
    from marlaas.workload_file import load_workload as load

    return load(_path(path, "path"), _overrides(overrides))


def _path(value: Any, name: str) -> str | os.PathLike:
    """``value``, a path (str or os.PathLike), else a TypeError naming argument ``name``."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name}: a path (str or pathlib.Path), not {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    """What ``value`` is, for an error: ``a dict``, ``None``, ``the class Fifo``."""
    if value is None:
        return "None"
    if isinstance(value, type):
        return f"the class {value.__name__}"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"


def _overrides(overrides: Any) -> dict[str, Any] | None:
    """``overrides`` as a dict of dotted paths to values (None for none), else a TypeError."""
    if overrides is None:
        return None
    if not isinstance(overrides, Mapping):
        raise TypeError(f"overrides: a mapping of dotted paths to values "
                        f"({{'jobs.*.rl.steps': 5}}), not {_kind(overrides)}")  # fmt: skip
    for key in overrides:
        if not isinstance(key, str):
            raise TypeError(f"overrides: key {key!r} is {_kind(key)}; a key is a dotted path "
                            "such as 'jobs.*.rl.steps'")  # fmt: skip
    return dict(overrides) or None


def _not_importing_main(function: str) -> None:
    """Refuse to work in a worker process that is importing the main script: a script run
    again by multiprocessing (marlaas.report(static=True) draws in worker processes, which
    import it) would write the same run folders again from each worker."""
    mp = sys.modules.get("multiprocessing")  # not imported: this is no such worker
    if mp is not None and getattr(mp.current_process(), "_inheriting", False):
        raise RuntimeError(
            f"marlaas.{function}: called while a worker process imports the main script "
            "(multiprocessing's workers import it: those of marlaas.report(static=True) "
            "too); put the script's code under if __name__ == '__main__':"
        )


def _workload(workload: Any) -> WorkloadFile:
    """The workload itself, or the one its path names; else a TypeError."""
    from marlaas.core.workload import Workload

    if isinstance(workload, (str, os.PathLike)):
        return load_workload(workload)
    if not isinstance(workload, Workload):
        raise TypeError(f"workload: a Workload (from marlaas.load_workload) or a workload "
                        f"file's path, not {_kind(workload)}")  # fmt: skip
    return workload


def _seed(seed: Any) -> int | None:
    """``seed`` as an int in 0..MAX_SEED (a run folder's bounds), None for the workload's;
    a TypeError for a non-integer, a WorkloadError out of bounds."""
    from marlaas.core.limits import MAX_SEED
    from marlaas.run_options import check_seed

    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed: an integer from 0 to {MAX_SEED}, not {_kind(seed)}")
    check_seed(int(seed), "seed")
    return int(seed)


def _policy(policy: Any) -> Policy | str | None:
    """``policy``: None, a Policy instance, or a name (an import path is imported) that is
    checked now, before any work; else a TypeError or the policy's error."""
    from marlaas.core.policies import Policy, get_policy
    from marlaas.policy_path import load_policy

    if policy is None or isinstance(policy, Policy):
        return policy
    if isinstance(policy, type) and issubclass(policy, Policy):
        raise TypeError(f"policy: a Policy instance or a name, not {_kind(policy)} "
                        f"(give {policy.__name__}())")  # fmt: skip
    if not isinstance(policy, str):
        raise TypeError(f"policy: a name from marlaas policies or a Policy instance, not "
                        f"{_kind(policy)}")  # fmt: skip
    get_policy(load_policy(policy))
    return policy


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

    _not_importing_main("simulate")
    workload, policy, seed = _workload(workload), _policy(policy), _seed(seed)
    profile = _profile(cost, workload)
    if out is None:
        return simulate_logged(workload, policy, seed, progress, profile)[0]
    from marlaas.out_folder import claim
    from marlaas.runs import write_run_files
    from marlaas.sim.alone import alone_times

    with claim(_path(out, "out"), "simulation") as target:  # checked and locked before any work
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

    return load_profile(_path(cost, "cost"), base=cost_of(workload))


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
    micro_batch_size: int = 8,
    max_model_len: int | None = None,
    activation_checkpointing: bool = True,
    chat_template: bool | None = None,
    ray: str | None = None,
    verbose: bool = False,
) -> RunResult:
    """Train every job of ``workload`` for real into the run folder ``out``, as ``marlaas
    train`` does: the same scheduler and policy over vLLM (or HF + PEFT, ``backend="hf"``)
    generation and PEFT training. ``resume`` continues a stopped run after its last durable
    step; ``tracker`` (``tensorboard`` or ``wandb``) also logs every step under ``out``.
    ``base_model.path`` is relative to ``base_dir`` (default: the workload file's folder
    when a path is given), then to the working folder. ``micro_batch_size`` [sequences per
    forward/backward pass], ``max_model_len`` (the context cap [tokens]; default: the
    model's) and ``activation_checkpointing`` are ``marlaas train``'s options, in its bounds;
    ``chat_template``: wrap prompts in the tokenizer's chat template (default: when it has
    one); ``ray``: run the engines, trainers and environments as Ray actors, on a local
    cluster (``"local"``), the one of ``ray start`` (``"auto"``) or at ``HOST:PORT``, as
    ``train --ray`` does.

    Needs the training stack (``pip install -e '.[train]'``): without it, a BackendError at
    once, before anything is written. Once the arguments are checked, vLLM's, torch's and
    transformers' start-up log lines are quieted as ``marlaas train`` quiets them, for the
    rest of the process (environment variables its children inherit, warning filters; a
    variable the environment already sets, ``VLLM_LOGGING_LEVEL=INFO`` say, wins);
    ``verbose``, as ``train --verbose``, leaves them as they are. Returns the
    :class:`~marlaas.RunResult` of the run."""
    from marlaas.executors.backends import check_backend, require_training_stack, start_training
    from marlaas.executors.tracking import check_tracker

    _not_importing_main("train")
    require_training_stack("marlaas.train")
    options = _train_options(micro_batch_size, max_model_len, activation_checkpointing)
    options["chat_template"] = _chat_template(chat_template)
    _check_ray(ray)
    for name, flag in (("resume", resume), ("verbose", verbose)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name}: True or False, not {_kind(flag)}")
    check_backend(backend)
    if tracker is not None:
        check_tracker(tracker)
    out = _path(out, "out")
    if base_dir is None and isinstance(workload, (str, os.PathLike)):
        base_dir = Path(workload).parent
    base = None if base_dir is None else Path(_path(base_dir, "base_dir"))
    loaded, policy, seed = _workload(workload), _policy(policy), _seed(seed)
    start_training("marlaas.train", verbose=verbose)  # before torch and vLLM are imported
    from marlaas.executors.train import train_run

    *_, result = train_run(
        loaded, out, policy, resume=resume, backend=backend, seed=seed,
        tracker=tracker, base_dir=base, progress=progress, ray=ray, **options,
    )  # fmt: skip
    return result


def _chat_template(value: Any) -> bool | None:
    """``chat_template`` as given (None: the tokenizer's when it has one); else a TypeError."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"chat_template: True, False or None, not {_kind(value)}")
    return value


def _check_ray(ray: Any) -> None:
    """``ray``: None, or a cluster ``train --ray`` takes, checked as it checks one (Ray
    installed, a ``HOST:PORT`` answering) before anything is written; else a TypeError or
    the RayUnavailableError line."""
    if ray is None:
        return
    if not isinstance(ray, str):
        raise TypeError(f"ray: 'local', 'auto' or 'HOST:PORT', not {_kind(ray)}")
    from marlaas.ray_cluster import require_ray

    require_ray("marlaas.train(ray=...)", ray)


def _train_options(micro_batch_size: Any, max_model_len: Any, checkpointing: Any) -> dict:
    """The executor's options, checked as ``marlaas train`` checks --micro-batch-size and
    --max-model-len: a TypeError or ValueError naming the option, before anything is written."""
    from marlaas.core.limits import MAX_TOKENS
    from marlaas.executors.cli import MAX_MICRO_BATCH

    if not isinstance(checkpointing, bool):
        raise TypeError(f"activation_checkpointing: True or False, not {_kind(checkpointing)}")
    return {
        "micro_batch_size": _bounded("micro_batch_size", micro_batch_size, MAX_MICRO_BATCH),
        "max_model_len": None
        if max_model_len is None
        else _bounded("max_model_len", max_model_len, MAX_TOKENS),
        "activation_checkpointing": checkpointing,
    }


def _bounded(name: str, value: Any, high: int) -> int:
    """An integer option in 1..``high`` (``marlaas train``'s bounds on it), as an int; else a
    TypeError or ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: an integer from 1 to {high:,}, not {_kind(value)}")
    if not 1 <= value <= high:
        raise ValueError(f"{name} {value}: an integer from 1 to {high:,}")
    return int(value)


def report(
    runs: str | Path | Iterable[str | Path], out: str | Path, *, static: bool = False
) -> Path:
    """Build the report of one or more run folders (simulated or real; several are
    compared, against the first), or of one sweep folder, into the folder ``out``, as
    ``marlaas report`` does: report.html, trace.json, summary.json, and with ``static`` the
    figures as PNG and SVG. Returns the path of report.html."""
    from marlaas.report.build import run_report

    _not_importing_main("report")
    return run_report(_folders(runs), _path(out, "out"), static=static)


def _folders(runs: Any) -> list[str | os.PathLike]:
    """``runs``: one path or an iterable of paths, as a list; else a TypeError."""
    if isinstance(runs, (str, os.PathLike)):
        return [runs]
    if not isinstance(runs, Iterable) or isinstance(runs, (bytes, bytearray)):
        raise TypeError(f"runs: a run folder's path or a list of them, not {_kind(runs)}")
    return [_path(run, "runs") for run in runs]
