"""Fit the engine model's decode and prefill terms to a real run's generation rows.

The simulator's engine (marlaas.sim.engine_model) spends, on a group of k decode iterations,

    k * (base + per_seq * n + per_kv * C + per_adapter * L) + A * prefill_base + P / prefill_rate

where, while the group runs on its engine, n is the number of running sequences, C the context
tokens they hold, L the distinct adapters it holds at once (as the simulator counts them, not
every adapter that passed through the span), P the prompt tokens prefilled on that engine (its
own and those of groups admitted beside it: decode pauses for them; with prefix caching a
group's shared prompt blocks once, as the simulator counts them) and A the groups admitted
(prefills). Engines on one shared processor take turns, step by step (the real executor runs
every in-process engine on one thread): each iteration of one takes every busy engine's own,
and each waits for the others' prefills, so there n, C, L, P and A are summed over the
engines and base counts the busy engines (on an overlapped processor all of it is
overlap_decode_slowdown times slower while a training step runs: the rows' ``training``
column, the share of their span a step covered, :mod:`marlaas.twin.overlap_fit`). For each
real generate row those quantities are the time-weighted means over its span, read from the
event log (k = its longest sample's tokens, which decide when the group ends), and the six
coefficients are fitted by non-negative least squares on the rows' durations. A run that
warmed its engines up before its clock started (marlaas.executors.warmup: its summary's
``engine_warmup_s``) has no warm-up in any row; in an older run the rows of an engine's first
batch carry it: they are left out of the fit, and the warm-up is their mean residual.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from marlaas.core.cluster_spec import ClusterSpec, shared_prefix
from marlaas.twin.operations import distinct_mean, operations, overlap_mean
from marlaas.twin.overlap_fit import covered_fraction, spans

Z95 = 1.96
"""Standard errors either side of a coefficient that make its 95% interval (normal)."""

TERMS = ("decode_base_ms", "decode_per_seq_ms", "decode_per_kv_token_ms",
         "decode_per_adapter_ms", "prefill_s_per_token", "prefill_base_ms")  # fmt: skip


@dataclass(frozen=True)
class DecodeFit:
    """The fitted coefficients [s per unit] and the fit's quality."""

    coef: dict[str, float]
    """TERMS -> seconds per iteration (per sequence, per token, per adapter) or per prompt
    token."""
    warmup_s: float
    rows: int
    warmup_rows: int
    r2: float
    mape: float
    """Mean absolute percentage error of the fitted rows' durations."""
    stderr: dict[str, float] = field(default_factory=dict)
    """TERMS -> the standard error of each coefficient the fit left above its bound 0 (least
    squares on those terms' columns: sigma^2 (X'X)^-1; infinite where collinear columns do
    not determine it), in its units; none for a ridge fit."""
    batch_range: tuple[float, float] = (0.0, 0.0)
    """The 10th and 90th percentiles of the steady rows' mean running sequences (rows that
    decode)."""

    def unidentified(self) -> dict[str, tuple[float, float]]:
        """Terms whose 95% interval (value +- 1.96 standard errors) includes 0: the rows do
        not tell them from 0 -> (value, half-width of the interval)."""
        return {
            term: (self.coef[term], Z95 * se)
            for term, se in self.stderr.items()
            if Z95 * se >= self.coef[term] > 0
        }


def features(events: pd.DataFrame, cluster: ClusterSpec, warmed: bool = True) -> pd.DataFrame:
    """One row per successful generate operation: ``duration_s`` and the design columns, for a
    run on ``cluster`` (its shared processor and its engines' prefix caching); ``warmed``: the
    engines were warmed up before the run (else an engine's first batch is marked ``warm``: it
    carries the warm-up)."""
    gen = operations(events, "generate")
    if gen.empty:
        return gen
    prompt = gen["prompt_tokens"].clip(lower=0).to_numpy(float)
    shared = _shared_prompts(gen) if cluster.engine.prefix_caching else np.zeros(len(gen))
    mean = (gen["tokens"] / gen["seqs"].clip(lower=1)).to_numpy(float)
    longest = gen["longest_tokens"].to_numpy(float)
    k = np.where(longest >= 0, longest, mean)
    seqs = gen["seqs"].to_numpy(float)
    starts, ends = gen["start_s"].to_numpy(float), gen["end_s"].to_numpy(float)
    context = seqs * (prompt + mean / 2)  # the mean context a group holds over its span
    training = (
        covered_fraction(starts, ends, *spans(events, "train")) if cluster.overlapped
        else np.zeros(len(gen))
    )  # fmt: skip
    return _rows(gen, k, seqs, context, prompt, shared, training, warmed,
                 pooled=cluster.shared_processor)  # fmt: skip


