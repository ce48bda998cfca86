"""The CLI's error printer: one line of printable characters, whatever the input held."""

from __future__ import annotations

import errno

from marlaas.cli import main
from marlaas.terminal import MAX_ERROR_CHARS, error_line, printable


def test_control_characters_and_escapes_are_shown_escaped():
    forged = "job\nmarlaas: error: \x1b[31mred\x1b[0m\r\t\x00\x9b2J\u202eevil"
    shown = printable(forged)
    assert shown.isprintable()
    assert shown == ("job\\nmarlaas: error: \\x1b[31mred\\x1b[0m\\r\\t\\x00\\x9b2J\\u202eevil")
    assert printable("naïve café 東京 ok") == "naïve café 東京 ok"  # printable text stays


def test_an_error_line_is_one_capped_line():
    line = error_line(ValueError("a\nb" + "x" * 5000))
    assert line.startswith("marlaas: error: a\\nb") and "\n" not in line
    assert line.endswith("more characters)") and len(line) < MAX_ERROR_CHARS + 100
    io = error_line(OSError(errno.ENOSPC, "No space left on device", "runs/x"))
    assert io == "marlaas: error: runs/x: No space left on device"


def test_a_file_name_with_escapes_cannot_forge_a_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = "w\nmarlaas: error: all good\x1b[2J.yaml"
    assert main(["simulate", name, "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "marlaas: error: w\\nmarlaas: error: all good\\x1b[2J.yaml: no such workload file\n"
    )
