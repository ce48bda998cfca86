"""marlaas.metrics.adapter_loads: engine loads per generated group."""

from __future__ import annotations

import pandas as pd

from marlaas.metrics.adapter_loads import loads_per_group
from marlaas.metrics.summary import summarize
from tests.metrics.examples import multi_device
from tests.synthetic import make_frame


def test_loads_per_group_counts_engine_loads_only():
    df = multi_device()
    assert loads_per_group(df) is None  # nothing generated
    generated = [
        dict(kind="generate", device="rollout/0", pool="rollout", tenant="a", job="j",
             start_s=6.2 + i, end_s=6.9 + i, version=1, tokens=10)
        for i in range(4)
    ]  # fmt: skip
    df = pd.concat([df, make_frame(generated)], ignore_index=True)
    assert loads_per_group(df) == 2 / 4  # the trainer's swap-in is not an engine's
    assert summarize(df)["loads_per_group"] == 0.5
