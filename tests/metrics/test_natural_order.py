"""natural_key: names in natural order."""

from __future__ import annotations

from marlaas.metrics.natural_order import natural_key


def test_numbers_in_names_sort_as_numbers():
    names = ["train/0", "rollout/10", "rollout/2", "job-10b", "job-9b", "job-9a"]
    assert sorted(names, key=natural_key) == [
        "job-9a", "job-9b", "job-10b", "rollout/2", "rollout/10", "train/0",
    ]  # fmt: skip


def test_digits_that_are_not_numbers_sort_as_text():
    # '²'.isdigit() is true and int('²') raises: report of an event log with a job named '²'
    # ended in a traceback (ValueError: invalid literal for int() with base 10: '²')
    names = ["²", "j2", "1", "١٢", "j²1"]
    assert sorted(names, key=natural_key) == ["1", "j2", "j²1", "²", "١٢"]
