"""marlaas evaluate: the versions asked for, when each was made, and a
dataset job trained and scored on its held-out split end to end (tiny model, HF backend)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from marlaas.core.workload import Workload
from marlaas.executors.backends import missing_training_stack
from marlaas.executors.evaluate import (
    merged_evaluation,
    pick_jobs,
    pick_versions,
    versions_trained_at,
)
from marlaas.metrics.proportions import wilson_interval


def test_pick_versions():
    assert pick_versions([0, 1, 2, 3], "last") == [3]
    assert pick_versions([0, 1, 2, 3], "all") == [1, 2, 3]
    assert pick_versions([0], "last") == []
    assert pick_versions([1, 2, 3], "all") == [1, 2, 3]
    assert pick_versions([1, 2, 3], "1, last") == [1, 3]
    assert pick_versions([], "5") == []
    with pytest.raises(ValueError, match=r"no adapter version '7'; there are 1\.\.3"):
        pick_versions([1, 2, 3], "2,7")


def _workload(*names: str) -> Workload:
    jobs = [{"name": n, "tenant": "t", "rl": {"steps": 1}} for n in names]
    return Workload.model_validate({"name": "w", "jobs": jobs})


def test_pick_jobs_keeps_the_workloads_order_and_names_an_unknown_job():
    workload = _workload("a", "b", "c")
    assert [s.name for s in pick_jobs(workload, None)] == ["a", "b", "c"]
    assert [s.name for s in pick_jobs(workload, "c, a")] == ["a", "c"]
    with pytest.raises(ValueError, match=r"no job 'x' in the workload; its jobs are a, b, c"):
        pick_jobs(workload, "a,x")
    for asked in ("", "a,,b", "a,"):
        with pytest.raises(ValueError, match=r"--jobs: an empty name in .*; its jobs are a, b"):
            pick_jobs(workload, asked)


def test_scoring_some_jobs_replaces_their_rows_and_keeps_the_others():
    workload = _workload("a", "b", "c")
    earlier = [
        {"job": "c", "model": "base", "version": -1, "accuracy": 0.1, "time_s": 0.0},
        {"job": "b", "model": "base", "version": -1, "accuracy": 0.2, "time_s": 0.0},
        {"job": "b", "model": "trained", "version": 3, "accuracy": 0.5, "time_s": 9.0},
    ]
    scored = pd.DataFrame([
        {"job": "b", "model": "base", "version": -1, "accuracy": 0.25, "time_s": 0.0},
        {"job": "b", "model": "trained", "version": 4, "accuracy": 0.75, "time_s": None},
    ])  # fmt: skip
    rows = merged_evaluation(earlier, scored, workload)
    assert [(r["job"], r["version"], r["accuracy"]) for r in rows] == [
        ("b", -1, 0.25), ("b", 4, 0.75), ("c", -1, 0.1)
    ]  # fmt: skip
    assert rows[1]["time_s"] is None  # JSON null, not NaN (which eval.json's reader refuses)
    json.dumps(rows, allow_nan=False)
    other = [{"job": "zed", "model": "base", "version": -1, "accuracy": 0.3}]
    with pytest.raises(ValueError, match="it holds rows of 'zed', not a job of 'w'"):
        merged_evaluation(earlier + other, scored, workload)


def test_versions_are_dated_by_the_step_that_made_them():
    rewards = pd.DataFrame({"job": ["a", "a", "b"], "step": [0, 1, 0], "time_s": [2.0, 5.0, 3.0]})
    assert versions_trained_at(rewards) == {("a", 1): 2.0, ("a", 2): 5.0, ("b", 1): 3.0}


WORKLOAD = """
name: words
seed: 0
base_model: {{name: tiny, path: {model}}}
cluster:
  pools:
    - {{name: rollout, role: inference, devices: 1}}
    - {{name: train, role: training, devices: 1}}
  engine: {{max_seqs: 16, kv_tokens: 4096, adapter_slots: 2}}
  shared_compute: true
