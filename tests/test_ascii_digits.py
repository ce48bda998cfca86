"""Digits that ``str.isdigit`` accepts and ``int`` refuses (``'²'``, ``'١'``) in what users,
clients and the environment hand over: read as no number, never an uncaught ValueError."""

from __future__ import annotations

import pytest

from marlaas.core.ascii_digits import ascii_digits

NOT_ASCII_DIGITS = ["²", "1²", "١٢", "⁴2"]
"""Each holds str.isdigit; int() refuses '²', '1²' and '⁴2', and reads '١٢' (Arabic-Indic) as 12."""


def test_only_ascii_digits_are_a_number():
    assert ascii_digits("0") and ascii_digits("0042")
    for text in ["", "-1", "1.0", " 1", *NOT_ASCII_DIGITS]:
        assert not ascii_digits(text), text


@pytest.mark.parametrize("text", NOT_ASCII_DIGITS)
def test_evaluates_versions_name_a_non_ascii_digit_as_no_version(text):
    from marlaas.executors.evaluate import pick_versions

    with pytest.raises(
        ValueError, match=rf"--versions: no adapter version {text!r}; there are 1\.\.3"
    ):
        pick_versions([1, 2, 3], text)


@pytest.mark.parametrize("text", NOT_ASCII_DIGITS)
def test_a_ray_address_whose_port_is_not_ascii_digits_has_no_port(text):
    from marlaas.ray_cluster import _host_port

    assert _host_port(f"head:{text}") == ("head", None)


@pytest.mark.parametrize("text", NOT_ASCII_DIGITS)
def test_a_server_sent_event_id_that_is_not_ascii_digits_is_not_read(text):
    from marlaas.client import _parse_sse

    events = list(_parse_sse(iter(["id: 7", 'data: {"a": 1}', "", f"id: {text}", "data: 2", ""])))
    assert [(e.id, e.data) for e in events] == [(7, {"a": 1}), (7, 2)]


@pytest.mark.parametrize("text", NOT_ASCII_DIGITS)
def test_a_blocked_signal_list_reads_only_ascii_digits(text, monkeypatch):
    from marlaas import allocator

    monkeypatch.setenv(allocator.STARTED_AGAIN_ENV, f"2, {text},15")
    assert allocator.first_mask() == {2, 15}
