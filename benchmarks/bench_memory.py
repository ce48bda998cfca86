"""Peak resident memory of real runs, as a ratio to the model's weight files.

    python benchmarks/bench_memory.py                    # the tiny run, then SmolLM2 (2 steps)
    python benchmarks/bench_memory.py --runs tiny        # seconds
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

from marlaas.executors.memory import descendants, hwm_mb, rss_mb, weights_mb

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
                pids = [proc.pid, *descendants(proc.pid)]
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


def main() -> int:
    """Measure the runs named on the command line and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", choices=sorted(RUNS), default=["tiny", "smollm2"])
    parser.add_argument("--steps", type=int, default=2, help="training steps per job")
    parser.add_argument("--period", type=float, default=0.1, help="sampling period [s]")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args()
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
