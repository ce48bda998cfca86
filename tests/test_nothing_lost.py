"""Nothing lost: every case where a command once overwrote or deleted what it did not create
(issue 31), each with the data checked byte for byte afterwards and the command's own outputs
still replaced as before."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from marlaas.cli import main
from marlaas.output.manifest import read_manifest

REPO = Path(__file__).resolve().parents[1]
SMALL = str(REPO / "traces/small.yaml")
TINY = str(REPO / "traces/real-tiny.yaml")
SIM = ["simulate", SMALL, "--quiet", "--set", "jobs.*.rl.steps=1"]
TRAINING = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "peft"))
needs_training = pytest.mark.skipif(
    not TRAINING, reason="without torch, transformers and peft the command refuses first"
)
"""For the refusals of train, evaluate, make-tiny-model and prepare-smollm2: without the
training stack they refuse for that, before any other check (tests/test_train_without_torch.py)."""
STUB_MODEL = {
    "config.json": '{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2, '
    '"hidden_size": 128}',
    "model.safetensors": "",
    "tokenizer.json": "{}",
}
"""A model folder that passes the checks before any work (nothing loads it)."""


def files(root: Path) -> dict[str, bytes | str]:
    """Every path under ``root``: a file's bytes, a link's target, a folder's mark."""
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            out[key] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            out[key] = "/"
        else:
            out[key] = path.read_bytes()
    return out