def step_features(steps: pd.DataFrame, events: pd.DataFrame, cluster: ClusterSpec) -> pd.DataFrame:
    """The design rows of a run's measured engine steps (marlaas.executors.engine_steps), one
    per step, in :func:`features`' columns: each step is one iteration (``x_base`` 1 where it
    decodes; a prefill alone pays no iteration, as in the engine model) of its own engine
    (on a shared processor the simulator adds the other engines' steps itself: the turns), with
    its decoding sequences, their context tokens, its distinct adapters (where it decodes), the
    prompt tokens it prefilled and their groups."""
    decodes = (steps["decoding"] > 0).to_numpy(float)
    starts = steps["start_s"].to_numpy(float)
    ends = starts + steps["duration_s"].to_numpy(float)
    training = (
        covered_fraction(starts, ends, *spans(events, "train")) if cluster.overlapped
        else np.zeros(len(steps))
    )  # fmt: skip
    return pd.DataFrame({
        "row": np.arange(len(steps)), "device": steps["engine"].to_numpy(),
        "duration_s": steps["duration_s"].to_numpy(float), "warm": False, "x_base": decodes,
        "x_seq": steps["decoding"].to_numpy(float),
        "x_kv": steps["context_tokens"].to_numpy(float),
        "x_adapter": steps["adapters"].to_numpy(float) * decodes,
        "x_prefill": steps["prefill_tokens"].to_numpy(float),
        "x_prefills": steps["prefills"].to_numpy(float), "training": training,
    })  # fmt: skip


def _rows(gen, k, seqs, context, prompt, shared, training, warmed, pooled: bool):
    """The design rows. Each row's quantities come from the rows beside it on its engine;
    with ``pooled`` (engines on one processor, which take turns step by step: one thread runs
    every in-process engine), from every engine's, summed: an engine's iteration is the sum
    of every busy engine's own, and every engine waits for each one's prefill, so the
    iterations count the busy engines, and the running sequences, context tokens, distinct
    adapters (per engine, summed) and the prompt tokens and prefills are all the engines'."""
    starts, ends = gen["start_s"].to_numpy(float), gen["end_s"].to_numpy(float)
    adapters = gen[["job", "version"]].astype(str).agg("@".join, axis=1).to_numpy()
    devices = gen["device"].to_numpy()
    busy = _busy_engines(gen) if pooled else None
    first_end = _first_batch_ends(starts, ends, devices, warmed)
    rows = []
    for idx in gen.groupby("device", sort=False).indices.values():
        for i in idx:
            s, e = starts[i], ends[i]
            scope = np.ones(len(gen), dtype=bool) if pooled else devices == devices[i]
            live = scope & (starts < e) & (ends > s)
            n = overlap_mean(starts[live], ends[live], seqs[live], s, e)
            c = overlap_mean(starts[live], ends[live], context[live], s, e)
            distinct = sum(
                distinct_mean(starts[on], ends[on], adapters[on], s, e)
                for on in (live & (devices == d) for d in set(devices[live]))
            )
            admitted = scope & (starts >= s) & (starts < e)
            held = seqs[admitted]
            p = float((held * prompt[admitted] - (held - 1) * shared[admitted]).sum())
            engines = max(busy(s, e), 1.0) if busy is not None else 1.0
            rows.append({
                "row": i, "device": devices[i], "duration_s": e - s,
                "warm": s < first_end[devices[i]], "x_base": k[i] * engines,
                "x_seq": k[i] * n, "x_kv": k[i] * c, "x_adapter": k[i] * distinct,
                "x_prefill": p, "x_prefills": float(admitted.sum()), "training": training[i],
            })  # fmt: skip
    return pd.DataFrame(rows)


def _first_batch_ends(starts, ends, devices, warmed: bool) -> dict:
    """Each engine -> when its first batch ended (the rows that started before carry the
    warm-up in a run that did not warm its engines up before its clock); -inf if it did."""
    out = {}
    for device in set(devices):
        on = devices == device
        first = on & (starts == starts[on].min())
        out[device] = -np.inf if warmed else float(ends[first].max())
    return out


def _shared_prompts(gen: pd.DataFrame) -> np.ndarray:
    """Prompt tokens each row's samples shared on its engine, as the simulator counts them: the
    whole blocks of its group's first prompt (every turn's context begins with it; 0 where the
    log has no first turn of the group)."""
    first = gen[gen["turn"] == 0].drop_duplicates(["job", "group"])
    shared = {
        (job, group): shared_prefix(int(tokens))
        for job, group, tokens in first[["job", "group", "prompt_tokens"]].itertuples(False)
    }
    rows = gen[["job", "group", "prompt_tokens"]].itertuples(index=False)
    return np.array([min(shared.get((job, group), 0), max(int(tokens), 0))
                     for job, group, tokens in rows], dtype=float)  # fmt: skip


