"""``marlaas sweep``: the run plan, the comparison table, equality with single runs, CLI errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from marlaas.cli import main
from marlaas.sim.alone import alone_times
from marlaas.sim.run import simulate_run
from marlaas.sweep import SweepError, comparison, execute, first_jobs, plan, variants
from marlaas.workload_file import load_workload

SMALL = Path(__file__).resolve().parent.parent / "traces" / "small.yaml"
FAST = ["jobs.*.rl.steps=2", "jobs.*.rl.prompts_per_step=2"]
"""Overrides that shrink small.yaml to a fraction of a second per run."""

COLUMNS = [
    "workload", "jobs", "variant", "schedule", "policy", "seed", "makespan_s", "jct_mean_s",
    "jct_p90_s", "jct_max_s", "utilization", "idle_rollouts", "idle_trainer", "idle_environment",
    "idle_weight_sync", "idle_adapter_load", "idle_staleness", "idle_no_work", "jain_slowdown",
    "jain_tenant_gpu_s", "jain_tenant_gpu_s_per_weight", "staleness_mean", "staleness_max",
    "adapter_swaps", "wall_s", "util_x", "speedup", "time_reduction",
]  # fmt: skip


@pytest.fixture(scope="module")
def small():
    w = load_workload(SMALL)
    return w.with_overrides({"jobs.*.rl.steps": 2, "jobs.*.rl.prompts_per_step": 2})


def test_plan_is_the_product(small):
    runs = plan(small, ["fifo", "fair"], ["seed=1", "seed=2"], jobs=[1, 3], seeds=[0, 5])
    assert len(runs) == 2 * 2 * 2 * 2
    assert {r.variant for r in runs} == {"seed=1", "seed=2"}
    assert {len(r.workload.jobs) for r in runs} == {1, 3}
    assert runs[0].workload.jobs[0].name == small.jobs[0].name


def test_variants_grid_only_for_repeated_keys():
    got = variants(["a=1", "b=x", "a=2", "c=[1, 2]", "b=y"])
    assert got == [
        {"a": 1, "b": "x", "c": [1, 2]},
        {"a": 1, "b": "y", "c": [1, 2]},
        {"a": 2, "b": "x", "c": [1, 2]},
        {"a": 2, "b": "y", "c": [1, 2]},
    ]
    assert variants(None) == [{}]


def test_first_jobs(small):
    assert [j.name for j in first_jobs(small, 2).jobs] == [j.name for j in small.jobs[:2]]
    assert first_jobs(small, len(small.jobs)) is small
    with pytest.raises(SweepError, match="the workload has 4 jobs"):
        first_jobs(small, 5)


def test_plan_runs_presets_with_the_workload_policy(small):
    runs = plan(small, ["fair"], presets=["sequential", "sync"])
    assert [(r.schedule, r.policy) for r in runs] == [
        ("sequential", small.policy), ("sync", small.policy), ("fair", "fair"),
    ]  # fmt: skip
    assert runs[0].workload.scheduling.preset == "sequential"
    assert runs[2].workload.scheduling.preset is None
    with pytest.raises(SweepError, match="unknown preset 'fast'"):
        plan(small, ["fair"], presets=["fast"])


def test_rows_equal_single_runs_and_parallel_equals_serial(small):
    runs = plan(small, ["fair"], seeds=[3], presets=["sequential"])
    rows, summaries = execute(runs, workers=2, progress=False)
    serial, _ = execute(runs, workers=1, progress=False)
    for run, row, again, summary in zip(runs, rows, serial, summaries, strict=True):
        alone = alone_times(run.workload, 3)  # what `marlaas simulate` computes
        _, single = simulate_run(run.workload, run.policy, 3, alone_s=alone)
        m = single["metrics"]
        assert summary["metrics"] == m and summary["alone_s"] == alone
        assert row["makespan_s"] == m["makespan_s"] == again["makespan_s"]
        assert row["jct_mean_s"] == m["jct_mean_s"] and row["jct_p90_s"] == m["jct_p90_s"]
        assert row["utilization"] == m["utilization"]
        assert row["jain_slowdown"] == m["fairness"]["jain_slowdown"] is not None


def test_table_columns_and_ratios(small):
    runs = plan(small, ["fifo"], jobs=[1, 2], presets=["sequential"])
    rows, _ = execute(runs, 1, progress=False)
    table = comparison(rows, "sequential")
    assert all(c in table.columns for c in COLUMNS)
    assert {"util_colocated", "util_rollout", "util_train"} <= set(table.columns)
    base = table[table["schedule"] == "sequential"]
    assert (base["util_x"] == 1).all() and (base["time_reduction"] == 0).all()
    fifo = table[(table["schedule"] == "fifo") & (table["jobs"] == 2)].iloc[0]
    seq = table[(table["schedule"] == "sequential") & (table["jobs"] == 2)].iloc[0]
    assert fifo["speedup"] == pytest.approx(seq["makespan_s"] / fifo["makespan_s"])
    busy_plus_idle = table["utilization"] + table.filter(like="idle_").sum(axis=1)
    assert busy_plus_idle.to_numpy() == pytest.approx(1.0, abs=1e-6)


def sweep(*args: str) -> int:
    return main(["sweep", str(SMALL), *args, *[f"--set={s}" for s in FAST], "--quiet"])


def test_cli_writes_csv_summaries_and_table(tmp_path, capsys):
    out = tmp_path / "cmp"
    code = sweep(
        "--presets", "sequential", "--policies", "fair", "--jobs", "1,2", "--workers", "1",
        "--out", str(out),
    )  # fmt: skip
    assert code == 0
    table = pd.read_csv(out / "sweep.csv")
    assert list(table["schedule"]) == ["sequential", "fair"] * 2
    assert list(table["policy"]) == ["fair", "fair"] * 2
    assert list(table["jobs"]) == [1, 1, 2, 2]
    assert len(json.loads((out / "summaries.json").read_text())) == 4
    printed = capsys.readouterr().out
    assert "ratios vs sequential" in printed and "makespan s" in printed
    assert (out / "table.txt").read_text().splitlines()[0] in printed
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_cli_variants_from_repeated_set(tmp_path):
    out = tmp_path / "v"
    args = ["--policies", "fifo", "--set", "seed=1", "--set", "seed=2", "--out", str(out)]
    assert sweep(*args) == 0
    assert list(pd.read_csv(out / "sweep.csv")["variant"]) == ["seed=1", "seed=2"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policies", "fifo,nope"], "unknown policy 'nope'"),
        (["--policies", "sequential"], "is a preset of mechanism settings"),
        (["--presets", "fast"], "unknown preset 'fast'"),
        ([], "give --policies and/or --presets"),
        (["--policies", "fifo,,fair"], "--policies 'fifo,,fair': empty item"),
        (["--policies", "fifo,fifo"], "repeated fifo"),
        (["--policies", "fifo", "--jobs", "1,x"], "--jobs '1,x': expected integers"),
        (["--policies", "fifo", "--jobs", "0"], "--jobs 0: the workload has 4 jobs"),
        (["--policies", "fifo", "--jobs", "9"], "--jobs 9: the workload has 4 jobs (use 1..4)"),
        (["--policies", "fifo", "--set", "nope=1"], "nope: unknown field 'nope'"),
        (["--policies", "fifo", "--set", "rl"], "--set 'rl': expected key=value"),
        (["--policies", "fifo", "--set", "jobs.*.rl.steps=-1"], "rl.steps: Input should be"),
        (["--policies", "fifo", "--baseline", "sync"], "--baseline 'sync' is not one of"),
        (["--policies", "fifo", "--set", "x=[1"], "--set 'x=[1': not a YAML value"),
        (["--policies", "fifo", "--workers", "0"], "--workers 0: must be >= 1"),
    ],
)
def test_cli_errors_are_one_line(tmp_path, capsys, args, message):
    out = tmp_path / "x"
    assert sweep(*args, "--out", str(out)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("marlaas: error: ") and message in err
    if "rl.steps" not in message:  # a bad workload gets one line per bad field
        assert len(err.splitlines()) == 1
    assert not out.exists()


def test_cli_keeps_each_runs_event_log_unless_no_events(tmp_path):
    from marlaas.eventlog import read_event_log
    from marlaas.sweep import run_folder

    out = tmp_path / "kept"
    assert sweep("--policies", "fifo,fair", "--workers", "1", "--out", str(out)) == 0
    summaries = json.loads((out / "summaries.json").read_text())
    folders = sorted(p.name for p in (out / "runs").iterdir())
    assert folders == sorted(run_folder(4, "-", s["policy"], s["seed"]) for s in summaries)
    for summary in summaries:  # (no presets here: each run's schedule is its policy)
        run = out / "runs" / run_folder(4, "-", summary["policy"], summary["seed"])
        assert json.loads((run / "summary.json").read_text())["metrics"] == summary["metrics"]
        assert len(read_event_log(run)) == summary["metrics"]["n_rows"]
    bare = tmp_path / "bare"
    assert sweep("--policies", "fifo", "--no-events", "--out", str(bare)) == 0
    assert not (bare / "runs").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_run_folder_names():
    from marlaas.sweep import run_folder

    assert run_folder(8, "-", "fair", 0) == "jobs8-fair-seed0"
    assert run_folder(2, 'scheduling.barrier=true rl.x="a b"', "sync", 3) == (
        "jobs2-sync-scheduling_barrier_true_rl_x_a_b-seed3"
    )


def test_a_value_given_twice_for_one_key_is_refused():
    """It made two identical rows and one run folder."""
    with pytest.raises(SweepError, match="seed is given this value twice"):
        variants(["seed=1", "seed=1"])
    assert len(variants(["seed=1", "seed=2"])) == 2


@pytest.mark.parametrize("option", ["--jobs", "--seeds", "--policies", "--presets"])
def test_an_empty_list_is_refused_not_taken_for_all(tmp_path, capsys, option):
    args = ["sweep", str(SMALL), "--policies", "fifo", option, "", "--out", str(tmp_path / "o")]
    assert main(args) == 2
    assert f"{option} '': empty item" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_variants_whose_folder_names_collide_get_folders_of_their_own(tmp_path):
    from marlaas.report.sweep_page import load_sweep
    from marlaas.sweep import run_folders

    keys = [(4, 'name="a_b"', "fifo", 0), (4, 'name="a.b"', "fifo", 0), (4, "-", "fifo", 0)]
    assert run_folders(keys) == [
        "jobs4-fifo-name_a_b-seed0-2", "jobs4-fifo-name_a_b-seed0", "jobs4-fifo-seed0"
    ]  # fmt: skip
    assert run_folders(keys[::-1]) == run_folders(keys)[::-1]  # whatever the row order
    out = tmp_path / "sw"
    assert sweep("--policies", "fifo", "--set", "name=a.b", "--set", "name=a_b", "--workers",
                 "1", "--out", str(out)) == 0  # fmt: skip
    table = load_sweep(out)
    assert table["folder"].notna().all() and table["folder"].nunique() == 2
    for folder, variant in zip(table["folder"], table["variant"], strict=True):
        name = json.loads((folder / "summary.json").read_text())["workload"]
        assert variant == f'name="{name}"'  # each row reads its own run's folder