jobs:
  - name: say
    tenant: ann
    lora_rank: 4
    rl: {{steps: 2, prompts_per_step: 2, group_size: 2, max_new_tokens: 4, max_staleness: 0}}
    prompt_tokens: {{dist: constant, value: 16}}
    response_tokens: {{dist: constant, value: 4}}
    env: {{name: exact_match, args: {{format_pattern: "[a-z]+", format_reward: 0.1}}}}
    dataset: {{path: words.jsonl, prompt_column: q, answer_column: a, heldout: 0.25}}
"""


def test_a_dataset_job_trains_and_is_scored_on_its_heldout_split(tiny_model_dir, tmp_path):
    pytest.importorskip("peft")
    from marlaas.cli import main

    words = ["red", "green", "blue", "gold", "pink", "gray", "teal", "navy"]
    (tmp_path / "words.jsonl").write_text(
        "".join(json.dumps({"q": f"Say {w}", "a": w}) + "\n" for w in words)
    )
    workload = tmp_path / "w.yaml"
    workload.write_text(WORKLOAD.format(model=tiny_model_dir))
    run = tmp_path / "run"
    assert main(["train", str(workload), "--out", str(run), "--backend", "hf", "--quiet"]) == 0
    rewards = pd.read_csv(run / "rewards.csv")
    assert len(rewards) == 2
    assert main(["evaluate", str(workload), "--run", str(run), "--backend", "hf", "--quiet",
                 "--versions", "all"]) == 0  # fmt: skip
    rows = json.loads((run / "eval.json").read_text())
    assert [(r["model"], r["version"]) for r in rows] == [("base", -1), ("trained", 1),
                                                          ("trained", 2)]  # fmt: skip
    for row in rows:
        assert row["prompts"] == 2  # the held-out quarter of 8 rows
        assert row["ci_low"] <= row["accuracy"] <= row["ci_high"]
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(wilson_interval(row["correct"], 2))
        assert len(row["outcomes"]) == 2 and row["outcomes"].count("1") == row["correct"]
    by_step = dict(zip(rewards["step"], rewards["time_s"], strict=True))
    assert [r["time_s"] for r in rows] == pytest.approx([0.0, by_step[0], by_step[1]])


@pytest.mark.skipif(
    bool(missing_training_stack()), reason="evaluate stops at once without the training stack"
)
def test_evaluate_run_checks_each_version_once(tmp_path, monkeypatch):
    """evaluate --run checked each job's newest version, then every version it scores: with
    ``--versions last`` (the default) or ``all`` the newest was read and hashed twice (its
    SHA-256 is checked now, the whole file read: no longer its header alone)."""
    import hashlib

    from marlaas.cli import main
    from marlaas.executors import adapter_store as store_module

    model = tmp_path / "model"
    model.mkdir()
    config = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2,
              "hidden_size": 8}  # fmt: skip
    (model / "config.json").write_text(json.dumps(config))
    (model / "model.safetensors").write_bytes(b"x")
    (model / "tokenizer.json").write_text("{}")
    real_tiny = (Path(__file__).resolve().parents[2] / "traces" / "real-tiny.yaml").read_text()
    workload = tmp_path / "w.yaml"
    workload.write_text(real_tiny.replace("path: models/tiny", f"path: {model}"))
    store = store_module.AdapterStore(tmp_path / "run" / "adapters")
    header = json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    weights = len(header).to_bytes(8, "little") + header + bytes(range(16))
    for job in ("emit-a", "emit-z"):
        for version in range(3):
            folder = store.path(job, version)
            folder.mkdir(parents=True)
            (folder / store_module.CONFIG_FILE).write_text(json.dumps({"r": 8}))
            (folder / store_module.WEIGHTS_FILE).write_bytes(weights)
            meta = {"job": job, "version": version, "rank": 8,
                    store_module.WEIGHTS_SHA256: hashlib.sha256(weights).hexdigest()}  # fmt: skip
            (folder / store_module.META_FILE).write_text(json.dumps(meta))
    hashed = []
    digest = store_module._digest_of_rest

    def counted(handle, start):
        hashed.append(handle.name)
        return digest(handle, start)

    monkeypatch.setattr(store_module, "_digest_of_rest", counted)
    for versions, scored in [("last", [2]), ("all", [1, 2])]:
        hashed.clear()
        run = ["--run", str(tmp_path / "run"), "--backend", "hf", "--versions", versions]
        main(["evaluate", str(workload), *run, "--quiet"])  # refused later: no manifest
        assert sorted(hashed) == sorted(
            str(store.path(job, v) / store_module.WEIGHTS_FILE)
            for job in ("emit-a", "emit-z") for v in scored
        )  # fmt: skip


class _NoAdapters:
    def versions(self, job: str) -> list[int]:
        return []


class _Asks:
    """A generator's stand-in that records the max_new_tokens it is asked for."""

    tokenizer = None

    def __init__(self) -> None:
        self.asked: list[tuple[int, int]] = []

    async def generate(self, adapter, version, prompts, n, max_new_tokens, temperature, seed):
        from marlaas.executors.rollout import Completion

        self.asked.append((len(prompts[0]), max_new_tokens))
        return [[Completion(tuple(p), (1,), (0.0,), "x", "stop") for _ in range(n)]
                for p in prompts]  # fmt: skip


