"""``marlaas sweep --ray``: the runs as Ray tasks on a local cluster give the process pool's
sweep.csv, summaries and run folders."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("ray")

from marlaas.cli import main
from marlaas.eventlog import read_event_log

SMALL = Path(__file__).resolve().parent.parent / "traces" / "small.yaml"
FAST = ["jobs.*.rl.steps=2", "jobs.*.rl.prompts_per_step=2"]


@pytest.mark.slow
def test_sweep_on_ray_equals_the_process_pool(tmp_path):
    """The same sweep.csv (but the wall times), summaries and event logs, through the CLI:
    a local Ray cluster started and stopped by the command."""
    common = ["sweep", str(SMALL), "--presets", "sequential", "--policies", "fifo,fair",
              "--jobs", "1,2", "--seeds", "0,1", *[f"--set={s}" for s in FAST],
              "--quiet"]  # fmt: skip
    assert main([*common, "--workers", "2", "--out", str(tmp_path / "pool")]) == 0
    assert main([*common, "--ray", "--out", str(tmp_path / "ray")]) == 0
    pool = pd.read_csv(tmp_path / "pool" / "sweep.csv")
    on_ray = pd.read_csv(tmp_path / "ray" / "sweep.csv")
    assert len(pool) == 12
    wall = [c for c in pool.columns if c.startswith("wall")]
    pd.testing.assert_frame_equal(pool.drop(columns=wall), on_ray.drop(columns=wall))
    summaries = [json.loads((tmp_path / k / "summaries.json").read_text()) for k in ("pool", "ray")]
    assert [s["metrics"] for s in summaries[0]] == [s["metrics"] for s in summaries[1]]
    folders = sorted(p.name for p in (tmp_path / "pool" / "runs").iterdir())
    assert folders == sorted(p.name for p in (tmp_path / "ray" / "runs").iterdir())
    for name in folders:
        events = [read_event_log(tmp_path / k / "runs" / name) for k in ("pool", "ray")]
        pd.testing.assert_frame_equal(*events)


@pytest.mark.slow
def test_plan_on_ray_chooses_what_the_process_pool_chooses(tmp_path):
    """``plan --ray``: the same simulations on a local Ray cluster (one session for the whole
    search), the same plan.csv and chosen configuration as with worker processes."""
    common = ["plan", str(SMALL), *[f"--set={s}" for s in FAST], "--set=jobs.*.deadline_s=48",
              "--max-devices", "4", "--seeds", "1", "--quiet"]  # fmt: skip
    assert main([*common, "--workers", "1", "--out", str(tmp_path / "pool")]) == 0
    assert main([*common, "--ray", "--out", str(tmp_path / "ray")]) == 0
    plans = [json.loads((tmp_path / k / "plan.json").read_text()) for k in ("pool", "ray")]
    assert plans[0]["chosen"] == plans[1]["chosen"]
    tables = [
        pd.read_csv(tmp_path / k / "plan.csv").drop(columns="wall_s") for k in ("pool", "ray")
    ]
    pd.testing.assert_frame_equal(*tables)


def test_plan_takes_ray_or_workers_not_both(tmp_path, capsys):
    args = ["plan", str(SMALL), "--set=jobs.*.deadline_s=48", "--ray", "--workers", "2",
            "--out", str(tmp_path / "p")]  # fmt: skip
    assert main(args) == 2
    assert "--ray and --workers" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("command", ["sweep", "plan", "train"])
def test_a_head_that_does_not_answer_is_one_line_at_once(command, tmp_path, capsys):
    """``--ray HOST:PORT`` where nothing listens: one line naming the address before any work
    (Ray itself retries for minutes, printing its own warnings)."""
    if command == "train":
        pytest.importorskip("torch")  # without the training stack, train says that first
    args = {
        "sweep": ["sweep", str(SMALL), "--policies", "fifo"],
        "plan": ["plan", str(SMALL), "--set=jobs.*.deadline_s=48"],
        "train": ["train", str(SMALL.parent / "real-tiny.yaml")],
    }[command]
    assert main([*args, "--ray", "127.0.0.1:1", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and "--ray 127.0.0.1:1: no Ray head answers there" in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_task_whose_worker_dies_runs_again_and_one_that_raises_does_not(tmp_path):
    """A sweep's Ray task whose worker process dies (a node lost, the process killed) is run
    again, elsewhere if need be; an exception is the simulation's own and is raised at once."""
    import os

    from marlaas.sweep import _on_ray

    marker, tries = tmp_path / "died-once", tmp_path / "tries"

    def dies_the_first_time(item: int) -> int:
        with open(tries, "a") as out:
            out.write(f"{item}\n")
        if item == 1 and not marker.exists():
            marker.touch()
            os._exit(1)  # the worker process dies, as on a lost node
        if item == 2:
            raise ValueError("the simulation's own error")
        return item * 10

    results = dict(_on_ray(dies_the_first_time, [0, 1], [0, 1], "local"))
    assert results == {0: 0, 1: 10}
    assert sorted(tries.read_text().split()) == ["0", "1", "1"]  # item 1 ran twice
    tries.unlink()
    with pytest.raises(ValueError, match="the simulation's own error"):
        list(_on_ray(dies_the_first_time, [2], [0], "local"))
    assert tries.read_text().split() == ["2"]  # not retried
