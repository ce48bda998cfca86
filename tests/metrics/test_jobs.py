"""marlaas.metrics.jobs: training progress, each step counted once."""

from __future__ import annotations

from pathlib import Path

from marlaas.metrics.jobs import job_table, train_progress


def test_train_progress_counts_ok_steps(medium_log):
    df, _ = medium_log
    prog = train_progress(df)
    last = prog.groupby("job")["steps_done"].max()
    jobs = job_table(df).set_index("job")
    assert last.to_dict() == jobs["steps"].to_dict()


def test_sequential_simulation_counts_each_step_once():
    from marlaas.sim.run import simulate_run
    from marlaas.workload_file import load_workload

    small = Path(__file__).resolve().parents[2] / "traces" / "small.yaml"
    workload = load_workload(small).with_overrides(
        {"jobs.*.rl.steps": 2, "jobs.*.rl.prompts_per_step": 2, "scheduling.preset": "sequential"}
    )
    events, _ = simulate_run(workload, "fifo", 0)
    assert events.loc[events["kind"] == "train", "device"].nunique() == 8  # 8 rows per step
    jobs = job_table(events)
    assert jobs["steps"].tolist() == [2] * len(workload.jobs)
    assert train_progress(events).groupby("job")["steps_done"].max().eq(2).all()
