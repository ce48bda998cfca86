"""Staleness: how many adapter versions a training batch's oldest sample lags, per job."""

from __future__ import annotations

import numpy as np
import pandas as pd

from marlaas.metrics.jobs import train_ops
from marlaas.metrics.natural_order import natural_key


def train_staleness(df: pd.DataFrame) -> pd.DataFrame:
    """Staleness of every train step operation (once per step, not per device): columns
    ``job``, ``tenant``, ``staleness`` [versions]."""
    ops = train_ops(df)
    train = ops[ops["staleness"] >= 0]
    return pd.DataFrame(
        {
            "job": train["job"].astype(object).to_numpy(),
            "tenant": train["tenant"].astype(object).to_numpy(),
            "staleness": train["staleness"].to_numpy(dtype=np.int64),
        }
    )


def staleness_table(df: pd.DataFrame) -> pd.DataFrame:
    """Staleness per job from the train rows (versions a batch's oldest sample lags).

    Columns: ``job``, ``tenant``, ``train_steps``, ``staleness_mean``, ``staleness_p90``,
    ``staleness_max`` [versions].
    """
    st = train_staleness(df)
    grouped = st.groupby("job", sort=False)["staleness"]
    out = pd.DataFrame(
        {
            "tenant": st.groupby("job", sort=False)["tenant"].first(),
            "train_steps": grouped.size(),
            "staleness_mean": grouped.mean(),
            "staleness_p90": grouped.quantile(0.9),
            "staleness_max": grouped.max(),
        }
    )
    out = out.reindex(sorted(out.index, key=natural_key))
    out.index.name = "job"
    return out.reset_index()


def staleness_counts(df: pd.DataFrame) -> pd.DataFrame:
    """Train steps per job (rows) and staleness value [versions] (columns)."""
    st = train_staleness(df)
    table = pd.crosstab(st["job"], st["staleness"])
    table = table.reindex(sorted(table.index, key=natural_key))
    table.columns.name = "staleness"
    return table
