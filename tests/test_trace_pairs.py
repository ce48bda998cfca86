"""Each group's own prompt, and prompt and response lengths drawn as pairs from a trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from marlaas.core.feasibility import InfeasibleWorkloadError, why_infeasible
from marlaas.core.prompts import PromptLengths, longest_prompt, prompt_cap
from marlaas.core.scheduler import Scheduler
from marlaas.core.work import Generate
from marlaas.eventlog import records_to_frame
from marlaas.sim.run import simulate
from marlaas.sim.turn_draws import TurnDraws, paired
from marlaas.traces import load_length_trace
from marlaas.traces.fidelity import correlations, first_turns
from marlaas.workload_file import load_workload

TRACES = Path(__file__).resolve().parent.parent / "traces"


def correlated_trace(path: Path, rows: int = 2000, seed: int = 0) -> dict[str, np.ndarray]:
    """A trace whose responses grow with the prompt (correlation ~0.8)."""
    rng = np.random.default_rng(seed)
    prompt = np.rint(rng.lognormal(np.log(500), 0.8, rows)).astype(int) + 1
    response = np.rint(prompt / 4 * rng.lognormal(0, 0.3, rows)).astype(int) + 1
    rows_text = (f"{p},{r}" for p, r in zip(prompt, response, strict=True))
    lines = ["prompt_tokens,response_tokens", *rows_text]
    path.write_text("\n".join(lines) + "\n")
    return {"prompt": prompt, "response": response}


def workload(tmp_path: Path, rl: dict, kv_tokens: int = 10_000_000, **job) -> Path:
    lengths = {"dist": "trace", "path": "t.csv", "format": "csv"}
    spec = {
        "seed": 3,
        "cluster": {"engine": {"kv_tokens": kv_tokens}},
        "jobs": [
            {
                "name": "j",
                "tenant": "t",
                "rl": rl,
                "prompt_tokens": {**lengths, "column": "prompt"},
                "response_tokens": {**lengths, "column": "response"},
                "env": {"latency_s": {"dist": "constant", "value": 0.1}},
                **job,
            }
        ],
    }
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_group_prompt_is_fixed_by_seed_job_and_group(tmp_path):
    trace = correlated_trace(tmp_path / "t.csv")
    spec = load_workload(workload(tmp_path, {"steps": 1})).jobs[0]
    assert paired(spec)
    lengths = PromptLengths(spec, seed=3, job=0)
    prompts = [lengths.prompt(g) for g in range(50)]
    rows = [np.random.default_rng([3, 0, g]).integers(len(trace["prompt"])) for g in range(50)]
    assert prompts == [trace["prompt"][r] for r in rows]
    assert [lengths.row(g) for g in range(50)] == rows  # the row the simulator pairs with
    assert [PromptLengths(spec, 3, 0).prompt(g) for g in reversed(range(50))] == prompts[::-1]
    assert [PromptLengths(spec, 4, 0).prompt(g) for g in range(50)] != prompts  # another seed
    assert [PromptLengths(spec, 3, 1).prompt(g) for g in range(50)] != prompts  # another job


def test_prompt_caps(tmp_path):
    def spec(prompt, **rl):
        path = tmp_path / "w.yaml"
        job = {"name": "j", "tenant": "t", "prompt_tokens": prompt, "rl": rl}
        path.write_text(yaml.safe_dump({"jobs": [job]}))
        return load_workload(path).jobs[0]

    assert longest_prompt(spec({"dist": "constant", "value": 256})) == 256
    assert longest_prompt(spec({"dist": "uniform", "low": 10, "high": 90})) == 90
    lognormal = spec({"dist": "lognormal", "median": 200, "sigma": 0.5})
    assert longest_prompt(lognormal) == round(200 * np.exp(3.719016 * 0.5)) == 1284  # p99.99
    assert prompt_cap(spec({"dist": "empirical", "values": [5, 7000]}, max_prompt_tokens=4000)) == (
        4000
    )
    capped = spec({"dist": "lognormal", "median": 2000, "sigma": 2}, max_prompt_tokens=2500)
    drawn = [PromptLengths(capped, 0, 0).prompt(g) for g in range(200)]
    assert max(drawn) == 2500 and min(drawn) < 2000  # truncated, not redrawn
    # the default prompt keeps today's reservation: 256 tokens per sample
    assert PromptLengths(spec({"dist": "constant", "value": 256}), 0, 0).prompt(7) == 256


def test_kv_reservation_is_the_groups_own_prompt(tmp_path):
    correlated_trace(tmp_path / "t.csv")
    rl = {"steps": 2, "prompts_per_step": 16, "group_size": 4, "max_new_tokens": 1000}
    loaded = load_workload(workload(tmp_path, rl))
    scheduler = Scheduler.for_workload(loaded)
    scheduler.submit(loaded.jobs[0], 0.0)
    decided = scheduler.decide(0.0)
    job = scheduler.job(loaded.jobs[0].name)
    waiting = scheduler.generation._after_load.values()  # placed, after their adapter loads
    generates = [d for d in [*decided, *waiting] if isinstance(d, Generate)]
    assert len(generates) == 6  # one group per engine while each engine loads the adapter
    contexts = {d.group: d.context_tokens for d in generates}
    assert contexts == {g: 4 * job.lengths.prompt(g) for g in range(6)}
    assert len(set(contexts.values())) == 6  # each group its own prompt, not the mean
    # each engine holds its group's own prompts and room for 4 responses of 1,000 tokens
    held = {e.name: e.tokens for e in scheduler.cluster.engines}
    assert held == {d.engine: d.context_tokens + 4 * 1000 for d in generates}
    longest, shortest = (
        max(generates, key=lambda d: d.context_tokens),
        min(generates, key=lambda d: d.context_tokens),
    )
    assert held[longest.engine] > held[shortest.engine]  # a long prompt reserves more


def test_feasibility_checks_the_longest_prompt(tmp_path):
    (tmp_path / "t.csv").write_text("prompt_tokens,response_tokens\n100,10\n100000,10\n")
    rl = {"group_size": 8, "max_new_tokens": 1000}
    path = workload(tmp_path, rl, kv_tokens=120_000)
    with pytest.raises(InfeasibleWorkloadError) as err:
        simulate(load_workload(path))
    message = str(err.value)
    assert message.startswith(
        "every job would be refused: jobs[0] (j): one group needs 8 seqs and 808,000 KV tokens"
    )
    assert "longest prompt (100,000 tokens per sample)" in message and "120,000" in message
    # truncating prompts at 10,000 tokens makes it fit: 8 x (10,000 + 1,000) = 88,000
    fits = load_workload(workload(tmp_path, {**rl, "max_prompt_tokens": 10_000}, 120_000))
    assert why_infeasible(fits.jobs[0], fits.cluster) is None


def run(path: Path, seed: int | None = None):
    w = load_workload(path)
    return records_to_frame(simulate(w, seed=seed, check=False).records), w


def test_pairs_keep_the_traces_correlation_and_quantiles(tmp_path):
    trace = correlated_trace(tmp_path / "t.csv")
    rl = {"steps": 15, "prompts_per_step": 100, "group_size": 1, "max_new_tokens": 100_000}
    events, _ = run(workload(tmp_path, rl))
    sim = first_turns(events, "j")
    assert len(sim["prompt"]) == 1500
    want, got = correlations(trace["prompt"], trace["response"]), correlations(**sim)
    assert want[0] > 0.6 and got == pytest.approx(want, abs=0.08)  # independent: ~0
    for column in ("prompt", "response"):
        q_sim = np.percentile(sim[column], [10, 50, 90])
        q_trace = np.percentile(trace[column], [10, 50, 90])
        assert q_sim == pytest.approx(q_trace, rel=0.12)


def test_samples_of_a_group_share_its_prompt_and_differ(tmp_path):
    correlated_trace(tmp_path / "t.csv")
    rl = {"steps": 3, "prompts_per_step": 8, "group_size": 8, "max_new_tokens": 100_000}
    rl["turns"] = 2
    events, w = run(workload(tmp_path, rl, env={"observation_tokens": 7}))
    lengths = PromptLengths(w.jobs[0], w.seed, 0)
    gen = events[events["kind"] == "generate"]
    first, second = gen[gen["turn"] == 0], gen[gen["turn"] == 1].set_index("group")
    assert (first["prompt_tokens"] == [lengths.prompt(g) for g in first["group"]]).all()
    assert (first["longest_tokens"] * first["seqs"] > first["tokens"]).all()  # samples differ
    # later turns start from the prompt, the earlier responses and the observations
    after = first.set_index("group")
    expected = after["prompt_tokens"] + after["tokens"] // 8 + 7
    assert (second["prompt_tokens"] == expected.loc[second.index]).all()


def test_same_seed_same_log_and_the_run_seed_fixes_prompts(tmp_path):
    correlated_trace(tmp_path / "t.csv")
    rl = {"steps": 3, "prompts_per_step": 8, "group_size": 4, "max_new_tokens": 100_000}
    path = workload(tmp_path, rl)
    once, w = run(path)
    again, _ = run(path)
    assert once.equals(again)
    other, _ = run(path, seed=11)
    first = other[(other["kind"] == "generate") & (other["turn"] == 0)]
    lengths = PromptLengths(w.jobs[0], 11, 0)
    assert (first["prompt_tokens"] == [lengths.prompt(g) for g in first["group"]]).all()
    assert not other.equals(once)


def test_azure_conv_pairs_match_the_trace():
    """The real conversation trace: 20,000 groups' prompts and responses against the file."""
    w = load_workload(TRACES / "azure-pairs.yaml")
    spec = w.jobs[1]
    trace = load_length_trace(TRACES / "azure/AzureLLMInferenceTrace_conv.csv", "azure")
    assert paired(spec) and prompt_cap(spec) == 14_050 == trace["prompt"].max()
    lengths, draws = PromptLengths(spec, 0, 1), TurnDraws(spec, 0, 1)
    prompts = np.array([lengths.prompt(g) for g in range(20_000)])
    responses = np.concatenate([draws.responses(g, 0, 1) for g in range(20_000)])
    for got, want in ((prompts, trace["prompt"]), (responses, trace["response"])):
        q = [10, 50, 90, 99]
        assert np.percentile(got, q) == pytest.approx(np.percentile(want, q), rel=0.05)
        assert got.mean() == pytest.approx(want.mean(), rel=0.03)
    got = correlations(prompts, responses)
    assert got == pytest.approx(correlations(trace["prompt"], trace["response"]), abs=0.03)
