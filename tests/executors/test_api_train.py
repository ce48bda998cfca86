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
