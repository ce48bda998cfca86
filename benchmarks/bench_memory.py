"""Peak resident memory of real runs, as a ratio to the model's weight files.

    python benchmarks/bench_memory.py                    # the tiny run, then SmolLM2 (2 steps)
    python benchmarks/bench_memory.py --runs tiny        # seconds
    python benchmarks/bench_memory.py --breakdown        # where it goes, phase by phase
    python -m pytest benchmarks/bench_memory.py --benchmark-enable -s

Each run is ``marlaas train TRACE --set 'jobs.*.rl.steps=2' --quiet`` in a fresh process
(the vLLM backend when it imports), watched from outside every ``--period`` seconds: the sum
of the resident memory of the run's process and all its descendants (an engine core, compiler
or probe subprocesses), and each process's own high-water mark (VmHWM, exact). Printed per run:
wall time [s], the tree's peak [MiB], the largest process's peak [MiB], the weight files
[MiB] and peak / weights; then the figures the run's own summary.json recorded (its
``memory`` block). The SmolLM2 run needs ``models/smollm2`` (``marlaas prepare-smollm2``);
the tiny one builds ``models/tiny`` if it is missing. The script imports marlaas from
PYTHONPATH, so one copy of it can measure an older tree (that lacks the summary's figures).

``--breakdown`` builds what a SmolLM2 run holds, one part after the other, in this process
(the vLLM engine as ``marlaas train`` sizes it, the trainer with both jobs), then generates
one full batch (64 sequences of up to 24 tokens) and trains 3 steps of 35 samples, and prints
the resident memory after each part [MiB], what it added, the peak while it ran (sampled every
10 ms) and how much of it is file-backed (memory-mapped weight files; RssFile).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from marlaas.executors.memory import descendants, forked_copy, hwm_mb, rss_mb, weights_mb

REPO = Path(__file__).resolve().parents[1]
RUNS = {
    "tiny": (REPO / "traces" / "real-tiny.yaml", REPO / "models" / "tiny"),
    "smollm2": (REPO / "traces" / "real-smollm2.yaml", REPO / "models" / "smollm2"),
}
"""name -> (workload file, model folder)."""


def measure(name: str, steps: int = 2, period_s: float = 0.1, out: Path | None = None) -> dict:
    """Run ``marlaas train`` on run ``name`` for ``steps`` steps per job and watch its memory;
    the figures of one row (sizes in MiB)."""
    trace, model = RUNS[name]
    with tempfile.TemporaryDirectory(prefix=f"bench-memory-{name}-") as tmp:
        run_dir = Path(out or tmp) / name
        cmd = [
            sys.executable, "-m", "marlaas", "train", str(trace), "--out", str(run_dir),
            "--set", f"jobs.*.rl.steps={steps}", "--set", f"base_model.path={model}", "--quiet",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))}
        log = Path(tmp) / "stderr.txt"
        t0 = time.monotonic()
        tree_peak, peaks = 0.0, {}
        with open(log, "w") as err:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err)
            while proc.poll() is None:
                pids = [proc.pid]  # and its children, but not forks of it before exec
                pids += [pid for pid in descendants(proc.pid) if not forked_copy(pid, proc.pid)]
                now = {pid: rss_mb(pid) for pid in pids}
                tree_peak = max(tree_peak, sum(now.values()))
                for pid in pids:
                    peaks[pid] = max(peaks.get(pid, 0.0), now[pid], hwm_mb(pid))
                time.sleep(period_s)
        wall_s = time.monotonic() - t0
        if proc.returncode != 0:
            tail = log.read_text()[-2000:]
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{tail}")
        summary_path = run_dir / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    weights = weights_mb(model)
    largest = max(peaks.values(), default=0.0)
    memory = summary.get("memory") or {}
    return {
        "run": name,
        "steps": steps,
        "backend": summary.get("backend"),
        "wall_s": round(wall_s, 1),
        "tree_peak_mb": round(max(tree_peak, largest), 1),
        "largest_process_peak_mb": round(largest, 1),
        "processes": len(peaks),
        "weights_mb": round(weights, 1),
        "peak_to_weights": round(max(tree_peak, largest) / weights, 2),
        "summary_peak_rss_mb": memory.get("peak_rss_mb"),
        "summary_tree_peak_rss_mb": memory.get("tree_peak_rss_mb"),
    }


def _ensure_model(name: str) -> bool:
    """Whether run ``name``'s model folder is there (the tiny one is built when missing)."""
    _trace, model = RUNS[name]
    if (model / "config.json").is_file():
        return True
    if name == "tiny":
        from marlaas.executors.models import build_tiny_model

        build_tiny_model(model, seed=0)
        return True
    return False


def print_rows(rows: list[dict]) -> None:
    """The table of :func:`measure` rows."""
    print(
        f"{'run':<8s} {'steps':>5s} {'backend':>7s} {'wall s':>7s} {'peak MiB':>9s} "
        f"{'largest':>8s} {'procs':>5s} {'weights':>8s} {'x weights':>9s} {'summary':>8s}"
    )
    for r in rows:
        summary = r["summary_tree_peak_rss_mb"]
        print(
            f"{r['run']:<8s} {r['steps']:5d} {r['backend'] or '?':>7s} {r['wall_s']:7.1f} "
            f"{r['tree_peak_mb']:9.0f} {r['largest_process_peak_mb']:8.0f} {r['processes']:5d} "
            f"{r['weights_mb']:8.1f} {r['peak_to_weights']:9.1f} "
            f"{summary if summary is None else f'{summary:.0f}':>8}"
        )


