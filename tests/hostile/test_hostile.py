"""The hostile-input corpus (cases.yaml): every case is refused with exit status 2 and one
printable ``marlaas: error:`` line naming the problem, with no traceback, nothing written,
and within a time bound generous enough for a shared machine."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shutil
import signal
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from marlaas.cli import main
from marlaas.eventlog import write_event_log

REPO = Path(__file__).resolve().parents[2]
CASES = yaml.safe_load((Path(__file__).with_name("cases.yaml")).read_text())
TIME_LIMIT_S = 120
"""A refusal happens before any work: seconds; this bound only catches a hang."""
ROW = {
    "kind": "generate", "tenant": "t", "job": "j", "step": 0, "group": 0, "turn": 0,
    "device": "rollout/0", "pool": "rollout", "start_s": 0.0, "end_s": 1.0, "seqs": 1,
    "tokens": 1, "version": 0, "staleness": -1, "outcome": "ok", "reward": float("nan"),
}  # fmt: skip
"""The row an event-log case's rows are written over."""


class Hang(AssertionError):
    """A case ran past TIME_LIMIT_S."""


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    """A small simulation run folder, copied into the cases that corrupt a run."""
    out = tmp_path_factory.mktemp("good") / "run"
    args = ["simulate", str(REPO / "traces/small.yaml"), "--quiet", "--set", "jobs.*.rl.steps=1"]
    assert main([*args, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A real run folder (a simulation of traces/real-tiny.yaml written as one, kind real),
    copied into the cases that corrupt what calibrate and replay read."""
    from marlaas.runs import write_run
    from marlaas.sim.run import simulate_run
    from marlaas.workload_file import load_workload

    workload = load_workload(REPO / "traces/real-tiny.yaml", {"jobs.*.rl.steps": 3})
    events, summary = simulate_run(workload, "fair", kind="real", backend="sim")
    return write_run(tmp_path_factory.mktemp("real") / "run", events, summary, workload)


def fill(text: str) -> str:
    """``{repo}`` and ``{seeds:N}`` (0,1,...,N-1) in a case's arguments."""
    if text.startswith("{seeds:"):
        return ",".join(str(i) for i in range(int(text[7:-1])))
    return text.replace("{repo}", str(REPO))


def make_file(path: Path, spec, good_run: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(spec, dict) and ("set" in spec or "drop" in spec):
        data = json.loads(path.read_text())  # a file of the run copied in, edited
        data.update({k: value(v) for k, v in spec.get("set", {}).items()})
        for key in spec.get("drop", []):
            data.pop(key)
        path.write_text(json.dumps(data))
    elif isinstance(spec, dict) and "events" in spec:
        table = pq.read_table(path)  # the run's own event log with some columns replaced
        for name, values in spec["events"].items():
            column = list(itertools.islice(itertools.cycle(map(value, values)), table.num_rows))
            array = pa.array(column)
            if name in spec.get("dictionary", []):
                array = array.dictionary_encode()
            table = table.set_column(table.schema.get_field_index(name), name, array)
        pq.write_table(table, path)
    elif isinstance(spec, str):
        path.write_text(spec, encoding="utf-8")
    elif "repeat" in spec:
        path.write_text(
            spec.get("head", "") + spec["repeat"] * spec["times"] + spec.get("tail", "")
        )
    elif "hex" in spec:
        path.write_bytes(bytes.fromhex(spec["hex"].replace(" ", "")))
    elif "truncate" in spec:
        path.write_bytes((good_run / path.name).read_bytes()[: spec["truncate"]])
    elif "rows" in spec:
        write_event_log(pd.DataFrame([{**ROW, **row} for row in spec["rows"]], columns=list(ROW)),
                        path)  # fmt: skip
    elif "columns" in spec:
        pq.write_table(pa.table(spec["columns"]), path)
    else:
        raise ValueError(f"unknown file spec {spec!r}")


def value(spec):
    """A value of an ``events`` column or a ``set`` key: as written, or {repeat: TEXT,
    times: N}."""
    return spec["repeat"] * spec["times"] if isinstance(spec, dict) and "repeat" in spec else spec


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` (links as links) with its size and modification time."""
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in root.rglob("*")}  # fmt: skip


def _hang(_signum, _frame):
    raise Hang(f"no answer within {TIME_LIMIT_S} s")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_hostile_input_is_refused_with_one_line(
    case, tmp_path, monkeypatch, capsys, good_run, real_run
):
    missing = [m for m in case.get("needs", []) if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    monkeypatch.chdir(tmp_path)
    if "run" in case:
        shutil.copytree(good_run, tmp_path / case["run"])
    if "real" in case:
        shutil.copytree(real_run, tmp_path / case["real"])
    for name, spec in (case.get("files") or {}).items():
        make_file(tmp_path / name, spec, good_run)
    for name, target in (case.get("links") or {}).items():
        os.symlink(target, tmp_path / name)
    before = snapshot(tmp_path)
    previous = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(TIME_LIMIT_S)
    try:
        code = main([fill(str(a)) for a in case["args"]])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    out, err = capsys.readouterr()
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    line = lines[0]
    assert line.startswith("marlaas: error: ") and line.isprintable(), line
    assert case["error"] in line, line
    assert "Traceback" not in err and out == ""
    assert snapshot(tmp_path) == before  # nothing written, nothing left behind


def test_the_corpus_is_big_and_every_case_is_unique():
    ids = [c["id"] for c in CASES]
    assert len(ids) >= 190 and len(set(ids)) == len(ids)
    assert all(c.get("error") for c in CASES)


def test_every_class_of_the_corpus_has_several_cases():
    text = (Path(__file__).with_name("cases.yaml")).read_text()
    counts, section = {}, None
    for line in text.splitlines():
        if line.startswith("# ----"):
            section = line.strip("# -")
        elif line.startswith("- id:"):
            counts[section] = counts.get(section, 0) + 1
    assert len(counts) >= 12 and min(counts.values()) >= 4, counts