def write(root: Path, tree: dict[str, str]) -> None:
    for name, text in tree.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def refused(capsys, args: list[str], text: str) -> None:
    """The command exits 2 with one error line holding ``text``."""
    capsys.readouterr()  # what earlier commands printed
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("marlaas: error: ") and len(err.splitlines()) == 1, err
    assert text in err, err


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A finished real run folder (a simulation written as one, as tests/test_twin.py does)."""
    from marlaas.runs import write_run
    from marlaas.sim.run import simulate_run
    from marlaas.workload_file import load_workload

    workload = load_workload(TINY, {"jobs.*.rl.steps": 3})
    events, summary = simulate_run(workload, "fair", kind="real", backend="sim")
    return write_run(tmp_path_factory.mktemp("real") / "run", events, summary, workload)


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ------------------------------------------------------------------ calibrate --out


@pytest.mark.parametrize("target", ["summary.json", "events.parquet", "workload.json"])
def test_calibrate_never_writes_a_runs_own_files(work, real_run, capsys, target):
    run = work / "run"
    shutil.copytree(real_run, run)
    before = files(work)
    refused(capsys, ["calibrate", "run", "--out", f"run/{target}"], "is inside")
    assert files(work) == before
    assert main(["replay", "run", "--out", "replayed"]) == 0  # the run is whole


def test_calibrate_replaces_its_own_profile_and_nothing_else(work, real_run, capsys):
    shutil.copytree(real_run, work / "run")
    write(work, {"notes.txt": "my notes", "w.yaml": "jobs: [{name: j, tenant: t}]\n",
                 "pub.yaml": "name: pub\norigin: published\ncost: {sync_s: 1.0}\n"})  # fmt: skip
    before = files(work)
    for name in ("notes.txt", "w.yaml", "pub.yaml"):
        refused(capsys, ["calibrate", "run", "--out", name], "is not a cost profile marlaas wrote")
    refused(capsys, ["calibrate", "run", "--out", "run"], "is a folder")
    assert files(work) == before
    mine = work / "mine.yaml"
    mine.write_text("name: old\norigin: calibrated\ncalibrated_at: '2026-01-01'\ncost: {}\n")
    assert main(["calibrate", "run", "--out", "mine.yaml"]) == 0
    assert "calibrated from 1 real run(s)" in mine.read_text()
    after = files(work)
    assert {k: v for k, v in after.items() if k != "mine.yaml"} == before  # nothing else moved


# ------------------------------------------------------------------ evaluate --out


@pytest.mark.skipif(not TRAINING, reason="evaluate needs torch, transformers and peft")
@pytest.mark.parametrize("out", ["notes.txt", "run/summary.json", None])
def test_evaluate_never_replaces_a_file_it_did_not_write(work, real_run, capsys, out):
    shutil.copytree(real_run, work / "run")
    write(work, {f"model/{k}": v for k, v in STUB_MODEL.items()})
    write(work, {"run/adapters/emit-a/.keep": "", "notes.txt": "my notes"})
    if out is None:
        (work / "run/eval.json").write_text("my own notes, named like an evaluation")
    before = files(work)
    args = ["evaluate", TINY, "--set", "base_model.path=model", "--backend", "hf", "--run", "run"]
    expected = {"notes.txt": "is not an evaluation marlaas wrote", "run/summary.json": "is inside"}
    refused(capsys, [*args, *(["--out", out] if out else [])],
            expected.get(out, "run/eval.json: is not an evaluation marlaas wrote"))  # fmt: skip
    assert files(work) == before


# ------------------------------------------------------------------ model folders


@needs_training
@pytest.mark.parametrize("folder", [".", ".."])
def test_make_tiny_model_never_empties_the_working_folder_or_its_parent(
    tmp_path, monkeypatch, capsys, folder
):
    write(tmp_path, {"notes.txt": "mine", "here/thesis.tex": "years of work"})
    monkeypatch.chdir(tmp_path / "here")
    before = files(tmp_path)
    refused(capsys, ["make-tiny-model", folder, "--overwrite"], "is the working folder")
    assert files(tmp_path) == before


@pytest.mark.skipif(not TRAINING, reason="the tiny model needs torch and transformers")
def test_make_tiny_model_overwrites_only_a_model_of_its_own(work, capsys):
    assert main(["make-tiny-model", "tiny"]) == 0
    assert read_manifest(work / "tiny")["kind"] == "model"
    refused(capsys, ["make-tiny-model", "tiny"], "give --overwrite to replace it")
    assert main(["make-tiny-model", "tiny", "--seed", "1", "--overwrite"]) == 0
    (work / "tiny" / "notes.txt").write_text("mine")
    write(work, {"hub/config.json": '{"model_type": "llama", "vocab_size": 32000}',
                 "hub/model.safetensors": "weights"})  # fmt: skip
    before = files(work)
    refused(capsys, ["make-tiny-model", "tiny", "--overwrite"], "holds notes.txt")
    refused(capsys, ["make-tiny-model", "hub", "--overwrite"], "is not a marlaas output")
    assert files(work) == before


@needs_training
def test_prepare_smollm2_refuses_an_existing_folder_before_converting(work, capsys, monkeypatch):
    from marlaas.executors import models

    def no_conversion(*_args):
        raise AssertionError("converted although the folder is refused")

    monkeypatch.setattr(models, "_dequantized", no_conversion)
    monkeypatch.setattr(models, "smollm2_gguf_path", no_conversion)
    write(work, {"smol/notes.txt": "mine"})
    refused(capsys, ["prepare-smollm2", "smol", "--overwrite"], "is not a marlaas output")
    write(work, {"model/config.json": '{"model_type": "llama"}', "model/manifest.json":
                 '{"kind": "model", "status": "finished", "files": ["config.json"]}'})  # fmt: skip
    refused(capsys, ["prepare-smollm2", "model"], "already holds a model folder")
    assert (work / "smol/notes.txt").read_text() == "mine"


# ------------------------------------------------------------------ folders that look like outputs


@pytest.mark.parametrize(
    ("tree", "command"),
    [
        ({"adapters/job/v3/adapter.safetensors": "trained"}, ["report", "sim"]),
        ({"adapters/job/v3/adapter.safetensors": "trained"},
         ["sweep", SMALL, "--policies", "fifo", "--quiet"]),
        pytest.param({"adapters/job/v3/adapter.safetensors": "trained"},
                     ["train", TINY, "--backend", "hf"], marks=needs_training),
        ({"report.html": "<html>my page</html>"}, ["report", "sim"]),
        ({"sweep.csv": "my,table\n1,2\n"}, ["sweep", SMALL, "--policies", "fifo", "--quiet"]),
    ],
)  # fmt: skip
def test_a_users_folder_that_looks_like_an_old_output_is_never_replaced(
    work, capsys, tree, command
):
    assert main([*SIM, "--out", "sim"]) == 0
    write(work / "mine", tree)
    before = files(work)
    refused(capsys, [*command, "--out", "mine"], "mine: folder exists and is not a marlaas output")
    assert files(work) == before


@needs_training
def test_an_output_with_a_users_file_added_is_not_replaced(work, real_run, capsys):
    assert main([*SIM, "--out", "run"]) == 0
    shutil.copytree(real_run, work / "real")
    write(work, {"run/notes.txt": "what I learned", "real/eval-notes.md": "mine"})
    before = files(work)
    refused(capsys, [*SIM, "--out", "run"], "run: holds notes.txt, which marlaas did not write")
    refused(capsys, ["train", TINY, "--backend", "hf", "--out", "real"], "holds eval-notes.md")
    assert files(work) == before
    (work / "run/notes.txt").unlink()
    assert main([*SIM, "--seed", "2", "--out", "run"]) == 0


def test_leftovers_marlaas_did_not_leave_are_kept(work, capsys):
    assert main([*SIM, "--out", "run"]) == 0
    write(work, {".run.staging/thesis.tex": "years of work", ".other.old/x": "mine"})
    before = files(work)
    refused(capsys, [*SIM, "--out", "run"], ".run.staging: in the way of")
    assert files(work) == before
    shutil.rmtree(work / ".run.staging")
    (work / ".run.staging").mkdir()
    (work / ".run.staging" / ".marlaas-staging").touch()  # a killed command's: removed
    (work / ".run.staging" / "events.parquet").write_text("half")
    assert main([*SIM, "--out", "run"]) == 0
    assert sorted(p.name for p in work.iterdir()) == [".other.old", "run"]


# ------------------------------------------------------------------ symbolic links


def test_a_symlink_out_is_followed_and_never_replaced(work, capsys):
    (work / "disk").mkdir()
    os.symlink("disk/runs", "link")
    (work / "disk" / "runs").mkdir()
    for seed in ("1", "2"):  # the second replaces the first through the link (once: EEXIST)
        assert main([*SIM, "--seed", seed, "--out", "link"]) == 0
    assert os.readlink("link") == "disk/runs" and read_manifest(work / "disk/runs")
    assert sorted(p.name for p in work.iterdir()) == ["disk", "link"]
    assert sorted(p.name for p in (work / "disk").iterdir()) == ["runs"]  # no staging left
    os.symlink("nowhere", "dangling")
    write(work, {"thesis/thesis.tex": "years of work", "notes.txt": "mine"})
    os.symlink("thesis", "to-thesis")
    os.symlink("notes.txt", "to-notes")
    before = files(work)
    refused(capsys, [*SIM, "--out", "dangling"], "a symbolic link to")
    refused(capsys, [*SIM, "--out", "to-thesis"], "is not a marlaas output")
    refused(capsys, [*SIM, "--out", "to-notes"], "exists and is not a folder")
    assert files(work) == before


@needs_training
def test_train_with_a_tracker_it_cannot_start_leaves_a_finished_run_whole(
    work, real_run, capsys, monkeypatch
):
    """The tracker was checked after the old run had been emptied."""
    from marlaas.executors import tracking

    real_find_spec = importlib.util.find_spec

    def without_wandb(name, *args):
        return None if name == "wandb" else real_find_spec(name, *args)

    monkeypatch.setattr(tracking.importlib.util, "find_spec", without_wandb)
    shutil.copytree(real_run, work / "real")
    before = files(work)
    refused(capsys, ["train", TINY, "--tracker", "wandb", "--backend", "hf", "--out", "real"],
            "--tracker wandb needs wandb")  # fmt: skip
    assert files(work) == before
