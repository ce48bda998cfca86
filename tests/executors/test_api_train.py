"""``marlaas.train``, the Python API's real run: a workload file whose base model is relative to
the file's folder, one step per job on the session's tiny model (HF + PEFT, ~10 s)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("peft")

import marlaas
from marlaas.output.manifest import read_manifest
from marlaas.ray_cluster import RayUnavailableError

TRACE = Path(__file__).resolve().parents[2] / "traces" / "real-tiny.yaml"


def one_step_workload(folder: Path, model_dir: Path) -> Path:
    """traces/real-tiny.yaml with one step per job, written to ``folder`` beside a link
    ``model`` to the tiny model (its ``base_model.path``, relative to the file)."""
    data = yaml.safe_load(TRACE.read_text())
    data["base_model"]["path"] = "model"
    for job in data["jobs"]:
        job["rl"]["steps"] = 1
    folder.mkdir()
    (folder / "model").symlink_to(model_dir)
    path = folder / "real-tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_train_writes_a_finished_real_run_and_returns_its_result(tiny_model_dir, tmp_path):
    workload = one_step_workload(tmp_path / "workload", tiny_model_dir)
    result = marlaas.train(workload, tmp_path / "run", policy="fair", backend="hf")
    assert isinstance(result, marlaas.RunResult) and result.policy == "fair"
    assert set(result.job_finish_s) == {"emit-a", "emit-z", "emit-e-slow"}
    assert all(finish is not None for finish in result.job_finish_s.values())
    manifest = read_manifest(tmp_path / "run")
    assert (manifest["kind"], manifest["status"]) == ("real", "finished")
    report = marlaas.report(tmp_path / "run", tmp_path / "report")
    assert report.is_file()


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"micro_batch_size": -1}, ValueError, r"^micro_batch_size -1: an integer from 1 to"),
        ({"micro_batch_size": "8"}, TypeError, r"^micro_batch_size: an integer .* not a str$"),
        ({"max_model_len": 0}, ValueError, r"^max_model_len 0: an integer from 1 to"),
        ({"activation_checkpointing": "no"}, TypeError, r"^activation_checkpointing: True or"),
        ({"foo": 1}, TypeError, r"unexpected keyword argument 'foo'"),
        ({"seed": 2**32}, ValueError, r"^seed 4294967296: a seed is an integer from 0 to"),
        ({"seed": "1"}, TypeError, r"^seed: an integer"),
        ({"policy": "nope"}, KeyError, r"unknown policy 'nope'"),
        ({"chat_template": "yes"}, TypeError, r"^chat_template: True, False or None"),
        ({"ray": 5}, TypeError, r"^ray: 'local', 'auto' or 'HOST:PORT', not an int$"),
        ({"ray": "127.0.0.1:1"}, RayUnavailableError, r"--ray 127\.0\.0\.1:1: no Ray head"),
    ],
)
def test_bad_options_are_refused_before_anything_is_written(tmp_path, options, error, message):
    """``marlaas train``'s bounds hold for the API's options too: micro_batch_size=-1 trained
    a whole run, "8", a max_model_len of 0 or an unknown option failed only once the models
    had loaded (after four tries of each piece of work, the run folder left behind), and a
    seed of 2**32 was put into the workload unchecked."""
    with pytest.raises(error, match=message):
        marlaas.train(TRACE, tmp_path / "run", backend="hf", **options)
    assert not (tmp_path / "run").exists()


def test_ray_and_chat_template_reach_the_run_as_train_takes_them(tmp_path, monkeypatch):
    """The API once passed any keyword on to the run; ``ray`` (``train --ray``) and
    ``chat_template`` are its own, and reach the run."""
    import marlaas.executors.train as train_module

    seen = {}

    def fake_train_run(workload, out, policy, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(train_module, "train_run", fake_train_run)
    with pytest.raises(RuntimeError, match="stop here"):
        marlaas.train(TRACE, tmp_path / "run", backend="hf", ray="local", chat_template=False)
    assert (seen["ray"], seen["chat_template"]) == ("local", False)
