"""benchmarks/quality_table.py: the change against alone with its paired interval, per seed and
pooled over seeds, from eval.json's outcomes."""

from __future__ import annotations

import json

import pytest

from benchmarks.quality_table import pooled, table
from marlaas.metrics.proportions import paired_difference, wilson_interval


def write_run(folder, outcomes: str | None, makespan_s: float):
    """A run folder with a one-job eval.json (base and version 10) and a summary."""
    import pandas as pd

    folder.mkdir()
    rows = []
    for model, version, result in [("base", -1, "0" * 10), ("trained", 10, outcomes)]:
        correct = (result or "1" * 7 + "0" * 3).count("1")
        low, high = wilson_interval(correct, 10)
        row = {"job": "sum", "tenant": "ann", "model": model, "version": version,
               "prompts": 10, "correct": correct, "accuracy": correct / 10,
               "ci_low": low, "ci_high": high}  # fmt: skip
        if result is not None:
            row["outcomes"] = result
        rows.append(row)
    (folder / "eval.json").write_text(json.dumps(rows))
    (folder / "summary.json").write_text(
        json.dumps({"wall_s": makespan_s, "metrics": {"makespan_s": makespan_s}})
    )
    pd.DataFrame({"job": ["sum"], "start_s": [0.0], "end_s": [makespan_s]}).to_parquet(
        folder / "events.parquet")  # fmt: skip


def test_the_change_carries_its_paired_interval(tmp_path, capsys):
    write_run(tmp_path / "alone", "1111111000", 100.0)
    write_run(tmp_path / "together", "1111110100", 60.0)
    table(tmp_path / "alone", [tmp_path / "together"])
    out = capsys.readouterr().out
    diff = paired_difference("1111111000", "1111110100")
    assert f"+0.0 points [{diff.low * 100:+.1f}, {diff.high * 100:+.1f}]" in out
    assert "0.60x the alone runs' sum" in out


def test_without_outcomes_the_change_is_shown_alone(tmp_path, capsys):
    write_run(tmp_path / "alone", None, 100.0)
    write_run(tmp_path / "together", "1111111100", 60.0)
    table(tmp_path / "alone", [tmp_path / "together"])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("| ann"))
    assert line.endswith("+10.0 points |")


def test_pooled_pairs_join_every_seeds_problems(tmp_path, capsys):
    write_run(tmp_path / "a0", "1111111000", 100.0)
    write_run(tmp_path / "t0", "1111110000", 60.0)
    write_run(tmp_path / "a1", "1111100000", 100.0)
    write_run(tmp_path / "t1", "1111111100", 60.0)
    pooled([f"{tmp_path / 'a0'}:{tmp_path / 't0'}", f"{tmp_path / 'a1'}:{tmp_path / 't1'}"])
    out = capsys.readouterr().out
    diff = paired_difference("1111111000" + "1111100000", "1111110000" + "1111111100")
    assert f"| ann (sum) | 2 | 20 | 60.0% | 70.0% | +10.0 points [{diff.low * 100:+.1f}, " in out


def test_pooled_refuses_a_pair_without_its_colon_or_outcomes(tmp_path):
    write_run(tmp_path / "a", None, 100.0)
    write_run(tmp_path / "t", "1111111000", 60.0)
    with pytest.raises(SystemExit, match="not ALONE:TOGETHER"):
        pooled([str(tmp_path / "a")])
    with pytest.raises(SystemExit, match="without outcomes"):
        pooled([f"{tmp_path / 'a'}:{tmp_path / 't'}"])


def test_a_run_not_yet_evaluated_is_named_with_the_command_that_scores_it(tmp_path):
    write_run(tmp_path / "alone", "1111111000", 100.0)
    (tmp_path / "together").mkdir()  # trained, not evaluated
    with pytest.raises(SystemExit, match=r"together: no eval\.json; .*marlaas evaluate"):
        table(tmp_path / "alone", [tmp_path / "together"])
