"""benchmarks/unseen_goal.py: issue 28's unseen goal per (workload, seed) pair."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.unseen_goal import WORKLOADS, main, sweep_arguments, verdicts
from marlaas.workload_file import load_with_overrides


def _table(**mine) -> pd.DataFrame:
    """fifo, fair and "mine" on seed 3: makespan [s], mean JCT [s], Jain of slowdowns."""
    figures = (mine.get("makespan", 90.0), mine.get("jct", 40.0), mine.get("jain", 0.85))
    runs = {"fifo": (100.0, 50.0, 0.80), "fair": (95.0, 52.0, 0.90), "mine": figures}
    columns = ("makespan_s", "jct_mean_s", "jain_slowdown")
    return pd.DataFrame(
        [{"policy": p, "seed": 3, **dict(zip(columns, f, strict=True))} for p, f in runs.items()]
    )


def test_a_pair_is_met_only_when_no_worse_than_fifo_on_all_three_and_below_fairs_jct():
    assert verdicts(_table(), "mine").met.tolist() == [True]
    assert verdicts(_table(makespan=100.0), "mine").met.tolist() == [True]  # a tie is no worse
    assert not verdicts(_table(makespan=100.1), "mine").met.iloc[0]
    assert not verdicts(_table(jct=50.1), "mine").met.iloc[0]  # worse than fifo's JCT
    assert not verdicts(_table(jain=0.799), "mine").met.iloc[0]
    found = verdicts(_table(jct=52.0), "mine")  # fifo's JCT is 50 s: worse, and equal to fair's
    assert not found.met.iloc[0] and found.jct_vs_fair.iloc[0] == pytest.approx(1.0)
    assert found.jain_minus_fifo.iloc[0] == pytest.approx(0.05)


def test_a_missing_baseline_run_is_named():
    table = _table()
    with pytest.raises(ValueError, match="no fair run of seed 3 beside mine's"):
        verdicts(table[table.policy != "fair"], "mine")
    with pytest.raises(ValueError, match="no other run in the table"):
        verdicts(table, "other")


def test_it_sweeps_a_workload_again_unless_resumed_and_writes_the_verdicts(tmp_path, capsys):
    argv = ["--policies", "srtf", "--out", str(tmp_path), "--workloads", "small", "--seeds", "1"]
    assert main(argv) == 0
    swept = tmp_path / "small" / "sweep.csv"
    assert set(pd.read_csv(swept).policy) == {"fifo", "fair", "srtf"}
    found = pd.read_csv(tmp_path / "verdicts.csv")
    assert found[["workload", "policy", "seed"]].values.tolist() == [["small", "srtf", 1]]
    assert "srtf: the goal met on" in capsys.readouterr().out
    before = swept.stat().st_mtime_ns
    assert main([*argv, "--resume"]) == 0  # every run is there: nothing swept again
    assert swept.stat().st_mtime_ns == before
    assert main(argv) == 0  # without --resume: swept again (the code may have changed)
    assert swept.stat().st_mtime_ns != before
    refused = {"nope,rand-1000,rand-07": "unknown nope, rand-1000, rand-07", "": "at least one"}
    for names, says in refused.items():
        with pytest.raises(SystemExit):
            main(["--policies", "srtf", "--out", str(tmp_path), "--workloads", names])
        assert says in capsys.readouterr().err


def test_a_run_without_figures_is_named():
    table = _table()
    table.loc[table.policy == "fifo", "jain_slowdown"] = float("nan")
    with pytest.raises(ValueError, match="fifo's run of seed 3 has no makespan, JCT or Jain"):
        verdicts(table, "mine")


def test_every_workload_loads_with_its_sweep_arguments(tmp_path):
    argv = ["--policies", "fifo", "--out", str(tmp_path), "--workloads", "small,rand-12"]
    main([*argv, "--seeds", "0"])
    assert (tmp_path / "rand-12.yaml").exists() and not (tmp_path / "rand-13.yaml").exists()
    for name in [*WORKLOADS, "rand-0", "rand-12"]:  # the files written, the traces, the overrides
        args = sweep_arguments(name, tmp_path)
        sets = [args[i + 1] for i, arg in enumerate(args) if arg == "--set"]
        workload = load_with_overrides(args[0], sets)
        assert workload.jobs, name
        if sets:
            assert workload.arrivals is not None, name


def test_a_file_of_the_users_in_out_is_not_replaced(tmp_path, capsys):
    (tmp_path / "verdicts.csv").write_text("my own notes\n")
    with pytest.raises(SystemExit, match=r"verdicts\.csv: exists and is not a file this tool"):
        main(["--policies", "srtf", "--out", str(tmp_path), "--workloads", "small"])
    assert (tmp_path / "verdicts.csv").read_text() == "my own notes\n"
    assert not (tmp_path / "small").exists()
