"""marlaas.atomic: a file is either its old content or its whole new content, never half,
and a failed write leaves nothing behind."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from marlaas.atomic import atomic_dir, replacing, write_durably
from marlaas.out_folder import claim
from marlaas.output.kinds import TEMPORARY


def test_write_durably_replaces_the_whole_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "deeper" / "summary.json"
    assert write_durably(path, "old") == path  # makes the folder
    write_durably(path, b"new \xe2\x9c\x93")
    assert path.read_text(encoding="utf-8") == "new ✓"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["summary.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path):
    path = tmp_path / "events.parquet"
    path.write_text("old")
    seen = []
    with pytest.raises(RuntimeError), replacing(path) as tmp:
        seen.append(tmp.name)
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["events.parquet"]
    assert TEMPORARY.fullmatch(seen[0])  # a leftover after kill -9 is recognised as ours


def test_a_temporary_keeps_the_extension_a_writer_needs(tmp_path):
    with replacing(tmp_path / "rewards.png", suffix=".tmp.png") as tmp:
        assert tmp.name.endswith(".tmp.png") and TEMPORARY.fullmatch(tmp.name)
        tmp.write_bytes(b"png")
    assert (tmp_path / "rewards.png").read_bytes() == b"png"


def test_a_folder_written_atomically_leaves_no_file_private(tmp_path):
    """safetensors writes weights 0600; a model or adapter folder is read by other users."""
    with atomic_dir(tmp_path / "adapter") as tmp:
        (tmp / "weights").write_bytes(b"w")
        (tmp / "weights").chmod(0o600)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "config").write_text("{}")
        (tmp / "sub" / "config").chmod(0o600)
    for name in ("adapter/weights", "adapter/sub/config"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600 | READABLE


def test_a_claimed_output_leaves_no_file_private(tmp_path):
    with claim(tmp_path / "model", "model") as target, target.staged() as staging:
        (staging / "model.safetensors").write_bytes(b"w")
        (staging / "model.safetensors").chmod(0o600)
        (staging / "run.sh").write_text("#!/bin/sh")
        (staging / "run.sh").chmod(0o700)
    mode = (tmp_path / "model" / "model.safetensors").stat().st_mode
    assert stat.S_IMODE(mode) == 0o600 | READABLE
    assert stat.S_IMODE((tmp_path / "model" / "run.sh").stat().st_mode) == 0o700 | READABLE


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


READABLE = 0o444 & ~_umask()
"""The read bits the umask lets a new file have."""


def test_a_failed_write_names_the_file_it_was_writing(tmp_path):
    """A failed write names no file (Python's "File too large", pyarrow's "Error writing bytes
    to file. Detail: [errno 27] File too large"): the commands' errors named none either."""
    path = tmp_path / "summary.json"
    pyarrow_like = OSError("Error writing bytes to file. Detail: [errno 27] File too large")
    pyarrow_like.errno = errno.EFBIG
    for failure in (OSError(errno.EFBIG, os.strerror(errno.EFBIG)), pyarrow_like):
        with pytest.raises(OSError) as err, replacing(path):
            raise failure
        assert err.value.filename == str(path) and err.value.errno == errno.EFBIG
        assert err.value.strerror in (os.strerror(errno.EFBIG), str(pyarrow_like))
    with pytest.raises(OSError) as err, replacing(path) as tmp:  # named by its temporary name
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp))
    assert isinstance(err.value, PermissionError) and err.value.filename == str(path)
    assert list(tmp_path.iterdir()) == []
