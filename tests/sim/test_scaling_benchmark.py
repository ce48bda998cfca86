"""The scaling benchmark's workloads and figures (benchmarks/scaling.py): the series it
reports must measure what its table says."""

from __future__ import annotations

import pytest

from benchmarks.scaling import best_of, cycled_workload, growth_exponent, main, measure


def test_cycled_workload_scales_the_cluster_with_the_jobs():
    workload = cycled_workload(40, steps=2)
    names = [j.name for j in workload.jobs]
    assert len(names) == len(set(names)) == 40
    assert len({j.tenant for j in workload.jobs}) == 40
    assert workload.jobs[32].name == f"{workload.jobs[0].name}-1"
    assert all(j.rl.steps == 2 for j in workload.jobs)
    pools = {p.role: p.devices for p in workload.cluster.pools}
    assert pools == {"inference": 60, "training": 20}
    assert workload.cluster.total_devices == 80


def test_cycled_workload_refuses_a_count_that_splits_a_trainer():
    with pytest.raises(ValueError, match="multiple of 8"):
        cycled_workload(12)


def test_measure_reports_the_work_an_event_stands_for():
    row = measure(cycled_workload(8, steps=1))
    assert row["jobs"] == 8 and row["events"] > 0
    records = row["records_per_event"] * row["events"]
    assert records == pytest.approx(round(records))
    assert row["us_per_record"] * records == pytest.approx(row["us_per_event"] * row["events"])
    assert 0 < row["loads_per_group"] <= 1  # every adapter is loaded at least once


def test_a_small_workload_is_measured_over_as_many_events_as_asked():
    once = measure(cycled_workload(8, steps=1))
    row = measure(cycled_workload(8, steps=1), min_events=2 * once["events"] + 1)
    assert once["passes"] == 1 and row["passes"] == 3
    assert row["events"] == once["events"]  # per pass: every pass makes the same events
    assert row["records_per_event"] == once["records_per_event"]
    assert row["us_per_event"] * row["events"] * 3 == pytest.approx(row["cpu_s"] * 1e6)
    assert row["ratio"] == pytest.approx(row["us_per_event"] / row["bare_us_per_event"])


def test_more_jobs_on_the_engines_load_adapters_more_often():
    """Each engine holds 8 adapters: with 32 jobs on the engines, groups land more often on
    an engine without their adapter than with 8 (the mix the table's load/grp column shows)."""
    few = measure(cycled_workload(8, steps=2))
    many = measure(cycled_workload(32, steps=2))
    assert many["loads_per_group"] > few["loads_per_group"]


def test_growth_exponent_between_64_and_256_jobs():
    rows = [
        {"label": "cycled", "jobs": 64, "us_per_event": 10.0},
        {"label": "cycled", "jobs": 256, "us_per_event": 20.0},
        {"label": "paper-32", "jobs": 256, "us_per_event": 99.0},
    ]
    assert growth_exponent(rows) == pytest.approx(0.5)
    assert growth_exponent(rows[:1]) is None


def test_best_of_rounds_keeps_the_cheapest_and_says_how_far_apart_they_were():
    rounds = [
        {"cpu_s": 2.0, "us_per_event": 20.0, "peak_rss_mb": 100.0},
        {"cpu_s": 1.6, "us_per_event": 16.0, "peak_rss_mb": 120.0},
        {"cpu_s": 1.8, "us_per_event": 18.0, "peak_rss_mb": 90.0},
    ]
    best = best_of(rounds)
    assert best["cpu_s"] == 1.6 and best["us_per_event"] == 16.0
    assert best["spread"] == pytest.approx(0.25)
    assert best["peak_rss_mb"] == 120.0


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--repeat", "0"], "--repeat 0"),
        (["--min-events", "-1"], "--min-events -1"),
        (["--jobs", "8,x"], "--jobs '8,x'"),
        (["--jobs", "8,12"], "--jobs 8,12"),
        (["--jobs", "0"], "--jobs 0"),
        (["--steps", "0"], "--steps 0"),
        (["--policy", "fastest"], "'fastest'"),
    ],
)
def test_bad_arguments_are_refused_by_name_before_any_run(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert named in captured.err and "round 1/" not in captured.err  # nothing ran
