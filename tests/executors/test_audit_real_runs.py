"""Real runs on the tiny model as a hostile user drives them: a model folder that passes the
checks but does not load, ``evaluate`` of another model's adapters, ``--resume`` with another
``--seed``, the job states of a resumed run, an environment that prints, one that exits, and
a disk that fills up."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from marlaas.cli import main
from marlaas.executors.backends import (
    BackendError,
    ModelLoadError,
    model_load_error,
    resolve_backend,
)
from tests.tiny_cluster import tiny_cluster_yaml

pytest.importorskip("torch")
pytest.importorskip("peft")

PRINTING_ENV = """
from marlaas.envs.base import Environment, StepResult

class Chatty(Environment):
    options = ()

    async def reset(self, seed):
        print("CHATTY reset", seed)
        return "Say a"

    async def step(self, action):
        print("CHATTY step")
        return StepResult("", float("a" in action), True)
"""


EXITING_ENV = """
import sys

from marlaas.envs.base import Environment, StepResult

class Exits(Environment):
    options = ()

    async def reset(self, seed):
        return "Say a"

    async def step(self, action):
        sys.exit(3)
"""


def workload(root: Path, model: Path, steps=(1, 1), env="target_char") -> Path:
    """Two one-turn tenants on ``model``; ``steps`` of each."""
    jobs = ""
    for name, target, n in (("emit-a", "a", steps[0]), ("emit-z", "z", steps[1])):
        args = "{target: " + target + "}" if env == "target_char" else "{}"
        jobs += f"""  - name: {name}
    tenant: t-{target}
    lora_rank: 8
    rl: {{steps: {n}, prompts_per_step: 2, group_size: 2, max_new_tokens: 8,
         max_staleness: 0, learning_rate: 0.02}}
    prompt_tokens: {{dist: constant, value: 24}}
    response_tokens: {{dist: constant, value: 8}}
    env: {{name: {env}, args: {args}}}
