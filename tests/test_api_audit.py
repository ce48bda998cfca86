"""The Python API called as a hostile user would from a script or a notebook: arguments of
the wrong type or out of bounds are a typed exception naming the argument, before any work,
and nothing is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import marlaas
from marlaas.core.policies import get_policy
from marlaas.core.workload import WorkloadError
from tests.child_env import python_path_first

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "traces" / "small.yaml"


@pytest.fixture(scope="module")
def workload():
    return marlaas.load_workload(SMALL, {"jobs.*.rl.steps": 2})


@pytest.mark.parametrize("seed", [2**32, 2**70, -1])
def test_a_seed_a_run_folder_cannot_hold_is_refused_before_writing(workload, tmp_path, seed):
    """A seed of 2**32 or more was simulated and written to summary.json, which report then
    refused as a run folder of no marlaas ("seed: Input should be less than or equal to
    4294967295"); -1 was numpy's ValueError."""
    with pytest.raises(WorkloadError, match=r"^seed -?\d+: a seed is an integer from 0 to"):
        marlaas.simulate(workload, seed=seed, out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("seed", ["3", 3.0, True, float("nan")])
def test_a_seed_that_is_no_integer_is_a_type_error_naming_it(workload, seed):
    """It was mypyc's "int or None object expected; got str" (True ran as seed 1)."""
    with pytest.raises(TypeError, match=r"^seed: an integer from 0 to 4294967295, not a"):
        marlaas.simulate(workload, seed=seed)


def test_a_numpy_integer_seed_is_a_seed(workload, tmp_path):
    """numpy's integers are integers (it was "int or None object expected; got numpy.int64")."""
    result = marlaas.simulate(workload, seed=np.int64(3), out=tmp_path / "run")
    assert result.seed == 3 and type(result.seed) is int
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["seed"] == 3
    assert result.makespan_s == marlaas.simulate(workload, seed=3).makespan_s


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda w: marlaas.simulate(w.model_dump()), r"^workload: a Workload .* not a dict$"),
        (lambda w: marlaas.simulate(None), r"^workload: .* not None$"),
        (lambda w: marlaas.load_workload({"jobs": []}), r"^path: a path \(str or "),
        (lambda w: marlaas.load_workload(SMALL, "jobs.*.rl.steps=5"), r"^overrides: a mapping"),
        (lambda w: marlaas.load_workload(SMALL, [("jobs.*.rl.steps", 5)]), r"not a list$"),
        (lambda w: marlaas.load_workload(SMALL, {5: 5}), r"^overrides: key 5 is an int"),
        (lambda w: marlaas.simulate(w, policy=type(get_policy("fifo"))), r"give Fifo\(\)"),
        (lambda w: marlaas.simulate(w, policy=3), r"^policy: a name .* not an int$"),
        (lambda w: marlaas.simulate(w, cost={"a": 1}), r"^cost: a path .* not a dict$"),
        (lambda w: marlaas.simulate(w, out=5), r"^out: a path .* not an int$"),
        (lambda w: marlaas.report(5, "rep"), r"^runs: a run folder's path or a list"),
        (lambda w: marlaas.report(b"run", "rep"), r"^runs: a run folder.s path .* not a bytes$"),
        (lambda w: marlaas.report(["a", None], "rep"), r"^runs: a path .* not None$"),
        (lambda w: marlaas.report("a", None), r"^out: a path .* not None$"),
    ],
)
def test_an_argument_of_the_wrong_type_is_a_type_error_naming_it(
    workload, call, message, tmp_path, monkeypatch
):
    """They were AttributeError ('dict' object has no attribute 'jobs'), mypyc's "str object
    expected; got type", Path's "expected str, bytes or os.PathLike object", or a dict()
    conversion's ValueError, none naming the argument; a list of pairs was taken as
    overrides."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=message):
        call(workload)


def test_train_quiets_vllms_log_as_the_cli_does_keeping_what_the_user_set(
    workload, tmp_path, monkeypatch
):
    """``marlaas.train`` sets, before vLLM loads, what ``marlaas train`` sets (vLLM's log at
    ERROR and on stderr, torch's and transformers' quieted), through the command's own
    function; a variable the user set stays as set, a refused call sets nothing, and
    ``verbose`` sets what ``train --verbose`` does. A script's run printed vLLM's INFO lines,
    which the command hides. (The training stack is taken as installed, and the run stops
    where it would start: no model loads.)"""
    from marlaas.executors import backends, train
    from marlaas.executors.quiet import ALWAYS_ENV, QUIET_ENV

    class Started(Exception):
        """train_run was called."""

    def started(*args, **kwargs):
        raise Started

    monkeypatch.setattr(backends, "missing_training_stack", lambda: [])
    monkeypatch.setattr(train, "train_run", started)
    for key in (*QUIET_ENV, *ALWAYS_ENV):
        monkeypatch.delenv(key, raising=False)  # each put back as it was after the test
    monkeypatch.setenv("TORCH_LOGS", "+dynamo")  # the user's own

    def settings() -> dict:
        return {key: os.environ.get(key) for key in (*QUIET_ENV, *ALWAYS_ENV)}

    with warnings.catch_warnings():
        before = settings()
        with pytest.raises(ValueError, match=r"^micro_batch_size -1"):
            marlaas.train(workload, tmp_path / "run", micro_batch_size=-1)
        assert settings() == before  # refused: nothing changed
        wrongs = ({"out": 123}, {"backend": "nope"}, {"tracker": "nope"}, {"resume": "yes"})
        for wrong in wrongs:
            with pytest.raises(Exception) as refused:
                marlaas.train(workload, **{"out": tmp_path / "run", **wrong})
            assert not isinstance(refused.value, Started)
            assert settings() == before, wrong
        with pytest.raises(Started):
            marlaas.train(workload, tmp_path / "run", verbose=True)
        assert settings() == {**before, **ALWAYS_ENV}
        with pytest.raises(Started):
            marlaas.train(workload, tmp_path / "run")
    expected = {**ALWAYS_ENV, **QUIET_ENV, "TORCH_LOGS": "+dynamo"}
    assert settings() == expected and expected["VLLM_LOGGING_LEVEL"] == "ERROR"
    assert not (tmp_path / "run").exists()


def test_an_unknown_policy_name_is_refused_before_the_out_folder(workload, tmp_path):
    with pytest.raises(KeyError, match="unknown policy 'nope'"):
        marlaas.simulate(workload, policy="nope", out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_simulate_leaves_the_workload_as_it_was(workload):
    before = workload.model_dump()
    first = marlaas.simulate(workload, policy="fifo")
    second = marlaas.simulate(workload, policy="fifo")
    assert workload.model_dump() == before
    assert first.makespan_s == second.makespan_s and first.job_finish_s == second.job_finish_s


UNGUARDED = """\
import marlaas
print("script ran", flush=True)
workload = marlaas.load_workload("traces/small.yaml", {"jobs.*.rl.steps": 2})
marlaas.simulate(workload, out="runs/fair")
marlaas.report("runs/fair", out="runs/report", static=True)
"""


def test_report_static_from_an_unguarded_script_says_what_to_do(tmp_path):
    """The figure workers import the main script (multiprocessing's rule): unguarded, each ran
    its simulations again, raced for its run folders' locks, and the report died of
    "BrokenProcessPool: A process in the process pool was terminated abruptly". Now the
    workers' marlaas calls refuse at once and the report says how to guard the script."""
    (tmp_path / "traces").symlink_to(ROOT / "traces")
    (tmp_path / "script.py").write_text(UNGUARDED)
    run = subprocess.run([sys.executable, "script.py"], capture_output=True, text=True,
                         cwd=tmp_path, env=python_path_first(ROOT), timeout=300)  # fmt: skip
    assert run.returncode == 1
    assert "OutputError: static figures: a worker process stopped" in run.stderr
    assert "if __name__ == '__main__'" in run.stderr.splitlines()[-1]
    assert "RuntimeError: marlaas.simulate: called while a worker process imports" in run.stderr
    assert "another marlaas command is writing it" not in run.stderr  # no worker simulated
    assert not (tmp_path / "runs" / "report").exists()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["fair"]


def test_a_report_of_no_runs_names_the_argument(tmp_path):
    with pytest.raises(ValueError, match=r"^runs: no run folder given"):
        marlaas.report([], tmp_path / "report")
    assert not (tmp_path / "report").exists()
