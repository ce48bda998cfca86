"""Shared fixtures (synthetic run folders written once per test session) and marks: ``gpu``
(skipped without a CUDA GPU) and ``needs_tool`` (a system program: tests/system_tools.py)."""

from __future__ import annotations

import pytest

from tests import system_tools
from tests.synthetic import synthetic_log, write_run


@pytest.fixture(scope="session")
def small_log():
    """(frame, arrivals) of a small synthetic run: 4 jobs, 3 engines, 1 trainer."""
    return synthetic_log(n_jobs=4, n_rollout=3, n_train=1, steps=5, groups=4, seed=0)


@pytest.fixture(scope="session")
def medium_log():
    """(frame, arrivals) of a medium run: 8 jobs, 6 engines, 2 trainers, staleness 2."""
    return synthetic_log(
        n_jobs=8, n_rollout=6, n_train=2, steps=8, groups=6, staleness_bound=2, seed=3
    )


@pytest.fixture(scope="session")
def two_runs(tmp_path_factory):
    """Two synthetic run folders (events.parquet + summary.json) with different settings."""
    root = tmp_path_factory.mktemp("runs")
    a = write_run(root / "fifo", policy="fifo", seed=0, n_jobs=4, steps=5)
    b = write_run(
        root / "fair",
        policy="fair",
        seed=1,
        n_jobs=6,
        n_rollout=4,
        n_train=2,
        steps=6,
        staleness_bound=2,
    )
    return a, b


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``gpu`` on machines without a CUDA GPU."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in gpu_items:
            item.add_marker(skip)


def pytest_configure(config):
    """Register the mark of tests that need a system program."""
    config.addinivalue_line(
        "markers",
        f"{system_tools.MARKER}(name): needs the system program name (bwrap, chromium): "
        f"skipped without it, failed under {system_tools.REQUIRE_ENV}=1 (CI)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Skip (or, in CI, fail) a test whose system program is missing, before its fixtures."""
    for marker in item.iter_markers(system_tools.MARKER):
        system_tools.require(*marker.args)


def pytest_report_header(config):
    """Which build of the simulator's hot path the tests run (marlaas/compiled.py)."""
    from marlaas import compiled

    return f"marlaas hot path: {compiled.state()}"