"""
    path = root / "w.yaml"
    path.write_text(tiny_cluster_yaml("audit-tiny", model) + "jobs:\n" + jobs)
    return path


def train(path: Path, out: Path, *extra: str) -> int:
    return main(["train", str(path), "--backend", "hf", "--quiet", "--out", str(out), *extra])


def test_a_library_error_is_a_model_load_error_and_marlaas_own_is_not(tmp_path):
    try:
        json.loads("{")  # raised inside the json module: a library's error
    except ValueError as err:
        failed = model_load_error(err, tmp_path, "the engine")
    assert isinstance(failed, ModelLoadError)
    assert str(failed).startswith(f"base_model.path '{tmp_path}': the engine failed to load")
    try:
        resolve_backend("nope")  # raised by marlaas's own code: it says what is wrong itself
    except BackendError as err:
        assert model_load_error(err, tmp_path, "x") is None
    assert model_load_error(KeyboardInterrupt(), tmp_path, "x") is None


def test_truncated_weights_are_one_line_not_a_traceback(tiny_model_dir, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a copy cut short
    assert train(workload(tmp_path, model), tmp_path / "run") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 or "plain Python" in err[0]
    assert "failed to load or run the model (SafetensorError: " in err[-1]
    assert "Traceback" not in "\n".join(err)


def test_evaluate_refuses_adapters_of_another_base_model(tiny_model_dir, tmp_path, capsys):
    other = tmp_path / "other"  # loadable, and not the same model (another config)
    shutil.copytree(tiny_model_dir, other)
    config = json.loads((other / "config.json").read_text())
    config["rms_norm_eps"] = 1e-5
    (other / "config.json").write_text(json.dumps(config))
    (tmp_path / "a").mkdir()
    assert train(workload(tmp_path / "a", other), tmp_path / "run") == 0
    capsys.readouterr()
    on_tiny = workload(tmp_path, tiny_model_dir)
    args = ["evaluate", str(on_tiny), "--run", str(tmp_path / "run"), "--backend", "hf",
            "--quiet", "--prompts", "1"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "its adapters were trained on another base model than the workload's" in err
    assert not (tmp_path / "run" / "eval.json").exists()


def test_evaluate_refuses_a_run_stopped_before_its_first_durable_step(
    tiny_model_dir, tmp_path, capsys
):
    """Such a run is still marked as a fresh start, which a claim empties: evaluate read
    its adapters, then had them removed under it by its own claim."""
    from marlaas.output.staging import STAGING_MARK

    run = tmp_path / "run"
    (run / "adapters" / "emit-a" / "v0").mkdir(parents=True)
    (run / STAGING_MARK).touch()
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    args = ["evaluate", str(workload(tmp_path, tiny_model_dir)), "--run", str(run), "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith("a real training run stopped before its first durable step: nothing "
                        "to evaluate (train it again)")  # fmt: skip
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before


def test_resume_with_another_seed_is_refused_and_states_cover_every_job(
    tiny_model_dir, tmp_path, capsys
):
    out = tmp_path / "run"
    assert train(workload(tmp_path, tiny_model_dir), out, "--seed", "5") == 0
    assert json.loads((out / "workload.json").read_text())["seed"] == 5
    longer = workload(tmp_path, tiny_model_dir, steps=(1, 2))  # emit-a is done already
    capsys.readouterr()
    assert train(longer, out, "--resume") == 2  # the file's seed, 0: other prompts
    assert "(seed 5 -> 0); resume with --seed 5, or train" in capsys.readouterr().err
    assert train(longer, out, "--resume", "--seed", "5") == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seed"] == 5
    assert summary["job_states"] == {"emit-a": "finished", "emit-z": "finished"}


def test_an_environment_that_prints_keeps_stdout_for_the_results(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    (tmp_path / "chatty_env.py").write_text(PRINTING_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = workload(tmp_path, tiny_model_dir, env="chatty_env:Chatty")
    assert train(path, tmp_path / "run") == 0
    out, err = capsys.readouterr()
    assert "CHATTY" not in out
    assert "CHATTY reset" in err
    assert out.splitlines()[-1].startswith(f"wrote {tmp_path / 'run'}/")


def error_lines(err: str) -> list[str]:
    """stderr's lines but blank ones, transformers' loading bars and the line saying the
    build is stale (an edited checkout)."""
    skip = ("plain Python", "it/s]")
    return [line for line in err.splitlines() if line.strip() and not any(s in line for s in skip)]


def test_an_environment_that_exits_is_one_line_and_a_plain_rerun_may_go_on(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    """sys.exit(3) in a step once ended the run with status 3, no message and "Task was
    destroyed but it is pending!"; and the partial folder of the failed fresh start refused
    the plain rerun ("holds an unfinished real training run ... --resume")."""
    (tmp_path / "exiting_env.py").write_text(EXITING_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    assert train(workload(tmp_path, tiny_model_dir, env="exiting_env:Exits"), out) == 2
    err = capsys.readouterr().err
    assert "Task was destroyed" not in err and "Traceback" not in err
    [line] = error_lines(err)
    assert re.fullmatch(r"marlaas: error: EnvStep of job 'emit-[az]' failed 4 times in a row: "
                        r"EnvResultError: environment exiting_env:Exits: step\(\) raised "
                        r"SystemExit\(3\); an environment must not end the process \(raise "
                        r"an exception instead\)", line), line  # fmt: skip
    assert not out.exists()  # nothing was durable: nothing is left
    assert train(workload(tmp_path, tiny_model_dir), out) == 0


def test_a_full_disk_stops_train_with_status_1_naming_the_path(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    """It was status 2, "LoadAdapter ... failed 4 times in a row: OSError: [Errno 28] ..."."""
    from marlaas.executors.trainers import TrainerPool

    def no_space(self, job, spec, seed):  # writing a new job's first version
        path = self.store.path(job, 0) / "adapter_model.safetensors"
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(TrainerPool, "create", no_space)
    out = tmp_path / "run"
    assert train(workload(tmp_path, tiny_model_dir), out) == 1
    [line] = error_lines(capsys.readouterr().err)
    adapter = re.escape(str(out / "adapters")) + r"/emit-[az]/v0/adapter_model\.safetensors"
    assert re.fullmatch(r"marlaas: error: (LoadAdapter|SwapIn) of job 'emit-[az]' could not "
                        rf"write \({adapter}: No space left on device \[ENOSPC\]\); the run "
                        r"stopped: free space or mend the disk \(the steps made durable are "
                        r"kept\)", line), line  # fmt: skip
    assert not out.exists()
