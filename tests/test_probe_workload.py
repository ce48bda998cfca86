"""marlaas probe-workload: the engine at many batch sizes, lengths and adapters, so that
calibration tells its terms apart where one schedule's runs cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from marlaas.cli import main
from marlaas.core.scheduler import Scheduler
from marlaas.runs import write_run
from marlaas.sim.cost_profiles import CostProfile
from marlaas.sim.run import simulate_run
from marlaas.twin.calibrate import calibrate
from marlaas.twin.probe import probe_workload
from marlaas.twin.replay import replay
from marlaas.workload_file import load_workload
from tests.test_twin import TINY, TRUE

SHOW_A = Path(__file__).resolve().parents[1] / "traces" / "twin" / "show-a.yaml"


def fake_run(tmp_path: Path, name: str, workload, policy: str = "fifo") -> Path:
    """``workload`` simulated with TRUE and written as a real run folder."""
    events, summary = simulate_run(workload.model_copy(update={"cost": TRUE}), policy,
                                   kind="real", backend="sim")  # fmt: skip
    engines = {d.name for d in Scheduler.for_workload(workload).cluster.engines}
    summary["engine_warmup_s"] = dict.fromkeys(engines, TRUE.engine_warmup_s)
    return write_run(tmp_path / name, events, summary, workload)


def makespan_error(calibrated_from: list[Path], replayed: Path) -> float:
    """The makespan error of replaying ``replayed`` with a profile calibrated from the runs
    (the regression alone: the refinement by replays would blur what the rows identify)."""
    cost = calibrate(calibrated_from, refine_evaluations=0).cost
    _, _, table = replay(replayed, CostProfile("fit", cost, "", ""))
    return float(table.set_index("metric").loc["makespan", "error"])


def test_a_probe_has_two_jobs_per_batch_size_all_at_once():
    workload = load_workload(SHOW_A)
    probe = probe_workload(workload)
    sizes = [1, 2, 4, 8, 16, 32, 48]  # up to max_seqs 48
    assert [j.rl.group_size for j in probe.jobs] == sizes * 2
    first = workload.jobs[0]
    assert [j.rl.max_new_tokens for j in probe.jobs] == [40] * 7 + [10] * 7
    assert probe.jobs[7].name == "probe-1-short"
    assert probe.scheduling.preset is None and probe.policy == "fifo"
    assert probe.cluster == workload.cluster and probe.base_model == workload.base_model
    for job in probe.jobs:
        assert (job.env.name, job.lora_rank) == (first.env.name, first.lora_rank)
        assert job.rl.prompts_per_step == 1 and job.rl.turns == 1 and job.rl.max_staleness == 0
    calc = probe_workload(workload, [3, 5], job="calc-3")
    assert [j.name for j in calc.jobs] == ["probe-3", "probe-5", "probe-3-short", "probe-5-short"]
    assert {j.env.name for j in calc.jobs} == {"calculator"}
    with pytest.raises(ValueError, match="size 49: one group needs 49 seqs"):
        probe_workload(workload, [4, 49])
    with pytest.raises(ValueError, match="no job named 'x'"):
        probe_workload(workload, job="x")


def test_one_schedule_mispredicts_another_and_with_its_probe_it_does_not(tmp_path):
    # one group of 4 samples at a time, answers of one length: every row decodes 4
    # sequences for 8 iterations, so the rows cannot tell the batch's cost from the base
    one_size = {"jobs.*.rl.steps": 6, "jobs.*.rl.prompts_per_step": 1,
                "scheduling.preset": "sequential"}  # fmt: skip
    run = fake_run(tmp_path, "seq", load_workload(TINY, one_size))
    varied = {
        "jobs.*.rl.steps": 6, "jobs.*.response_tokens": {"dist": "uniform", "low": 2, "high": 8},
        "jobs.emit-a.rl.group_size": 8, "jobs.emit-z.rl.prompts_per_step": 2,
    }  # fmt: skip
    fair = fake_run(tmp_path, "fair", load_workload(TINY, varied), "fair")
    probe = fake_run(tmp_path, "probe", probe_workload(load_workload(TINY)))
    assert abs(makespan_error([run], fair)) > 0.15
    assert abs(makespan_error([run, probe], fair)) < 0.02
    from benchmarks.twin_holdout import holdout_table
    from marlaas.twin.real_run import load_real_run

    table, _ = holdout_table([load_real_run(r) for r in (run, fair)], 0, probes=[probe])
    from_seq = table[table["calibrated on"] == "fifo+sequential"]
    assert abs(from_seq["makespan error"].item()) < 0.02  # the benchmark fits the probe too
    fit = calibrate([run, probe], refine_evaluations=0).cost
    assert fit.decode_per_adapter_ms == pytest.approx(TRUE.decode_per_adapter_ms, rel=0.6)
    assert fit.prefill_tokens_per_s == pytest.approx(TRUE.prefill_tokens_per_s, rel=0.1)


def test_the_command_writes_a_workload_train_can_run_and_refuses_other_files(tmp_path, capsys):
    out = tmp_path / "probe.yaml"
    assert main(["probe-workload", str(SHOW_A), "--out", str(out), "--sizes", "2,8"]) == 0
    assert "batch sizes 2, 8" in capsys.readouterr().out
    probe = load_workload(out)
    assert [j.rl.group_size for j in probe.jobs] == [2, 8, 2, 8]
    assert main(["probe-workload", str(SHOW_A), "--out", str(out)]) == 0  # its own file
    other = tmp_path / "notes.yaml"
    other.write_text("mine\n")
    assert main(["probe-workload", str(SHOW_A), "--out", str(other)]) == 2
    assert "not a probe workload marlaas wrote" in capsys.readouterr().err
    assert other.read_text() == "mine\n"
    assert main(["probe-workload", str(SHOW_A), "--out", str(out), "--sizes", "500"]) == 2
    assert "size 500" in capsys.readouterr().err
