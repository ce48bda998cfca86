"""The scaling benchmark's workloads and figures (benchmarks/scaling.py): the series it
reports must measure what its table says."""

from __future__ import annotations

import pytest

from benchmarks.scaling import (
    combine,
    cycled_workload,
    growth_exponent,
    main,
    measure,
    median,
    median_of,
    palindrome,
    side_by_side,
)


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


def test_median_of_rounds_keeps_the_middle_one_and_says_how_far_apart_they_were():
    rounds = [
        {"cpu_s": 2.0, "us_per_event": 20.0, "peak_rss_mb": 100.0},
        {"cpu_s": 1.6, "us_per_event": 16.0, "peak_rss_mb": 120.0},
        {"cpu_s": 1.8, "us_per_event": 18.0, "peak_rss_mb": 90.0},
    ]
    middle = median_of(rounds)
    assert middle["cpu_s"] == 1.8 and middle["us_per_event"] == 18.0
    assert middle["spread"] == pytest.approx(0.25)
    assert middle["peak_rss_mb"] == 120.0
    assert median_of(rounds[:2])["us_per_event"] == 16.0  # even: the lower middle one
    assert median([3.0, 1.0, 2.0]) == 2.0 and median([4.0, 1.0, 2.0, 3.0]) == 2.5


def test_a_round_runs_the_sizes_up_and_down_again_centred_on_the_largest():
    assert palindrome(1) == [(0, False)]
    assert palindrome(2) == [(0, True), (1, False), (0, True)]
    assert palindrome(3) == [(0, True), (1, True), (2, False), (1, True), (0, True)]


def test_the_halves_of_a_round_add_up_to_one_measurement():
    half = {"events": 100, "records": 50, "group_turns": 40, "passes": 2, "cpu_s": 0.002,
            "wall_s": 0.003, "bare_us_per_event": 1.0, "peak_rss_mb": 80.0}  # fmt: skip
    other = {**half, "passes": 3, "cpu_s": 0.004, "bare_us_per_event": 0.5, "peak_rss_mb": 90.0}
    row = combine([half, other])
    assert row["passes"] == 5 and row["cpu_s"] == pytest.approx(0.006)
    assert row["us_per_event"] == pytest.approx(0.006 / 500 * 1e6)
    assert row["us_per_record"] == pytest.approx(0.006 / 250 * 1e6)
    assert row["us_per_group"] == pytest.approx(0.006 / 200 * 1e6)
    assert row["ratio"] == pytest.approx(row["us_per_event"] / 0.5)
    assert row["peak_rss_mb"] == 90.0


def test_a_run_prints_the_median_ratio_of_the_last_size_to_the_first(capsys):
    assert main(["--jobs", "8,16", "--steps", "1", "--no-paper", "--repeat", "2",
                 "--min-events", "0", "--same-process"]) == 0  # fmt: skip
    captured = capsys.readouterr()
    assert captured.err.count("round 1/2") == 3  # 8 jobs, 16 jobs, 8 jobs again
    assert "per-event cost 16 vs 8 jobs:" in captured.out
    assert "(median of 2 rounds; round by round" in captured.out
    assert "; per group turn: " in captured.out


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


def test_side_by_side_measures_both_sizes_over_the_same_time():
    """The small size runs again and again while the large one runs once, each timed by its
    own thread: each row's figures are its own size's."""
    small, large = side_by_side(8, 16, 1, "fair")
    alone_small, alone_large = measure(cycled_workload(8, 1)), measure(cycled_workload(16, 1))
    assert (small["jobs"], large["jobs"]) == (8, 16)
    assert small["events"] == alone_small["events"] and large["events"] == alone_large["events"]
    assert large["passes"] == 1 and small["passes"] >= 1
    assert small["cpu_s"] == pytest.approx(small["us_per_event"] * small["events"]
                                           * small["passes"] / 1e6)  # fmt: skip
    assert large["records_per_event"] == alone_large["records_per_event"]


def test_side_by_side_needs_two_sizes(capsys):
    with pytest.raises(SystemExit):
        main(["--jobs", "8", "--side-by-side"])
    assert "two job counts" in capsys.readouterr().err
