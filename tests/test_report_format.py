"""Formatting helpers, human names, run labels and the tenant palette of reports."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from marlaas.report import fmt
from marlaas.report.compare import difference_table, relative_difference
from marlaas.report.labels import device_noun, run_label, run_labels, slug
from marlaas.report.load import locate_runs
from marlaas.report.names import IDLE_CAUSES, metric
from marlaas.report.palette import N_DISTINCT, job_colors, tenant_colors


def test_counts_percentages_and_numbers():
    assert fmt.count(1234567.0) == "1,234,567"
    assert fmt.count(10) == "10"
    assert fmt.percent(0.5534) == "55.3%"
    assert fmt.number(970.6) == "970.6"
    assert fmt.number(12345.67) == "12,345.7"
    assert fmt.number(0.83612) == "0.836"
    assert fmt.number(8.0) == "8" and fmt.number(0.0) == "0"  # no .000
    assert fmt.number(1120.0) == "1,120.0"  # measurements keep their decimal
    assert fmt.seconds(308.64) == "308.6 s"
    assert fmt.relative(-0.6824) == "-68.2%" and fmt.relative(0.61) == "+61.0%"
    assert fmt.relative(0.0) == "0.0%"
    for helper in (fmt.count, fmt.percent, fmt.number, fmt.relative):
        assert helper(None) == helper(math.nan) == helper(math.inf) == "-"


def test_table_renames_columns_and_formats_values():
    frame = pd.DataFrame(
        {
            "job": ["a", "b"],
            "steps": [10, 2000],
            "jct_s": [129.34, math.nan],
            "utilization": [0.5, 0.25],
            "device_s": [1072.31, 5.0],
            "devices": [48, 16],
        }
    )
    out = fmt.table(frame)
    assert list(out.columns) == [
        "job",
        "training steps",
        "job completion time [s]",
        "utilization",
        "device-seconds received [device-s]",
        "devices",
    ]
    assert out.iloc[1].tolist() == ["b", "2,000", "-", "25.0%", "5", "16"]
    assert out.iloc[0].tolist() == ["a", "10", "129.3", "50.0%", "1,072.3", "48"]
    assert out.iloc[0, 2] == "129.3"


def test_metric_names_say_what_and_which_unit():
    assert metric("idle_by_cause_device_s.rollouts")[0] == "idle: waiting for rollouts [device-s]"
    assert metric("utilization_by_pool.train")[0] == "utilization, pool train"
    name, formatter = metric("utilization")
    assert "GPU" not in name and formatter(0.344) == "34.4%"
    assert metric("n_devices", devices="GPU")[0] == "GPUs"
    assert metric("adapter_swaps")[1](284.0) == "284"
    for cause in ("rollouts", "trainer", "environment", "weight_sync", "adapter_load",
                  "staleness", "barrier", "no_work"):  # fmt: skip
        name, text = IDLE_CAUSES[cause]
        assert name and len(text) > 30


def test_difference_table_is_relative_to_the_first_run():
    a = {"makespan_s": 200.0, "utilization": 0.5, "adapter_swaps": 10, "staleness_mean": 0.0}
    b = {"makespan_s": 150.0, "utilization": 0.6, "adapter_swaps": 10, "staleness_mean": 1.0}
    table = difference_table({"seq": a, "fair": b})
    assert list(table.columns) == ["seq", "fair", "fair vs seq"]
    assert table.loc["makespan [s]"].tolist() == ["200.0", "150.0", "-25.0%"]
    assert table.loc["utilization, all devices"].tolist() == ["50.0%", "60.0%", "+20.0%"]
    assert table.loc["adapter loads", "fair vs seq"] == "0.0%"
    assert table.loc["staleness, mean [versions]", "fair vs seq"] == "-"  # against 0
    assert relative_difference(3.0, 2.0) == pytest.approx(0.5)
    assert math.isnan(relative_difference(None, 2.0))


def test_run_labels_use_preset_then_policy_and_tell_twins_apart():
    sim = {"policy": "fair", "seed": 0, "kind": "simulation"}
    assert run_label(sim) == "fair"
    assert run_label({"policy": "sync_barrier", "preset": "sync"}) == "sync"
    assert run_label({}, fallback="my-folder") == "my-folder"
    real = {"policy": "fair", "seed": 0, "kind": "real"}
    assert run_labels([real, sim]) == ["fair (real run)", "fair (simulation)"]
    seeds = [{"policy": "fifo", "seed": 1}, {"policy": "fifo", "seed": 2}, {"policy": "fair"}]
    assert run_labels(seeds) == ["fifo (seed 1)", "fifo (seed 2)", "fair"]
    jobs = [{"policy": "fair", "metrics": {"n_jobs": n}} for n in (1, 8)]
    assert run_labels(jobs) == ["fair (1 job)", "fair (8 jobs)"]
    assert run_labels([{"policy": "x"}, {"policy": "x"}]) == ["x", "x #2"]
    assert run_labels([{}, {}], ["a", "b"]) == ["a", "b"]
    assert slug("fair (real run)") == "fair-real-run"
    assert device_noun({}) == "device" and device_noun({"accelerator": "GPU"}) == "GPU"


def _lab(colors: list[str]) -> np.ndarray:
    """CIE L*a*b* of '#rrggbb' colours (D65)."""
    rgb = np.array([[int(c[i : i + 2], 16) / 255 for i in (1, 3, 5)] for c in colors])
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = lin @ m.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], 1)


def test_palette_keeps_36_tenants_apart():
    tenants = [f"t{i:02d}" for i in range(1, N_DISTINCT + 1)]
    colors = tenant_colors(reversed(tenants))  # order of appearance does not matter
    assert list(colors) == tenants
    lab = _lab(list(colors.values()))
    dist = np.sqrt(((lab[:, None] - lab[None]) ** 2).sum(-1))
    np.fill_diagonal(dist, np.inf)
    assert dist.min() > 12  # CIE76 delta E: every pair clearly different
    consecutive = np.sqrt(((lab[1:] - lab[:-1]) ** 2).sum(-1))
    assert consecutive.min() > 30  # t01/t02, alice/bob: far apart
    assert len(set(tenant_colors(["alice", "bob", "carol", "dave"]).values())) == 4


def test_job_colors_are_shades_of_their_tenant():
    job_tenant = {f"j{t}-{k}": f"t{t:02d}" for t in range(N_DISTINCT) for k in range(3)}
    jobs, tenants = job_colors(job_tenant), tenant_colors(job_tenant.values())
    assert len(set(jobs.values())) == len(jobs)
    names = list(tenants)
    lab = _lab(list(tenants.values()))
    for job, tenant in job_tenant.items():
        nearest = np.argmin(((lab - _lab([jobs[job]])[0]) ** 2).sum(-1))
        assert names[nearest] == tenant, job


def test_jobs_of_no_tenant_get_a_colour_of_their_own():
    colors = job_colors({"a": "alice", "x": "", "y": ""})  # rewards.csv without tenants
    assert len(set(colors.values())) == 3
    assert job_colors({"x": ""}).keys() == {"x"}


def test_locate_runs_finds_demo_runs_from_a_subfolder(two_runs, tmp_path, monkeypatch):
    import shutil

    shutil.copytree(two_runs[0], tmp_path / "runs" / "fair")
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    assert locate_runs("runs/fair") == [tmp_path / "runs" / "fair"]
    with pytest.raises(FileNotFoundError, match="make demo"):
        locate_runs("runs/fair", "runs/sequential")
