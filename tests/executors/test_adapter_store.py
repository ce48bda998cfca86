"""AdapterStore: atomic version folders, latest version, resume after an interrupted save."""

from __future__ import annotations

import pytest

from marlaas.executors.adapter_store import AdapterStore


def _writer(text):
    def write(tmp):
        (tmp / "adapter_config.json").write_text(text)

    return write


def test_versions_latest_and_paths(tmp_path):
    store = AdapterStore(tmp_path)
    assert store.latest("job1") is None and store.latest_path("job1") is None
    for v in (0, 1, 2, 10):
        path = store.save("job1", v, _writer(f"v{v}"))
        assert path == tmp_path / "job1" / f"v{v}"
    assert store.versions("job1") == [0, 1, 2, 10]
    assert store.latest("job1") == 10
    assert (store.latest_path("job1") / "adapter_config.json").read_text() == "v10"
    assert store.jobs() == ["job1"]
    with pytest.raises(FileExistsError):
        store.save("job1", 2, _writer("again"))
    store.save("job1", 2, _writer("again"), overwrite=True)
    assert (store.path("job1", 2) / "adapter_config.json").read_text() == "again"
    assert store.prune("job1", keep_last=2) == [0, 1]
    assert store.versions("job1") == [2, 10]


def test_interrupted_save_leaves_no_version(tmp_path):
    store = AdapterStore(tmp_path)
    store.save("j", 0, _writer("ok"))

    def crash(tmp):
        (tmp / "adapter_model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.save("j", 1, crash)
    assert store.latest("j") == 0  # resume from the last complete version
    assert not store.path("j", 1).exists()
    (tmp_path / "j" / ".v2.tmp-x").mkdir()  # a leftover from a killed process
    assert store.versions("j") == [0]
    assert store.clean_partial("j") == 1
