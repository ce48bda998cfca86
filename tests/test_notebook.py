"""Executes notebooks/compare_runs.ipynb as shipped (its defaults are `make demo`'s run folders)
so that it cannot rot, and checks the message it gives when those runs are missing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.child_env import python_path_first

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "compare_runs.ipynb"


def _execute(workdir: Path, monkeypatch) -> nbformat.NotebookNode:
    """Run the notebook with ``workdir/notebooks`` as its folder and no MARLAAS_RUN_* set."""
    monkeypatch.delenv("MARLAAS_RUN_A", raising=False)
    monkeypatch.delenv("MARLAAS_RUN_B", raising=False)
    monkeypatch.setenv("PYTHONPATH", python_path_first(ROOT)["PYTHONPATH"])
    (workdir / "notebooks").mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir / "notebooks")}},
    )
    client.execute()
    return nb


def test_notebook_is_committed_with_outputs_cleared():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_notebook_runs_on_the_demo_runs_by_default(two_runs, tmp_path, monkeypatch):
    for name, run in zip(("sequential", "fair"), two_runs, strict=True):
        shutil.copytree(run, tmp_path / "runs" / name)
    nb = _execute(tmp_path, monkeypatch)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    stderr = "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")
    assert "Warning" not in stderr, stderr  # e.g. tqdm's TqdmExperimentalWarning
    assert any("image/png" in o.get("data", {}) for o in outputs), "no figure was displayed"
    html = "".join(str(o.get("data", {}).get("text/html", "")) for o in outputs)
    assert "makespan [s]" in html and "job completion time [s]" in html
    assert "fair vs fifo" in html  # relative difference against the first run


def test_notebook_says_how_to_make_missing_runs(tmp_path, monkeypatch):
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="make demo"):
        _execute(tmp_path, monkeypatch)
