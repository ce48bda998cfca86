"""Executes notebooks/compare_runs.ipynb on two synthetic runs so that it cannot rot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "compare_runs.ipynb"


def test_notebook_is_committed_with_outputs_cleared():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_compare_runs_notebook_executes(two_runs, monkeypatch):
    monkeypatch.setenv("MARLAAS_RUN_A", str(two_runs[0]))
    monkeypatch.setenv("MARLAAS_RUN_B", str(two_runs[1]))
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "no figure was displayed"
    html = "".join(str(o.get("data", {}).get("text/html", "")) for o in outputs)
    assert "makespan_s" in html and "jct_s" in html