# --------------------------------------------------------------------------- pytest-benchmark
@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_peak_memory_of_a_two_step_run(benchmark, name):
    if not _ensure_model(name):
        pytest.skip(f"{RUNS[name][1]} is missing: marlaas prepare-smollm2 models/smollm2")
    row = benchmark.pedantic(measure, args=(name,), rounds=1, iterations=1)
    benchmark.extra_info.update(row)
    print_rows([row])
    assert row["tree_peak_mb"] > row["weights_mb"]


def breakdown(name: str = "smollm2", kv_tokens: int | None = None) -> list[tuple]:
    """(part, resident MiB after it, MiB it added, peak MiB while it ran, file-backed MiB) of
    run ``name``'s parts built one by one in this process; ``kv_tokens`` overrides the
    workload's ``cluster.engine.kv_tokens``."""
    import asyncio
    import random
    import threading

    from marlaas.executors.memory import release_large_blocks

    release_large_blocks()  # as train_run does
    rows, peak, done = [], [rss_mb()], threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], rss_mb())

    def part(label: str) -> None:
        now = rss_mb()
        status = Path("/proc/self/status").read_text().splitlines()
        file_mb = next((int(ln.split()[1]) / 1024 for ln in status if ln.startswith("RssFile")), 0)
        added = now - (rows[-1][1] if rows else 0.0)
        rows.append((label, now, added, max(peak[0], now), file_mb))
        print(f"{label:<44s} {now:7.0f} {added:+7.0f} {rows[-1][3]:7.0f} {file_mb:7.0f}",
              flush=True)  # fmt: skip
        peak[0] = now

    threading.Thread(target=sample, daemon=True).start()
    print(f"{'part':<44s} {'MiB':>7s} {'added':>7s} {'peak':>7s} {'file':>7s}")
    part("python")
    import torch  # noqa: F401

    part("import torch")
    import peft  # noqa: F401
    import transformers  # noqa: F401

    part("import transformers, peft")
    from vllm.v1.engine.llm_engine import LLMEngine  # noqa: F401

    from marlaas.executors.backends import (
        EngineSizing,
        engine_kv_tokens,
        make_generator,
        max_positions,
    )
    from marlaas.executors.peft_trainer import PeftTrainer
    from marlaas.executors.rollout import TrainSample
    from marlaas.workload_file import apply_overrides, load_workload

    part("import vllm's engine, marlaas")
    trace, model = RUNS[name]
    workload = load_workload(trace)
    if kv_tokens is not None:
        workload = apply_overrides(workload, {"cluster.engine.kv_tokens": kv_tokens})
    max_len = max_positions(model)
    loop = asyncio.new_event_loop()

    async def engine():
        return make_generator("vllm", model, EngineSizing.of_workload(workload), max_len, 0, "cpu")

    gen = loop.run_until_complete(engine())
    kv_tokens = engine_kv_tokens(EngineSizing.of_workload(workload), max_len)
    part(f"vLLM engine, KV cache {kv_tokens:,} tokens")
    trainer = PeftTrainer(model, shared_weights=gen.plain_weights())  # as a run builds it
    for i, job in enumerate(workload.jobs):
        trainer.add_job(job.name, rank=job.lora_rank, seed=i)
    part(f"trainer, {len(workload.jobs)} LoRA jobs (weights mapped)")
    question = "What is {}*{}+{}? Use CALC: <expr> to compute it."
    chat = gen.tokenizer.apply_chat_template
    messages = [[{"role": "user", "content": question.format(i, i + 3, i + 1)}] for i in range(8)]
    prompts = [chat(m, add_generation_prompt=True, tokenize=False) for m in messages]
    groups = loop.run_until_complete(gen.generate(None, 0, prompts, 8, 24, 0.7, 0))
    part("generate 64 sequences x 24 tokens")
    rng = random.Random(0)
    completions = [c for group in groups for c in group][:35]
    samples = [
        TrainSample(c.prompt_ids, c.completion_ids, c.logprobs, rng.random(), i // 8, 0)
        for i, c in enumerate(completions)
    ]
    job = workload.jobs[-1].name
    for step in range(3):
        trainer.train_step(job, samples)
        part(f"train step {step} (35 samples, micro-batches of {trainer.micro_batch_size})")
    done.set()
    loop.run_until_complete(gen.close())
    return rows


def main() -> int:
    """Measure the runs named on the command line and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", choices=sorted(RUNS), default=["tiny", "smollm2"])
    parser.add_argument("--steps", type=int, default=2, help="training steps per job")
    parser.add_argument("--period", type=float, default=0.1, help="sampling period [s]")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="the SmolLM2 run's parts one by one in this process",
    )
    parser.add_argument(
        "--kv-tokens", type=int, help="--breakdown: the workload's cluster.engine.kv_tokens instead"
    )
    args = parser.parse_args()
    if args.breakdown:
        breakdown("smollm2", args.kv_tokens)
        return 0
    rows = []
    for name in args.runs:
        if not _ensure_model(name):
            print(f"skipping {name}: {RUNS[name][1]} is missing", file=sys.stderr)
            continue
        print(f"{name}: {args.steps} steps per job ...", file=sys.stderr, flush=True)
        rows.append(measure(name, args.steps, args.period))
    print_rows(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
