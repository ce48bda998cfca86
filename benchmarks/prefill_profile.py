"""The h100-7b and a100-7b profiles' prefill terms, fitted to Vidur's measured kernels, and the
error tables of the prefill model before (one tokens-per-second rate) and after (a fixed
floor per prefill plus a per-token rate).

    python benchmarks/prefill_profile.py

Measured prefill of T prompt tokens [ms] = the 32 layers' linear ops and norms at T tokens
(Vidur's mlp.csv medians, benchmarks/data/vidur-llama2-7b-linear-ops.csv, every num_tokens
Vidur profiled: 1 to 4096) + attention prefill. Attention is the A100 attention.csv's
attn_prefill per layer [S2 of the profiles]: 0.015 ms at 64-80 tokens (kv 0) and 0.256 ms at
960 tokens (8.2 ms / 32 layers, the a100-7b profile's reading), joined by a + b T²
(FlashAttention's prefill FLOPs grow with T²); H100 = A100 / 1.8 (the profiles' assumption:
no readable H100 7B attention.csv). Attention is under 10% of a prefill below 1,000 tokens.

The fit minimises the squared relative error over the measured T up to FIT_MAX_TOKENS
(non-negative least squares on [1, T] weighted by 1 / measured): short and long prompts count
alike. Beyond it attention's T² term, which neither model has, dominates (the 4096 row).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

DATA = Path(__file__).resolve().parent / "data" / "vidur-llama2-7b-linear-ops.csv"
LAYERS = 32
ATTN_A100_SMALL = (64, 0.015)
"""(tokens, attn_prefill median [ms per layer]) at kv 0, A100 [S2]."""
ATTN_A100_LARGE = (960, 8.2 / LAYERS)
"""(tokens, attn_prefill [ms per layer]), A100 [S2], as the a100-7b profile read it."""
H100_ATTENTION_SPEEDUP = 1.8
BEFORE = {"h100": 38_000.0, "a100": 13_500.0}
"""The profiles' prefill_tokens_per_s before the floor [tokens/s]."""
FIT_MAX_TOKENS = 2048
"""Longest prompt the fit covers [tokens]."""
SHOWN = (16, 64, 128, 256, 512, 1024, 2048, 4096)
"""Prompt lengths of the tables [tokens]."""


def attention_ms(hardware: str, tokens: np.ndarray) -> np.ndarray:
    """Attention prefill of ``tokens`` over 32 layers [ms]."""
    (t0, a0), (t1, a1) = ATTN_A100_SMALL, ATTN_A100_LARGE
    b = (a1 - a0) / (t1**2 - t0**2)
    a = a0 - b * t0**2
    per_layer = a + b * np.asarray(tokens, float) ** 2
    scale = 1.0 / H100_ATTENTION_SPEEDUP if hardware == "h100" else 1.0
    return LAYERS * per_layer * scale


def measured() -> pd.DataFrame:
    """Columns hardware, tokens, linear_ms, attention_ms, measured_ms."""
    frame = pd.read_csv(DATA, comment="#")
    pairs = zip(frame.hardware, frame.tokens, strict=True)
    frame["attention_ms"] = [attention_ms(h, t) for h, t in pairs]
    frame["measured_ms"] = frame["linear_ms"] + frame["attention_ms"]
    return frame


def fit(rows: pd.DataFrame) -> tuple[float, float]:
    """(floor [ms], rate [tokens/s]) of ``measured = floor + tokens / rate``, non-negative,
    by least squares on the relative error."""
    t, y = rows["tokens"].to_numpy(float), rows["measured_ms"].to_numpy(float)
    design = np.column_stack([np.ones_like(t), t]) / y[:, None]
    (floor, per_token), _ = nnls(design, np.ones_like(y))
    return float(floor), 1e3 / float(per_token)


def table(rows: pd.DataFrame, floor_ms: float, rate: float, before_rate: float) -> str:
    """Measured vs before vs after at the SHOWN prompt lengths, as aligned text."""
    lines = [f"{'tokens':>6} {'measured':>9} {'before':>9} {'error':>7} {'after':>9} {'error':>7}"]
    for t in SHOWN:
        m = float(rows.loc[rows.tokens == t, "measured_ms"].iloc[0])
        b, a = t / before_rate * 1e3, floor_ms + t / rate * 1e3
        lines.append(f"{t:>6} {m:>7.2f}ms {b:>7.2f}ms {b / m - 1:>+7.0%} {a:>7.2f}ms "
                     f"{a / m - 1:>+7.0%}")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    frame = measured()
    for hardware in ("h100", "a100"):
        rows = frame[frame.hardware == hardware]
        fitted = rows[rows.tokens <= FIT_MAX_TOKENS]
        floor_ms, rate = fit(fitted)
        t, y = fitted["tokens"].to_numpy(float), fitted["measured_ms"].to_numpy(float)
        before = np.abs(t / BEFORE[hardware] * 1e3 / y - 1)
        after = np.abs((floor_ms + t / rate * 1e3) / y - 1)
        print(f"{hardware}: prefill_base_ms {floor_ms:.2f}, prefill_tokens_per_s {rate:,.0f} "
              f"({len(fitted)} measured T, 1-{FIT_MAX_TOKENS} tokens)")  # fmt: skip
        print(f"  mean |error| over the fitted T: before {before.mean():.1%} (max "
              f"{before.max():.0%}), after {after.mean():.1%} (max {after.max():.0%})")  # fmt: skip
        print(table(rows, floor_ms, rate, BEFORE[hardware]))
        print()


if __name__ == "__main__":
    main()
