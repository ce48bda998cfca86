"""The keys' secret (``DATA/secret.key``) as commands that start at once make and read it."""

from __future__ import annotations

import secrets
import threading

import pytest

from marlaas.service import keys


def test_a_secret_another_command_is_making_is_waited_for_not_refused(tmp_path, monkeypatch):
    """`serve` and a first `tenants add` at once: one makes secret.key (O_EXCL) and then
    writes it; the other, finding it made but not yet written, refused it at once, 'damaged
    (shorter than 32 bytes); restore it', a legitimate first start refused."""
    drawing, drawn = threading.Event(), threading.Event()
    draw = secrets.token_bytes

    def slow_draw(n: int) -> bytes:  # the maker, between making the file and writing it
        drawing.set()
        assert drawn.wait(10)
        return draw(n)

    monkeypatch.setattr(keys.secrets, "token_bytes", slow_draw)
    made: list[bytes] = []
    maker = threading.Thread(target=lambda: made.append(keys.load_secret(tmp_path)))
    maker.start()
    assert drawing.wait(10)
    read: list[bytes | Exception] = []

    def reader() -> None:
        try:
            read.append(keys.load_secret(tmp_path))
        except keys.SecretError as err:
            read.append(err)

    other = threading.Thread(target=reader)
    other.start()
    other.join(0.3)  # it waits on the file being written
    drawn.set()
    maker.join(10)
    other.join(10)
    assert len(made[0]) == 32 and read == made


def test_a_secret_left_unwritten_says_what_to_do(tmp_path, monkeypatch):
    """A secret.key left empty (a command killed between making and writing it) is damaged;
    with no tenant's key made with it, the line says to remove it, not to restore it."""
    monkeypatch.setattr(keys, "SECRET_WRITE_S", 0.1)
    (tmp_path / keys.SECRET_FILE).write_bytes(b"")
    with pytest.raises(keys.SecretError) as err:
        keys.load_secret(tmp_path)
    assert str(err.value) == (f"{tmp_path / keys.SECRET_FILE}: damaged (shorter than 32 "
                              "bytes); no tenant's key was made with it: remove it and start "
                              "again")  # fmt: skip
    with pytest.raises(keys.SecretError, match=r"bytes\); restore it$"):
        keys.load_secret(tmp_path, keys_made=1)