def _busy_engines(gen: pd.DataFrame):
    """Mean number of engines with work over a span (all engines on one processor)."""
    per_device = {
        d: (g["start_s"].to_numpy(float), g["end_s"].to_numpy(float))
        for d, g in gen.groupby("device", sort=False)
    }

    def busy(s: float, e: float) -> float:
        total = 0.0
        for starts, ends in per_device.values():
            lo, hi = np.maximum(starts, s), np.minimum(ends, e)
            total += _union_length(lo[hi > lo], hi[hi > lo]) / max(e - s, 1e-12)
        return total

    return busy


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    if not len(starts):
        return 0.0
    order = np.argsort(starts)
    total, cur_s, cur_e = 0.0, starts[order[0]], ends[order[0]]
    for s, e in zip(starts[order[1:]], ends[order[1:]], strict=True):
        if s > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + cur_e - cur_s


COLUMNS = ("x_base", "x_seq", "x_kv", "x_adapter", "x_prefill", "x_prefills")


def fit_decode(rows: pd.DataFrame, ridge: float = 0.0) -> DecodeFit:
    """Non-negative least squares of the steady rows' durations on the design columns, then
    the warm-up as the mean residual of each engine's first batch. ``ridge`` > 0 adds a
    Tikhonov penalty (relative to the columns' scales) that shares the duration among
    collinear terms instead of giving it all to one (runs of one policy often move batch size,
    context and adapters together)."""
    steady = rows[~rows["warm"]]
    if len(steady) < len(COLUMNS):
        raise ValueError(
            f"{len(steady)} steady generate rows; the fit needs at least {len(COLUMNS)}"
        )
    x = steady[list(COLUMNS)].to_numpy(float)
    y = steady["duration_s"].to_numpy(float)
    scale = np.where(x.max(axis=0) > 0, x.max(axis=0), 1.0)
    design, target = x / scale, y
    if ridge > 0:
        design = np.vstack([design, np.sqrt(ridge * len(y)) * np.eye(len(COLUMNS))])
        target = np.concatenate([y, np.zeros(len(COLUMNS))])
    beta, _ = nnls(design, target)
    beta = beta / scale
    pred = x @ beta
    r2 = 1 - float(((y - pred) ** 2).sum() / max(((y - y.mean()) ** 2).sum(), 1e-300))
    mape = float(np.mean(np.abs(pred - y) / np.maximum(y, 1e-9)))
    warm = rows[rows["warm"]]
    residual = warm["duration_s"].to_numpy(float) - warm[list(COLUMNS)].to_numpy(float) @ beta
    warmup = float(max(np.mean(residual), 0.0)) if len(warm) else 0.0
    stderr = {} if ridge > 0 else _standard_errors(x, y - pred, beta)
    iterating = x[:, 0] > 0
    running = x[iterating, 1] / x[iterating, 0]  # x_seq / x_base: mean running sequences
    low, high = np.percentile(running, [10, 90]) if len(running) else (0.0, 0.0)
    return DecodeFit(dict(zip(TERMS, beta.tolist(), strict=True)), warmup, len(steady),
                     len(warm), r2, mape, stderr, (float(low), float(high)))  # fmt: skip


def predict(rows: pd.DataFrame, fit: DecodeFit) -> np.ndarray:
    """The durations ``fit`` gives ``rows`` (their design columns) [s]."""
    return rows[list(COLUMNS)].to_numpy(float) @ np.array([fit.coef[t] for t in TERMS])


def _standard_errors(x: np.ndarray, residual: np.ndarray, beta: np.ndarray) -> dict[str, float]:
    """The standard error of each coefficient above its bound, as least squares on the
    columns of those terms gives it (conditional on which terms the non-negative fit kept,
    so it understates the uncertainty a little). On the scaled columns; a term in a direction
    the columns do not determine (collinear columns: numerical rank below the terms) has an
    infinite standard error."""
    free = np.flatnonzero(beta > 0)
    dof = len(residual) - len(free)
    if not len(free) or dof <= 0:
        return {}
    sigma2 = float(residual @ residual) / dof
    scale = np.where(np.abs(x[:, free]).max(axis=0) > 0, np.abs(x[:, free]).max(axis=0), 1.0)
    _, singular, vt = np.linalg.svd(x[:, free] / scale, full_matrices=False)
    tolerance = singular[0] * max(x.shape) * np.finfo(float).eps
    determined = singular > tolerance
    undetermined = np.abs(vt[~determined]).max(axis=0) > 1e-8 if (~determined).any() else 0
    variance = (vt[determined] ** 2 / singular[determined, None] ** 2).sum(axis=0) * sigma2
    se = np.where(undetermined, np.inf, np.sqrt(variance)) / scale
    return {TERMS[i]: float(se[j]) for j, i in enumerate(free)}