def test_evaluate_keeps_each_turn_within_max_model_len(monkeypatch):
    """evaluate asked the engine for the job's max_new_tokens whatever the context: a prompt
    longer than the model's context was vLLM's traceback ('VLLMValidationError: This model's
    maximum context length is 512 tokens ...'), and a later turn's context past it too. A
    first prompt that leaves no room is one error naming the environment and its length; a
    turn generates what room is left, and an episode whose context is full ends there."""
    import asyncio

    from marlaas.core.job_spec import JobSpec
    from marlaas.envs.base import Environment, StepResult
    from marlaas.executors import evaluate as evaluation
    from marlaas.executors.episode_runner import EpisodeError
    from tests.episode_fakes import CharFormat

    class Talks(Environment):
        async def reset(self, seed: int) -> str:
            return "p" * int(self.args["prompt"])

        async def step(self, action: str) -> StepResult:
            return StepResult("o" * 5, 0.0, False)

    monkeypatch.setattr(evaluation, "ChatFormat", lambda tokenizer, template: CharFormat())
    monkeypatch.setattr(evaluation, "make_env", lambda name, args: Talks(args))

    def run(prompt: int) -> _Asks:
        spec = JobSpec(name="j", tenant="t", env={"name": "talks", "args": {"prompt": prompt}},
                       rl={"turns": 4, "max_new_tokens": 6})  # fmt: skip
        asks = _Asks()
        asyncio.run(evaluation.evaluate(None, _NoAdapters(), asks, prompts=1, jobs=[spec],
                                        max_model_len=16))  # fmt: skip
        return asks

    with pytest.raises(EpisodeError, match=r"^j: held-out problem 0's prompt is 20 tokens "
                       r"\(environment talks's reset\(4294967296\)\), and max_model_len is 16 "
                       "tokens: no room to generate$"):  # fmt: skip
        run(20)
    # (context, max_new_tokens asked) per turn; each turn adds 1 token and a 5-token reply
    assert run(4).asked == [(4, 6), (10, 6)]  # turn 2's context, 16, is full: it ends
    assert run(8).asked == [(8, 6), (14, 2)]  # 2 tokens left: 2 asked, not 6
    assert run(9).asked == [(9, 6)]  # turn 1's context, 15, leaves 1: it ends, as in training
    assert run(14).asked == [(14, 2)]
