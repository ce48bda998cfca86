"""marlaas.table.text_table: the one printer of marlaas's terminal tables (simulate, train,
sweep, calibrate)."""

from __future__ import annotations

from marlaas.table import text_table


def test_columns_line_up_under_their_headers():
    text = text_table([["fair", "1,234"], ["sequential", "5"]], ["schedule", "makespan s"],
                      right=[False, True])  # fmt: skip
    assert text.splitlines() == [
        "schedule    makespan s",
        "----------  ----------",
        "fair             1,234",
        "sequential           5",
    ]


def test_cells_are_printed_as_given_and_lines_end_at_their_text():
    text = text_table([["utilization", "48.5%"], ["  pool rollout", "54.8%"], ["x", "007"]])
    assert text.splitlines() == [
        "utilization     48.5%",
        "  pool rollout  54.8%",  # the indent is kept
        "x               007",  # not parsed as a number
    ]
    long = text_table([["a", "a long note"], ["b", "short"]], ["k", "fit"])
    assert all(line == line.rstrip() for line in long.splitlines())
